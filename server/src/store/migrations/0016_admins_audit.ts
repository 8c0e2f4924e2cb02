/**
 * Version 16: named admins (hashed tokens, roles, expiry, revocation) and the audit log of every
 * write made through the admin API (see ../admins/types.ts).
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE admins (
  name TEXT PRIMARY KEY,
  role TEXT NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
  token_digest TEXT NOT NULL UNIQUE,
  created_at TEXT NOT NULL,
  expires_at TEXT,
  revoked_at TEXT,
  last_used_at TEXT
);
CREATE TABLE audit_log (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  at TEXT NOT NULL,
  admin TEXT,
  role TEXT,
  action TEXT NOT NULL,
  target TEXT,
  method TEXT NOT NULL,
  path TEXT NOT NULL,
  address TEXT NOT NULL,
  status INTEGER NOT NULL,
  error TEXT
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_admin ON audit_log (admin, at);
CREATE INDEX audit_log_action ON audit_log (action, at);
CREATE INDEX audit_log_target ON audit_log (target, at);
`;

const postgres = `
CREATE TABLE admins (
  name text PRIMARY KEY,
  role text NOT NULL CHECK (role IN ('admin', 'operator', 'viewer')),
  token_digest text NOT NULL UNIQUE,
  created_at timestamptz NOT NULL,
  expires_at timestamptz,
  revoked_at timestamptz,
  last_used_at timestamptz
);
CREATE TABLE audit_log (
  id bigserial PRIMARY KEY,
  at timestamptz NOT NULL,
  admin text,
  role text,
  action text NOT NULL,
  target text,
  method text NOT NULL,
  path text NOT NULL,
  address text NOT NULL,
  status integer NOT NULL,
  error text
);
CREATE INDEX audit_log_at ON audit_log (at);
CREATE INDEX audit_log_admin ON audit_log (admin, at);
CREATE INDEX audit_log_action ON audit_log (action, at);
CREATE INDEX audit_log_target ON audit_log (target, at);
`;

export const adminsAudit: Migration = { version: 16, name: 'admins_audit', sqlite, postgres };
