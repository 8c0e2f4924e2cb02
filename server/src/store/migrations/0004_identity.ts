/**
 * Version 4: node identity in the registry, so every server on one database shares
 * the keyring, the nodes' current tokens and the renewal nonces (one JWKS, one replay check).
 * - identity_keys: the signing keyring. The private key is sealed (AES-256-GCM, with the key-
 *   encryption secret every server is given as a file): a dump or a replica of the database
 *   never carries a usable signing key. At most one key is active (partial unique index), so two
 *   servers creating the first key at once end with one.
 * - identity_tokens: each node's current token (the kid that signed it, its times) and the time
 *   before which its tokens are refused (forced renewal). Goes with the node.
 * - identity_nonces: renewal nonces seen, each until its request could no longer be fresh.
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE identity_keys (
  kid TEXT PRIMARY KEY,
  alg TEXT NOT NULL,
  active INTEGER NOT NULL DEFAULT 0,
  public_jwk TEXT NOT NULL,
  sealed_private TEXT NOT NULL,
  created_at TEXT NOT NULL,
  retired_at TEXT,
  max_exp INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE UNIQUE INDEX identity_keys_one_active ON identity_keys (active) WHERE active = 1;

CREATE TABLE identity_tokens (
  node_id TEXT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  kid TEXT NOT NULL,
  jti TEXT NOT NULL,
  iat INTEGER NOT NULL,
  exp INTEGER NOT NULL,
  forced_after INTEGER NOT NULL DEFAULT 0
) STRICT;
CREATE INDEX identity_tokens_kid ON identity_tokens (kid, exp);

CREATE TABLE identity_nonces (
  nonce TEXT PRIMARY KEY,
  until INTEGER NOT NULL
) STRICT;
CREATE INDEX identity_nonces_until ON identity_nonces (until);
`;

const postgres = `
CREATE TABLE identity_keys (
  kid text COLLATE "C" PRIMARY KEY,
  alg text NOT NULL,
  active boolean NOT NULL DEFAULT false,
  public_jwk text NOT NULL,
  sealed_private text NOT NULL,
  created_at timestamptz NOT NULL,
  retired_at timestamptz,
  max_exp bigint NOT NULL DEFAULT 0
);
CREATE UNIQUE INDEX identity_keys_one_active ON identity_keys (active) WHERE active;

CREATE TABLE identity_tokens (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  kid text COLLATE "C" NOT NULL,
  jti text NOT NULL,
  iat bigint NOT NULL,
  exp bigint NOT NULL,
  forced_after bigint NOT NULL DEFAULT 0
);
CREATE INDEX identity_tokens_kid ON identity_tokens (kid, exp);

CREATE TABLE identity_nonces (
  nonce text COLLATE "C" PRIMARY KEY,
  until bigint NOT NULL
);
CREATE INDEX identity_nonces_until ON identity_nonces (until);
`;

export const identity: Migration = { version: 4, name: 'identity', sqlite, postgres };
