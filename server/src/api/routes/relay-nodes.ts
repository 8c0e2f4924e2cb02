/**
 * `GET /rudder/relay-api/1/nodes`: the accepted nodes in RUDDER's nodeslist.json shape
 * (`{"<id>": {"hostname", "policy-server", "key-hash", "relay"?, "tokens-after"?}}`), for relays to route by (relayd syncs it
 * and serves its copy to its own sub-relays). Wrapped in the relay API's envelope, so that a relay
 * can tell a list from an upstream that does not serve one:
 *
 *   {"data":{"nodes":{…},"keys":["<kid>",…]},"result":"success","action":"getNodesList"}
 *
 * `keys` (a Capstan extension) is the key ids the server's JWKS publishes: a relay drops from its
 * copy of the JWKS any key no longer listed (a key an admin deleted), at its next sync instead of
 * when its copy ages out.
 *
 * With a strong ETag (sha256 of the body): `If-None-Match` → 304. Every request reads the store
 * afresh (no server-side cache): a relay that asks because a node it does not know just sent a
 * run log must see an acceptance made a moment before, or it would refuse that file for good.
 *
 * Agent-facing like /uuid and the JWKS: node ids, host names and public-key hashes, no secret.
 */
import { createHash } from 'node:crypto';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import type { FastifyInstance } from 'fastify';
import { spkiOf } from '@capstan/shared/smime/certificate';
import { etagMatches } from '@capstan/toolkit/http/app';
import type { AcceptedNodeRow, Reads } from '../../reads.js';

export const RELAY_NODES_PATH = '/rudder/relay-api/1/nodes';

/** Page size when reading the accepted nodes (all are listed). */
const PAGE = 5_000;

/** RUDDER's key-hash: `sha256:<hex>` of the public key's SubjectPublicKeyInfo DER; null when unreadable. */
export function keyHashOf(certificatePem: string | null): string | null {
  if (!certificatePem) return null;
  try {
    return `sha256:${createHash('sha256').update(spkiOf(certificatePem)).digest('hex')}`;
  } catch {
    return null;
  }
}

/** Certificate fingerprint → key-hash: parsing every certificate on every request would dominate. */
const keyHashes = new Map<string, string | null>();
/** Fingerprints kept at most (about 150 bytes each); past it, pages are read with their certificates. */
const MAX_KEY_HASHES = 1_000_000;

export interface NodesListEntry {
  hostname: string;
  'policy-server': string;
  'key-hash'?: string;
  /**
   * Capstan extension: the node is a registered relay. Relays above a sub-relay drop its link,
   * and refuse new ones, once it is no longer listed as one (revoked, refused, deleted), instead
   * of trusting its token until it expires. Absent for other nodes (RUDDER's parser ignores it).
   */
  relay?: true;
  /**
   * Capstan extension: the node's tokens issued before this time (epoch seconds) were revoked by a
   * forced renewal. Relays verify tokens without state; with this they refuse those tokens, and end
   * the remote-run connections opened with them, at their next sync instead of at expiry.
   */
  'tokens-after'?: number;
}

/** Every accepted node, by id; a node without a known policy server is under this server (`rootId`). */
export async function acceptedNodesList(store: Reads, rootId: string): Promise<Record<string, NodesListEntry>> {
  const out: Record<string, NodesListEntry> = {};
  // Every forced renewal ever made (one row per node at most): old ones only repeat what expiry says.
  const forced = await store.identity.forcedRenewals(0);
  const add = (n: AcceptedNodeRow) => {
    let keyHash = n.certificate_fingerprint ? keyHashes.get(n.certificate_fingerprint) : undefined;
    if (keyHash === undefined) {
      keyHash = keyHashOf(n.certificate);
      if (n.certificate_fingerprint && keyHashes.size < MAX_KEY_HASHES) keyHashes.set(n.certificate_fingerprint, keyHash);
    }
    out[n.id] = { hostname: n.hostname, 'policy-server': n.policy_server || rootId, ...(keyHash ? { 'key-hash': keyHash } : {}), ...(n.relay ? { relay: true as const } : {}) };
    const after = forced.get(n.id);
    if (after) out[n.id]!['tokens-after'] = after;
  };
  // Pages by key from the primary (acceptedNodesPage): an offset page of the node list sorted and
  // counted every accepted node, and at 300,000 nodes the list took the server's event loop for
  // minutes at each relay's sync.
  for (let after = ''; ;) {
    // Certificates only for a page holding a fingerprint not yet hashed: once the cache holds the
    // fleet, a walk reads none (about 60 % of a walk of 300,000 nodes was their reading). A full
    // cache would have most pages read twice: they are read once, with their certificates.
    const full = keyHashes.size >= MAX_KEY_HASHES;
    let page = await store.acceptedNodesPage(after, PAGE, full);
    if (!full && page.some((n) => n.certificate_fingerprint !== null && !keyHashes.has(n.certificate_fingerprint))) {
      page = await store.acceptedNodesPage(after, PAGE, true);
    }
    for (const n of page) add(n);
    if (page.length < PAGE) break;
    after = page[page.length - 1]!.id;
    // A turn of the event loop between pages: every other request (uploads, the API) would
    // otherwise wait for the whole list.
    await yieldToLoop();
  }
  return out;
}

export interface RelayNodesDeps {
  store: Reads;
  rootId: string;
  /** The key ids the JWKS publishes, sorted (absent: no identity, no `keys`). */
  keys?: () => Promise<string[]>;
}

export function relayNodesRoutes(app: FastifyInstance, deps: RelayNodesDeps): void {
  app.get(RELAY_NODES_PATH, async (req, reply) => {
    const nodes = await acceptedNodesList(deps.store, deps.rootId);
    const keys = deps.keys ? await deps.keys() : undefined;
    const body = JSON.stringify({ data: { nodes, ...(keys && { keys }) }, result: 'success', action: 'getNodesList' });
    const etag = `"${createHash('sha256').update(body).digest('base64url')}"`;
    reply.header('etag', etag).header('cache-control', 'no-cache');
    if (etagMatches(req.headers['if-none-match'], etag)) return reply.code(304).send();
    return reply.type('application/json').send(body);
  });
}
