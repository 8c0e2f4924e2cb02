/**
 * Version 19: change requests (server/src/policy/reviews.ts): a proposed set of policy object
 * changes with its impact, the objects' versions it was made against (its base), the reviews
 * it got and who deployed it. The change set, base, impact and reviews are JSON text in both
 * backends: the request is read and written whole, never queried inside.
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE change_requests (
  id TEXT PRIMARY KEY,
  title TEXT NOT NULL,
  description TEXT NOT NULL,
  author TEXT NOT NULL,
  status TEXT NOT NULL CHECK (status IN ('open', 'approved', 'rejected', 'deployed')),
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  changes TEXT NOT NULL,
  base TEXT NOT NULL,
  impact TEXT NOT NULL,
  reviews TEXT NOT NULL,
  deployed_at TEXT,
  deployed_by TEXT
) STRICT;
CREATE INDEX change_requests_status_idx ON change_requests (status, created_at);
CREATE INDEX change_requests_created_idx ON change_requests (created_at);
`;

const postgres = `
CREATE TABLE change_requests (
  id text COLLATE "C" PRIMARY KEY,
  title text NOT NULL,
  description text NOT NULL,
  author text NOT NULL,
  status text NOT NULL CHECK (status IN ('open', 'approved', 'rejected', 'deployed')),
  created_at text NOT NULL,
  updated_at text NOT NULL,
  changes text NOT NULL,
  base text NOT NULL,
  impact text NOT NULL,
  reviews text NOT NULL,
  deployed_at text,
  deployed_by text
);
CREATE INDEX change_requests_status_idx ON change_requests (status, created_at);
CREATE INDEX change_requests_created_idx ON change_requests (created_at);
`;

export const changeRequests: Migration = { version: 19, name: 'change_requests', sqlite, postgres };
