/** Signing keys for node tokens, and the JWKS relays fetch to verify them. */
import { createHash, generateKeyPairSync } from 'node:crypto';
import type { JSONWebKeySet, JWK } from 'jose';
import type { SigningKey, TokenAlg } from './token.js';

/** A new signing key. Its kid is derived from the public key, so it is stable and unique. */
export function generateSigningKey(alg: TokenAlg = 'EdDSA'): SigningKey {
  const { privateKey, publicKey } = alg === 'EdDSA' ? generateKeyPairSync('ed25519') : generateKeyPairSync('rsa', { modulusLength: 2048 });
  const publicJwk = publicKey.export({ format: 'jwk' }) as JWK;
  // Hex, not base64url: a kid starting with '-' was read as an option by `capstan-server keys
  // delete <kid>` (a regression the identity e2e test hit about one run in 64).
  const kid = createHash('sha256').update(publicKey.export({ type: 'spki', format: 'der' })).digest('hex').slice(0, 16);
  return {
    kid,
    alg,
    privateJwk: { ...(privateKey.export({ format: 'jwk' }) as JWK), kid, alg },
    publicJwk: { ...publicJwk, kid, alg, use: 'sig' },
  };
}

/** The JWKS document: public keys only, whatever the caller passes. */
export function jwksOf(keys: Array<Pick<SigningKey, 'publicJwk'>>): JSONWebKeySet {
  return {
    keys: keys.map(({ publicJwk }) => {
      const { d: _d, p: _p, q: _q, dp: _dp, dq: _dq, qi: _qi, ...pub } = publicJwk as JWK & Record<string, unknown>;
      return pub as JWK;
    }),
  };
}
