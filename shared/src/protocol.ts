/** Protocol constants shared by agent, relayd and server. */
import { readFileSync } from 'node:fs';

/** The version every program reports; read once from shared's package.json. */
export const CAPSTAN_VERSION: string = (
  JSON.parse(readFileSync(new URL('../package.json', import.meta.url), 'utf8')) as { version: string }
).version;

/** Spool kinds and the agent-facing upload paths that feed them. */
export const SPOOL_KINDS = ['reports', 'inventories'] as const;
export type SpoolKind = (typeof SPOOL_KINDS)[number];

/**
 * Upload paths → the spool kind they feed. RUDDER agents send an inventory of an accepted node to
 * `/inventory-updates/` (their first one to `/inventories/`); both are inventories here, and go up
 * the relay tree as `/inventories/`.
 */
export const UPLOAD_PATHS: ReadonlyArray<readonly [string, SpoolKind]> = [
  ['reports', 'reports'], ['inventories', 'inventories'], ['inventory-updates', 'inventories'],
];

export const HEADER_PROTOCOL = 'x-capstan-protocol';
export const PROTOCOL_VERSION = '1';

export function userAgent(program: 'capstan-agent' | 'capstan-relayd' | 'capstan-server'): string {
  return `${program}/${CAPSTAN_VERSION}`;
}

/** Default listen addresses (DESIGN.md command lines). */
export const DEFAULT_RELAYD_LISTEN = '127.0.0.1:3030';
export const DEFAULT_SERVER_LISTEN = '127.0.0.1:3031';

/** Exit codes (systemd units use RestartPreventExitStatus=2 3). */
export const EXIT_OK = 0;
export const EXIT_CRASH = 1;
export const EXIT_CONFIG = 2;
export const EXIT_STARTUP = 3;
/**
 * capstan-server: the database did not answer (75, sysexits' EX_TEMPFAIL) (connection refused, timed out, or the server is
 * still starting). Worth retrying, so units restart on it, unlike 2 and 3: a boot where a remote
 * PostgreSQL comes up after the server waits for it instead of leaving the unit failed.
 */
export const EXIT_UNAVAILABLE = 75;
