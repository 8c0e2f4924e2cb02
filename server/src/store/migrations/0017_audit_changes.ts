/**
 * Version 17: the audit log records every change the domain makes, whoever made it (an admin,
 * a node, a relay, or the server itself: the sweep, discovery), with the object before and after.
 * Older records were all admins' (actor_kind 'admin', actor = admin).
 */
import type { Migration } from './index.js';

const sqlite = `
ALTER TABLE audit_log ADD COLUMN actor_kind TEXT NOT NULL DEFAULT 'admin';
ALTER TABLE audit_log ADD COLUMN actor TEXT;
ALTER TABLE audit_log ADD COLUMN before_state TEXT;
ALTER TABLE audit_log ADD COLUMN after_state TEXT;
UPDATE audit_log SET actor = admin;
CREATE INDEX audit_log_actor ON audit_log (actor, at);
`;

const postgres = `
ALTER TABLE audit_log ADD COLUMN actor_kind text NOT NULL DEFAULT 'admin';
ALTER TABLE audit_log ADD COLUMN actor text;
ALTER TABLE audit_log ADD COLUMN before_state jsonb;
ALTER TABLE audit_log ADD COLUMN after_state jsonb;
UPDATE audit_log SET actor = admin;
CREATE INDEX audit_log_actor ON audit_log (actor, at);
`;

export const auditChanges: Migration = { version: 17, name: 'audit_changes', sqlite, postgres };
