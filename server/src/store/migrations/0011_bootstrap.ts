/**
 * Version 11: agent bootstrap over SSH (docs/bootstrap.md).
 * - ssh_credentials: private keys (and passwords) sealed like the keyring's keys, each with the
 *   selectors it applies to; the API never shows `sealed`.
 * - node_host_keys: the SSH host key pinned per node on first use; a bootstrap that meets another
 *   key stops until an admin clears the pin. Moves with its node when an agent adopts the row,
 *   and goes with it when the node is deleted (a later node of the same id starts unpinned).
 * - enrol_tokens: the enrollment secret of one bootstrap task, stored as its sha256, valid until
 *   the job's deadline, used once.
 * - job_tasks.step: where a bootstrap task is (connect, verify, copy, install, enrol, done).
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE ssh_credentials (
  id TEXT PRIMARY KEY,
  user TEXT NOT NULL,
  port INTEGER NOT NULL,
  selectors TEXT NOT NULL,
  fingerprint TEXT,
  has_password INTEGER NOT NULL,
  sealed TEXT NOT NULL,
  created_at TEXT NOT NULL
) STRICT;

CREATE TABLE node_host_keys (
  node_id TEXT PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  algorithm TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  pinned_at TEXT NOT NULL,
  job_id TEXT
) STRICT;

CREATE TABLE enrol_tokens (
  digest TEXT PRIMARY KEY,
  job_id TEXT NOT NULL,
  node_id TEXT NOT NULL,
  expires_at TEXT NOT NULL,
  used_at TEXT,
  used_by TEXT
) STRICT;
CREATE INDEX enrol_tokens_task ON enrol_tokens (job_id, node_id);
CREATE INDEX enrol_tokens_expires ON enrol_tokens (expires_at);

ALTER TABLE job_tasks ADD COLUMN step TEXT;
`;

const postgres = `
CREATE TABLE ssh_credentials (
  id text COLLATE "C" PRIMARY KEY,
  "user" text NOT NULL,
  port integer NOT NULL,
  selectors jsonb NOT NULL,
  fingerprint text,
  has_password boolean NOT NULL,
  sealed text NOT NULL,
  created_at timestamptz NOT NULL
);

CREATE TABLE node_host_keys (
  node_id text COLLATE "C" PRIMARY KEY REFERENCES nodes (id) ON DELETE CASCADE,
  algorithm text NOT NULL,
  fingerprint text NOT NULL,
  pinned_at timestamptz NOT NULL,
  job_id text
);

CREATE TABLE enrol_tokens (
  digest text PRIMARY KEY,
  job_id text COLLATE "C" NOT NULL,
  node_id text COLLATE "C" NOT NULL,
  expires_at timestamptz NOT NULL,
  used_at timestamptz,
  used_by text
);
CREATE INDEX enrol_tokens_task ON enrol_tokens (job_id, node_id);
CREATE INDEX enrol_tokens_expires ON enrol_tokens (expires_at);

ALTER TABLE job_tasks ADD COLUMN step text;
`;

export const bootstrap: Migration = { version: 11, name: 'bootstrap', sqlite, postgres };
