/**
 * What the relay checks node tokens with: the server's public keys fetched through the upstream
 * (jwks.ts keeps them), and the synced nodes list for what a token alone cannot say (a relay no
 * longer registered, tokens revoked by a forced renewal, keys an admin deleted).
 */
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { RelaydConfig } from '../config.js';
import type { Routing } from '../data/routing.js';
import type { NodesSync } from '../data/sync.js';
import type { Upstream } from '../forward/upstream.js';
import { JwksCache } from './jwks.js';
import type { RelayIdentity } from './routes.js';
import { nodeTokenVerifier } from './verify.js';

/** The JWKS copy, read from disk with a fetch from the upstream started behind it. */
export async function openJwks(config: RelaydConfig, upstream: Upstream, log: Logger): Promise<JwksCache> {
  const jwks = new JwksCache({
    fetch: async () => {
      // A few kB: a short timeout, so a hung upstream never holds a token check or close() long.
      const res = await upstream.request({ method: 'GET', path: '/.well-known/jwks.json', timeoutMs: Math.min(config.upstream.timeout, 10_000) });
      const body = Buffer.from(await res.body.arrayBuffer());
      if (res.statusCode !== 200) throw capstanError('ERR_UPSTREAM', `upstream answered ${res.statusCode} for its JWKS`);
      return body;
    },
    file: config.identity.jwks_cache_file || join(config.spool.directory, 'jwks.json'),
    minRefreshMs: config.identity.jwks_min_refresh,
    maxAgeMs: config.identity.jwks_max_age,
    log,
  });
  await jwks.init();
  return jwks;
}

/**
 * The synced list names the key ids the server publishes: a key an admin deleted leaves the
 * JWKS copy at this sync, not when the copy ages out (identity.jwks_max_age).
 */
export function retainPublishedKeys(sync: NodesSync | null, jwks: JwksCache | null): void {
  const kids = sync?.keys;
  // Only a list the upstream confirmed in this run: the cached one read at start may predate a
  // key fetched since (a rotation), which it would drop while the upstream is down.
  if (kids && jwks && sync!.confirmedAt > 0) void jwks.retain(kids);
}

/** The identity part of the relay's context: token checks as the configuration asks for them. */
export function relayIdentity(config: RelaydConfig, jwks: JwksCache, routing: Routing): RelayIdentity {
  return {
    jwks,
    verifier: nodeTokenVerifier(jwks, Math.floor(config.identity.clock_skew / 1000)),
    requireToken: config.identity.require_token,
    requireRelayToken: config.identity.require_relay_token,
    tokensAfter: (id) => routing.tokensAfter(id),
    relayListed: (id) => routing.relayListed(id),
  };
}
