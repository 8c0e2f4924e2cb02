/**
 * Version 20: console sign-outs (server/src/console/signin.ts). A sign-in is a sealed cookie with
 * no server-side state; signing out records its id here until it would have expired, so that the
 * cookie stays refused across a restart and by every server sharing the database.
 */
import type { Migration } from './index.js';

const sqlite = `
CREATE TABLE console_signouts (
  sid TEXT PRIMARY KEY,
  expires_at TEXT NOT NULL
) STRICT;
CREATE INDEX console_signouts_expires_idx ON console_signouts (expires_at);
`;

const postgres = `
CREATE TABLE console_signouts (
  sid text COLLATE "C" PRIMARY KEY,
  expires_at text NOT NULL
);
CREATE INDEX console_signouts_expires_idx ON console_signouts (expires_at);
`;

export const consoleSignouts: Migration = { version: 20, name: 'console_signouts', sqlite, postgres };
