/**
 * What every verb of `capstan-server` shares: the flags that name the configuration and the store,
 * opening the store (or the registry, or the identity keyring) around one verb, and printing a
 * table or the API's JSON. A verb the store refuses (a coded 4xx error) exits 4; the CLI's files
 * are the only part of the server that write to stderr or choose an exit code.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { silentLogger } from '@capstan/shared/log';
import { EXIT_CONFIG, EXIT_STARTUP } from '@capstan/shared/protocol';
import { configErrorText } from '@capstan/shared/usage';
import { loadServerConfig, type ServerConfig } from '../config.js';
import type { NodeIdentity } from '../identity/service.js';
import { identitySettings } from '../identity/settings.js';
import type { NodeRegistry } from '../registry/nodes.js';
import type { Actor } from '../audit/actor.js';
import { BOOTSTRAP_ADMIN } from '../api/auth.js';
import { isFilterKey } from '../registry/filters.js';
import type { NodeFilter, NodeRecord, Store } from '../reads.js';

export { collect, int } from './args.js';

/** The request was refused: unknown node, bad filter, a conflict. */
export const EXIT_REFUSED = 4;

/**
 * Who makes a change from this command line, in the node's history and the audit log: the
 * bootstrap admin (whoever can open the server's database is the server's admin), at the console.
 */
export const CLI_ACTOR: Actor = { kind: 'admin', name: BOOTSTRAP_ADMIN, role: 'admin', request: { method: 'CLI', path: 'capstan-server', address: 'local' } };

export interface CommonFlags {
  config?: string;
  dataDir?: string;
  database?: string;
  listen?: string;
  logLevel?: string;
  json?: boolean;
}

export function configFrom(flags: CommonFlags): ServerConfig {
  try {
    return loadServerConfig({
      path: flags.config,
      overrides: {
        'general.listen': flags.listen,
        'general.data_dir': flags.dataDir,
        'database.url': flags.database,
        'log.level': flags.logLevel,
      },
    });
  } catch (err) {
    process.stderr.write(`capstan-server: ${configErrorText(err)}\n`);
    process.exit(EXIT_CONFIG);
  }
}

/** Open the store, run one admin verb, close it. A refused request (coded 4xx error) exits 4. */
export async function withStore(flags: CommonFlags, fn: (store: Store, config: ServerConfig) => Promise<void>): Promise<void> {
  const config = configFrom(flags);
  let store: Store;
  try {
    // What a verb needs is loaded when it runs, so `--help` and a usage error answer at once.
    const { openRegistry } = await import('../registry/open.js');
    store = await openRegistry(
      config.database.url ? { databaseUrl: config.database.url } : { sqlitePath: join(config.general.data_dir, 'capstan.db') },
    );
  } catch (err) {
    process.stderr.write(`capstan-server: cannot open the store: ${(err as Error).message}\n`);
    process.exit(EXIT_STARTUP);
  }
  try {
    await fn(store, config);
  } catch (err) {
    if (isCapstanError(err) && err.statusCode < 500) {
      process.stderr.write(`capstan-server: ${err.code}: ${err.message}\n`);
      process.exitCode = EXIT_REFUSED;
    } else {
      throw err;
    }
  } finally {
    await store.close();
  }
}

/**
 * withStore with the node registry: a change made here has the effects it has through the API,
 * the ones this process can carry out (the node's policy regenerated before the command returns,
 * a demoted relay's tokens renewed); a running server ends a relay's link when the relay next
 * uses its refused token.
 */
export async function withNodes(flags: CommonFlags, fn: (nodes: NodeRegistry, store: Store) => Promise<void>): Promise<void> {
  const { composeDomain } = await import('../domain.js');
  await withStore(flags, async (store) => {
    const { nodes, generator } = composeDomain({ store, log: silentLogger });
    try {
      await fn(nodes, store);
    } finally {
      await generator.settled();
    }
  });
}

/** Open the identity keyring of the data directory, run one verb, close it. Coded 4xx → exit 4. */
export async function withIdentity(flags: CommonFlags, fn: (identity: NodeIdentity, store: Store) => Promise<void> | void): Promise<void> {
  const config = configFrom(flags);
  const { NodeIdentity } = await import('../identity/service.js');
  await withStore(flags, async (store) => {
    const { AuditLog } = await import('../audit/log.js');
    const audit = new AuditLog({ admins: store.admins, log: silentLogger });
    const identity = await NodeIdentity.open({ dataDir: config.general.data_dir, secretFile: config.identity.secret_file, store, log: silentLogger, ...identitySettings(config.identity), audit });
    try {
      await fn(identity, store);
    } finally {
      identity.close();
    }
  });
}

/** The API's JSON with --json, else the text. */
export function out(flags: CommonFlags, json: unknown, text: () => string): void {
  process.stdout.write(flags.json ? `${JSON.stringify(json)}\n` : text());
}

/** The node, or null after saying it is unknown (exit 4). */
export async function mustNode(store: Store, id: string): Promise<NodeRecord | null> {
  const node = await store.getNode(id);
  if (!node) {
    process.stderr.write(`capstan-server: node ${id} is unknown\n`);
    process.exitCode = EXIT_REFUSED;
  }
  return node;
}

/** `key=value` arguments → tags. */
export function tagArgs(args: string[]): Record<string, string> {
  return Object.fromEntries(args.map((t) => {
    const i = t.indexOf('=');
    if (i <= 0) throw capstanError('ERR_BAD_REQUEST', `tag must be <key>=<value>, got "${t}"`);
    return [t.slice(0, i), t.slice(i + 1)];
  }));
}

/** `key=value` → a filter; the key as in the API (`name`, `tag:env`, `last_run`…). */
export function filterArg(text: string, exclude: boolean): NodeFilter {
  const i = text.indexOf('=');
  const key = i > 0 ? text.slice(0, i) : '';
  if (!isFilterKey(key)) throw capstanError('ERR_BAD_REQUEST', `filter must be <key>=<value> with a known key, got "${text}"`);
  return { key, values: [text.slice(i + 1)], exclude };
}

/** The flags that say which configuration and store a verb works on. */
export const storeOptions = (c: Command) =>
  c
    .option('-c, --config <file>', 'TOML configuration file')
    .option('--data-dir <dir>', 'data directory (SQLite database, spool, admin token)')
    .option('--database <url>', 'PostgreSQL URL (postgres://…); default SQLite in the data directory');

/** An admin verb: the store's flags and --json. */
export const verb = (parent: Command, spec: string, description: string) =>
  storeOptions(parent.command(spec).description(description)).option('--json', 'print the API\'s JSON instead of a table');
