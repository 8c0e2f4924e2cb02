/** The [identity] section checked beyond its types: per-group TTLs and the key algorithm. */
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import type { TokenAlg } from '@capstan/shared/identity/token';

export interface IdentitySettings {
  ttlMs: number;
  groupTtlMs: ReadonlyMap<string, number>;
  alg: TokenAlg;
  clockSkewSeconds: number;
}

const GROUP = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

export function identitySettings(c: { token_ttl: number; group_ttls?: string; key_alg: string; clock_skew: number }): IdentitySettings {
  if (c.key_alg !== 'EdDSA' && c.key_alg !== 'RS256') throw capstanError('ERR_CONFIG', 'identity.key_alg must be "EdDSA" or "RS256"');
  const groups = new Map<string, number>();
  for (const part of (c.group_ttls ?? '').split(',').map((p) => p.trim()).filter(Boolean)) {
    const eq = part.indexOf('=');
    const name = part.slice(0, eq).trim();
    const ms = eq > 0 ? parseDuration(part.slice(eq + 1)) : null;
    if (eq <= 0 || !GROUP.test(name) || ms === null) throw capstanError('ERR_CONFIG', `identity.group_ttls: "${part}" is not group=duration`);
    // No eternal tokens, and none shorter than a second (JWT times are whole seconds).
    if (ms < 1000) throw capstanError('ERR_CONFIG', `identity.group_ttls: ${name} needs a TTL of at least 1s (0 is refused)`);
    if (groups.has(name)) throw capstanError('ERR_CONFIG', `identity.group_ttls: ${name} is given twice`);
    groups.set(name, ms);
  }
  return { ttlMs: c.token_ttl, groupTtlMs: groups, alg: c.key_alg, clockSkewSeconds: Math.floor(c.clock_skew / 1000) };
}
