/**
 * How `capstan` (and `capstan-server`'s aliases of its verbs) print: a table by default
 * (server/src/table.ts), the API's JSON with `--json`, CSV (RFC 4180, formula-safe like the API's
 * exports) with `--csv`; and how a failure becomes a line on stderr and an exit code. Pure
 * functions: cli.ts writes and exits.
 */
import { isCapstanError } from '@capstan/shared/errors';
import { isConfigError } from '@capstan/shared/usage';
import { csvLine } from '../api/export.js';
import { table } from '../table.js';
import { ApiFailure } from './transport.js';

export type Format = 'table' | 'json' | 'csv';
export type Column = [header: string, pick: (row: any) => unknown];

/**
 * Exit codes of `capstan` (docs/cli.md). 0-2 as in every Capstan program (2: usage); the rest say
 * who refused what, so a script can tell "fix the request" from "fix the network" or "log in".
 */
export const EXIT = {
  OK: 0,
  /** An unexpected failure: a crash, or the server failed (5xx). */
  ERROR: 1,
  USAGE: 2,
  /** No answer: connection refused, DNS, TLS, timeout (in process: the store could not be opened). */
  UNREACHABLE: 3,
  /** The API refused the request (4xx other than those below): bad input, conflict. */
  REFUSED: 4,
  /** No token, a wrong or expired one (401), or a role that may not (403). */
  UNAUTHORIZED: 5,
  /** What the request names does not exist (404). */
  NOT_FOUND: 6,
  /** Done, with something to report: `policy diff --detailed-exitcode` found changes, `jobs watch` saw failed tasks. */
  CHANGES: 7,
} as const;

export const EXIT_CODES_TEXT = 'Exit codes: 0 ok, 1 error (crash or server failure), 2 usage, 3 cannot reach the server, '
  + '4 request refused, 5 unauthorized or forbidden, 6 not found, 7 changes found (policy diff --detailed-exitcode) or failed tasks (jobs watch)';

/** The exit code for a failure. */
export function exitCodeOf(err: unknown): number {
  // What the caller gave the CLI (a file it cannot read, a policy file it cannot use, a server
  // configuration that does not load): usage.
  if (isCapstanError(err) && (err.code === 'ERR_CLI_FILE' || err.code === 'ERR_POLICY_FILE' || isConfigError(err))) return EXIT.USAGE;
  if (!(err instanceof ApiFailure)) return EXIT.ERROR;
  if (err.status === 0) return EXIT.UNREACHABLE;
  if (err.status === 401 || err.status === 403) return EXIT.UNAUTHORIZED;
  if (err.status === 404) return EXIT.NOT_FOUND;
  if (err.status >= 400 && err.status < 500) return EXIT.REFUSED;
  return EXIT.ERROR;
}

/** The line on stderr for a failure: `capstan: ERR_CODE: message` (and the field it names). */
export function errorLine(err: unknown, program = 'capstan'): string {
  if (err instanceof ApiFailure) {
    const field = typeof err.details.field === 'string' ? ` (field ${err.details.field})` : '';
    return `${program}: ${err.code}: ${err.message}${field}\n`;
  }
  if (isCapstanError(err)) return `${program}: ${err.code}: ${err.message}\n`;
  return `${program}: ${(err as Error)?.message ?? String(err)}\n`;
}

export function csv(columns: readonly Column[], rows: readonly unknown[]): string {
  const value = (v: unknown) => (v !== null && typeof v === 'object' ? JSON.stringify(v) : v);
  return csvLine(columns.map(([h]) => h)) + rows.map((r) => csvLine(columns.map(([, pick]) => value(pick(r))))).join('');
}

/** A list: rows as a table or CSV, or the API's whole answer as JSON. */
export function renderList(format: Format, columns: readonly Column[], rows: readonly unknown[], answer: unknown = { data: rows, total: rows.length }): string {
  if (format === 'json') return `${JSON.stringify(answer, null, 2)}\n`;
  if (format === 'csv') return csv(columns, rows);
  return table(columns as Column[], rows);
}

/** One object: `key  value` lines, CSV of one row, or JSON. */
export function renderObject(format: Format, obj: Record<string, unknown>, answer: unknown = { data: obj }): string {
  if (format === 'json') return `${JSON.stringify(answer, null, 2)}\n`;
  const keys = Object.keys(obj);
  if (format === 'csv') return csv(keys.map((k) => [k, (r: any) => r[k]] as Column), [obj]);
  const width = Math.max(0, ...keys.map((k) => k.length));
  return keys.map((k) => {
    const v = obj[k];
    const s = v === null || v === undefined || v === '' ? '-' : typeof v === 'object' ? JSON.stringify(v) : String(v);
    return `${k.padEnd(width)}  ${s}`;
  }).join('\n') + '\n';
}

/** A job's progress as a bar: `[#####.....] 5/10 done 4 failed 1`. */
export function progressBar(p: Record<string, number> & { total: number }, width = 30): string {
  const final = (p.done ?? 0) + (p.failed ?? 0) + (p.aborted ?? 0);
  const filled = p.total ? Math.round((final / p.total) * width) : width;
  const counts = ['pending', 'scheduled', 'in_progress', 'done', 'failed', 'aborted'].filter((s) => p[s]).map((s) => `${s} ${p[s]}`).join(' ');
  return `[${'#'.repeat(filled)}${'.'.repeat(width - filled)}] ${final}/${p.total}${counts ? ` ${counts}` : ''}`;
}
