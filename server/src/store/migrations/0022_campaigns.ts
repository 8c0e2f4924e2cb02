/**
 * Version 22: patch campaigns (docs/campaigns.md). One row per campaign with its whole document
 * (spec, waves, per-node results) as JSON, a version for optimistic saves, and next_at for the
 * runner's "what is due" scan. Its waves' jobs are ordinary rows of `jobs` (type upgrade).
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE campaigns (
  id TEXT PRIMARY KEY,
  name TEXT NOT NULL,
  state TEXT NOT NULL,
  doc TEXT NOT NULL,
  version INTEGER NOT NULL,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  next_at TEXT
) STRICT;
CREATE INDEX campaigns_due ON campaigns (state, next_at);
CREATE INDEX campaigns_created ON campaigns (created_at);
`;

const postgres = `
CREATE TABLE campaigns (
  id text COLLATE "C" PRIMARY KEY,
  name text NOT NULL,
  state text NOT NULL,
  doc jsonb NOT NULL,
  version integer NOT NULL,
  created_at timestamptz NOT NULL,
  updated_at timestamptz NOT NULL,
  next_at timestamptz
);
CREATE INDEX campaigns_due ON campaigns (state, next_at);
CREATE INDEX campaigns_created ON campaigns (created_at);
`;

export const campaigns: Migration = { version: 22, name: 'campaigns', sqlite, postgres };
