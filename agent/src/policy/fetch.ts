/**
 * Fetch this node's policy from its relay: conditional GET with the last ETag, verification
 * against the pinned policy key, and the last good policy kept on disk. The agent always has
 * something to run: the fresh bundle, or the cached one when the relay is unreachable or sends
 * something that does not verify (that refusal is reported in the run log).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { httpRequest } from '../queue/http.js';
import { capstanError } from '@capstan/shared/errors';
import { policyKeyId, verifyBundle, type PolicyBundle } from '@capstan/shared/policy/bundle';
import { followEndorsements } from '@capstan/shared/policy/keys';
import { HEADER_PROTOCOL, PROTOCOL_VERSION, userAgent } from '@capstan/shared/protocol';
import { writeAtomic } from '../identity/state.js';
import { checkGeneration, generationFloor, raiseGeneration } from './generation.js';

/** Largest policy response the agent reads. */
export const MAX_BUNDLE_BYTES = 32 * 1024 * 1024;

export interface PinnedKey {
  keyId: string;
  publicKeyPem: string;
}

export interface PolicyState {
  /** The bundle to run with, or null when the node has never had one. */
  bundle: PolicyBundle | null;
  source: 'fresh' | 'not-modified' | 'cache' | 'none';
  /** Why a fresh bundle was not used (unreachable relay, refused signature…). */
  problem?: { code: string; message: string; refused: boolean };
}

interface CacheFiles {
  bundle: string;
  etag: string;
  key: string;
  /** Key id of the configured key a re-pinned key was reached from (see loadPinnedKey). */
  anchor: string;
}

function files(stateDir: string): CacheFiles {
  return { bundle: join(stateDir, 'policy.json'), etag: join(stateDir, 'policy.etag'), key: join(stateDir, 'policy-key.pem'), anchor: join(stateDir, 'policy-key.anchor') };
}

const readText = (p: string) => readFile(p, 'utf8').catch(() => null);

/**
 * The pinned policy key: the one pinned in the state directory (on first contact, or re-pinned
 * after following the server's endorsement chain through a key rotation), else the configured
 * one. With a key in the agent's config, a state pin counts only if it was reached from that very
 * key: an admin who configures another key (another server) starts over from it.
 */
export async function loadPinnedKey(stateDir: string, configured: string | null): Promise<PinnedKey | null> {
  const f = files(stateDir);
  const state = await readText(f.key);
  const pin = (pem: string) => ({ keyId: policyKeyId(pem), publicKeyPem: pem });
  if (configured) {
    if (state && policyKeyId(state) !== policyKeyId(configured) && (await readText(f.anchor))?.trim() === policyKeyId(configured)) return pin(state);
    return pin(configured);
  }
  return state ? pin(state) : null;
}

/** How requests prove the node's identity: its token, renewed by signed request on a 401. */
export interface NodeAuth {
  current(): Promise<string | null>;
  renew(): Promise<string>;
}

export async function fetchPolicy(opts: {
  relay: string;
  nodeId: string;
  stateDir: string;
  timeoutMs: number;
  configuredKeyPem: string | null;
  auth?: NodeAuth;
}): Promise<PolicyState> {
  const f = files(opts.stateDir);
  let pinned = await loadPinnedKey(opts.stateDir, opts.configuredKeyPem);
  // A cache the agent cannot read back (disk trouble, a hand edit) is no cache: fetch afresh.
  let cached: PolicyBundle | null = null;
  try {
    const text = await readText(f.bundle);
    const parsed = text ? (JSON.parse(text) as PolicyBundle) : null;
    cached = parsed && typeof parsed.config_id === 'string' && Array.isArray(parsed.directives) ? parsed : null;
  } catch {
    cached = null;
  }
  const fallback = (problem: PolicyState['problem']): PolicyState => ({ bundle: cached, source: cached ? 'cache' : 'none', problem });

  let res;
  try {
    const etag = cached ? await readText(f.etag) : null;
    const get = (token: string | null) =>
      httpRequest({
        method: 'GET',
        url: `${opts.relay}/policies/${encodeURIComponent(opts.nodeId)}/rules`,
        headers: {
          'user-agent': userAgent('capstan-agent'),
          [HEADER_PROTOCOL]: PROTOCOL_VERSION,
          ...(etag ? { 'if-none-match': etag.trim() } : {}),
          ...(token ? { authorization: `Bearer ${token}` } : {}),
        },
        timeoutMs: opts.timeoutMs,
        maxResponseBytes: MAX_BUNDLE_BYTES,
      });
    res = await get((await opts.auth?.current()) ?? null);
    // Expired or unknown token: renew with the signed request and try once more, in this run.
    if (res.status === 401 && opts.auth) {
      const fresh = await opts.auth.renew().catch(() => null);
      if (fresh) res = await get(fresh);
    }
  } catch (err) {
    return fallback({ code: 'ERR_UPSTREAM', message: `relay unreachable: ${(err as Error).message}`, refused: false });
  }
  const body = res.body.toString('utf8');
  if (res.status === 304 && cached) return { bundle: cached, source: 'not-modified' };
  if (res.status === 404) return fallback({ code: 'ERR_NOT_FOUND', message: 'no policy for this node yet', refused: false });
  if (res.status !== 200) return fallback({ code: 'ERR_UPSTREAM', message: `relay answered ${res.status}`, refused: false });

  try {
    let signed: Record<string, unknown>;
    try {
      signed = JSON.parse(body) as Record<string, unknown>;
    } catch {
      throw capstanError('ERR_POLICY_INVALID', 'policy response is not JSON');
    }
    // Trust on first use only when no key is configured or pinned yet (DESIGN.md: pinned at enrollment).
    let firstPin: string | null = null;
    if (!pinned) {
      if (typeof signed.public_key !== 'string') throw capstanError('ERR_POLICY_SIGNATURE', 'no pinned policy key and none offered');
      pinned = { keyId: policyKeyId(signed.public_key), publicKeyPem: signed.public_key };
      firstPin = signed.public_key;
    }
    // A rotated server key: trusted only through endorsements from the pinned key, then pinned.
    let repinned: PinnedKey | null = null;
    if (typeof signed.key_id === 'string' && signed.key_id !== pinned.keyId) {
      repinned = followEndorsements(pinned, signed.endorsements, signed.key_id);
    }
    const bundle = verifyBundle(signed, repinned ?? pinned, opts.nodeId);
    // Never older than what was applied already (generation.ts): a relay replaying a signed bundle.
    const root = opts.configuredKeyPem ? policyKeyId(opts.configuredKeyPem) : 'tofu';
    const floor = await generationFloor(opts.stateDir, opts.nodeId, root);
    checkGeneration(bundle, floor);
    if (firstPin) await writeAtomic(f.key, firstPin, 0o644);
    if (repinned) {
      if (opts.configuredKeyPem) await writeAtomic(f.anchor, policyKeyId(opts.configuredKeyPem), 0o644);
      await writeAtomic(f.key, repinned.publicKeyPem, 0o644);
    }
    await writeAtomic(f.bundle, JSON.stringify(bundle), 0o600);
    await raiseGeneration(opts.stateDir, opts.nodeId, root, floor, bundle);
    const etag = res.headers.etag;
    if (typeof etag === 'string') await writeAtomic(f.etag, etag, 0o600);
    return { bundle, source: 'fresh' };
  } catch (err) {
    const e = err as { code?: string; message: string };
    return fallback({ code: e.code ?? 'ERR_POLICY_INVALID', message: e.message, refused: true });
  }
}
