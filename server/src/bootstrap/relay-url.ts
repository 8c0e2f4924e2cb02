/**
 * Which relay URL a bootstrap job may write into the agents it installs (docs/bootstrap.md, Relay
 * URL). The agent trusts that URL with its inventories and fetches its policy there, so an
 * operator may only pick one the server already knows: `[bootstrap] relay_url`, an entry of
 * `[bootstrap] allowed_relay_urls`, or a URL whose host is a registered relay's (its hostname,
 * address or id). Any other URL needs the admin role (403 ERR_BOOTSTRAP_RELAY_URL).
 */
import { capstanError } from '@capstan/shared/errors';
import type { Actor } from '../audit/actor.js';
import type { Store } from '../store/store.js';

export interface RelayUrlRules {
  /** `[bootstrap] relay_url` ('' none). */
  defaultUrl?: string;
  /** `[bootstrap] allowed_relay_urls`. */
  allowed?: readonly string[];
}

/** Most relays read to match a URL's host against (registered relays are few). */
const MAX_RELAYS = 1000;

/** A URL as compared: parsed and serialised again (case of the host, default port, trailing slash). */
function normal(url: string): string | null {
  try {
    const u = new URL(url);
    return `${u.protocol}//${u.host}${u.pathname.replace(/\/+$/, '')}`;
  } catch {
    return null;
  }
}

/** Whether `url` is one the server knows (see above), whoever asks. */
export async function knownRelayUrl(store: Pick<Store, 'listNodes'>, url: string, rules: RelayUrlRules): Promise<boolean> {
  const want = normal(url);
  if (!want) return false;
  for (const u of [rules.defaultUrl ?? '', ...(rules.allowed ?? [])]) if (u && normal(u) === want) return true;
  const host = new URL(url).hostname.toLowerCase().replace(/^\[|\]$/g, '');
  const relays = await store.listNodes({ filters: [{ key: 'relay', values: ['true'] }], page: 1, per_page: MAX_RELAYS });
  return relays.data.some((r) => r.accepted !== 'refused' && [r.hostname, r.address, r.id].some((h) => typeof h === 'string' && h.toLowerCase() === host));
}

/** Refuse an operator's bootstrap job naming a URL the server does not know; the admin role may. */
export async function checkRelayUrl(store: Pick<Store, 'listNodes'>, url: string, rules: RelayUrlRules, actor: Actor): Promise<void> {
  if (await knownRelayUrl(store, url, rules)) return;
  if (actor.kind !== 'admin' || actor.role === 'admin') return;
  throw capstanError('ERR_BOOTSTRAP_RELAY_URL', `relay_url ${url} is not a registered relay's, [bootstrap] relay_url nor in [bootstrap] allowed_relay_urls: only the admin role may name it`);
}
