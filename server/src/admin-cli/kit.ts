/**
 * What every verb module shares, in `capstan` and in `capstan-server`'s aliases alike: the
 * process-free `io`, the `act` wrapper that turns a verb into calls on a transport and an exit
 * code, and the argument helpers.
 */
import { readFile } from 'node:fs/promises';
import { type Command, InvalidArgumentError } from 'commander';
import { parse as parseToml } from 'smol-toml';
import { capstanError } from '@capstan/shared/errors';
import type { ApiTransport } from './transport.js';
import type { Column, Format } from './output.js';

export interface CliIo {
  out(text: string): void;
  err(text: string): void;
  env: Record<string, string | undefined>;
  /** Is stdout a terminal (live progress bars)? */
  isTTY: boolean;
  exit(code: number): never;
  /** Wait between polls (`jobs watch`). */
  sleep(ms: number): Promise<void>;
}

/** A verb's body: one or a few API calls; its result is the exit code (nothing: 0). */
export type VerbFn<A extends unknown[]> = (api: ApiTransport, fmt: Format, cmd: Command, ...args: A) => Promise<number | void>;

export interface Verbs {
  io: CliIo;
  /** Commander's action for a verb: a transport, the output format, failures as a coded line and an exit code. */
  act<A extends unknown[]>(fn: VerbFn<A>): (...args: unknown[]) => Promise<void>;
  /** A list answer as a table, CSV, or the API's JSON. */
  list(fmt: Format, columns: Column[], answer: { data: unknown[] }): void;
  /** One object answer. */
  show(fmt: Format, answer: { data: Record<string, unknown> }): void;
}

export const enc = encodeURIComponent;

/** A repeatable option: each value appended. */
export const collect = (v: string, prev: string[] = []) => [...prev, v];

/** A positive integer option; anything else is a usage error (exit 2), as commander's own. */
export const int = (name: string) => (v: string) => {
  if (!/^\d{1,9}$/.test(v) || Number(v) < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
  return Number(v);
};

export function keyValue(v: string): [string, string] {
  const i = v.indexOf('=');
  if (i <= 0) throw new InvalidArgumentError(`expected key=value, got ${JSON.stringify(v)}`);
  return [v.slice(0, i), v.slice(i + 1)];
}

/** `--filter key=value` (repeatable, values of one key ORed) and `--exclude key=value` → the API's `filter=<JSON>`. */
export function filterParams(include: string[] = [], exclude: string[] = [], query?: string): string[] {
  const out: string[] = [];
  // An expression of the filter language (docs/filters.md), ANDed with the key=value filters.
  if (query !== undefined) out.push(JSON.stringify({ key: 'q', values: [query] }));
  for (const [list, ex] of [[include, false], [exclude, true]] as const) {
    const byKey = new Map<string, string[]>();
    for (const f of list) {
      const [k, v] = keyValue(f);
      byKey.set(k, [...(byKey.get(k) ?? []), v]);
    }
    for (const [key, values] of byKey) out.push(JSON.stringify({ key, values, ...(ex && { exclude: true }) }));
  }
  return out;
}

/** The node list's filters as options. */
export const nodeFilters = (c: Command) => c
  .option('-q, --query <expression>', "a filter expression, e.g. 'os.name = debian and package:openssl < 3.0.11' (docs/filters.md)")
  .option('--filter <key=value>', 'include nodes matching (repeatable; name, hostname, region, tag:<k>, state, status, manager, group, …)', collect)
  .option('--exclude <key=value>', 'exclude nodes matching (repeatable)', collect);

/** A file named on the command line (a token, a certificate, a key): unreadable is the caller's to fix (exit 2). */
export async function readCliFile(path: string, what: string): Promise<string> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    throw capstanError('ERR_CLI_FILE', `cannot read ${what} ${path}: ${(err as Error).message}`);
  }
}

/** A policy object or other request body from a TOML or JSON file. */
export async function bodyFromFile(path: string): Promise<Record<string, unknown>> {
  let obj: unknown;
  try {
    const text = await readFile(path, 'utf8');
    obj = path.endsWith('.toml') ? parseToml(text) : JSON.parse(text);
  } catch (err) {
    throw capstanError('ERR_CLI_FILE', `${path}: ${(err as Error).message.split('\n')[0]}`);
  }
  if (!obj || typeof obj !== 'object' || Array.isArray(obj)) throw capstanError('ERR_CLI_FILE', `${path} must hold one object`);
  return obj as Record<string, unknown>;
}
