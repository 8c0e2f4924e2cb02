/**
 * Node tokens for relay tests whose upstream is not a real server: a signing key made here, its
 * JWKS written where the relay keeps its cached copy (the relay verifies from that copy when the
 * upstream has none to give), and tokens issued with it. Relays require tokens by default.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import { generateSigningKey, issueNodeToken, jwksOf, RELAY_ROLE } from '@capstan/shared';

export interface TestTokens {
  /** Relay config overrides pointing at the JWKS of this key. */
  overrides: Record<string, string>;
  token(nodeId: string, ttlSeconds?: number): Promise<string>;
  /** A token of a node the server registered as a relay (`capstan_role: "relay"`). */
  relayToken(nodeId: string, ttlSeconds?: number): Promise<string>;
  /** `{ authorization: 'Bearer …' }` for the node. */
  auth(nodeId: string): Promise<Record<string, string>>;
}

export function testTokens(dir: string): TestTokens {
  const key = generateSigningKey();
  mkdirSync(dir, { recursive: true });
  const file = join(dir, 'jwks.json');
  writeFileSync(file, JSON.stringify(jwksOf([key])));
  const token = async (nodeId: string, ttlSeconds = 3600) => (await issueNodeToken({ key, nodeId, group: 'default', ttlSeconds })).token;
  return {
    overrides: { 'identity.jwks_cache_file': file },
    token,
    relayToken: async (nodeId, ttlSeconds = 3600) => (await issueNodeToken({ key, nodeId, group: 'default', role: RELAY_ROLE, ttlSeconds })).token,
    auth: async (nodeId) => ({ authorization: `Bearer ${await token(nodeId)}` }),
  };
}
