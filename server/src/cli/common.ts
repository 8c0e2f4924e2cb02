/**
 * What `capstan-server`'s own commands share (serve, compact-runs, policy-key): the options that
 * name the configuration and the store, given anywhere on the command line (`capstan-server
 * --data-dir d serve`, `capstan-server serve --data-dir d`), the configuration they load, and
 * opening the store around one command. The admin verbs are `capstan`'s, in process
 * (in-process.ts); they read the same options.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import { isCapstanError } from '@capstan/shared/errors';
import { EXIT_CONFIG, EXIT_STARTUP } from '@capstan/shared/protocol';
import { configErrorText } from '@capstan/shared/usage';
import { loadServerConfig, type ServerConfig } from '../config.js';
import type { Store } from '../reads.js';

/** The request was refused (a coded 4xx error). */
export const EXIT_REFUSED = 4;

export interface CommonFlags {
  config?: string;
  dataDir?: string;
  database?: string;
  listen?: string;
  logLevel?: string;
  json?: boolean;
}

/** The program's options with the command's own. */
export const flagsOf = <T extends object = object>(cmd: Command) => cmd.optsWithGlobals() as CommonFlags & T;

/** The options that say which configuration and store the program works on (on the program itself). */
export const storeOptions = (c: Command) =>
  c
    .option('-c, --config <file>', 'TOML configuration file')
    .option('--data-dir <dir>', 'data directory (SQLite database, spool, admin token)')
    .option('--database <url>', 'PostgreSQL URL (postgres://…); default SQLite in the data directory');

/** The configuration file with the flags over it; a bad one throws its ERR_CONFIG… error. */
export function loadHostConfig(flags: CommonFlags): ServerConfig {
  return loadServerConfig({
    path: flags.config,
    overrides: { 'general.listen': flags.listen, 'general.data_dir': flags.dataDir, 'database.url': flags.database, 'log.level': flags.logLevel },
  });
}

/** loadHostConfig, or exit 2 saying what is wrong. */
export function configFrom(flags: CommonFlags): ServerConfig {
  try {
    return loadHostConfig(flags);
  } catch (err) {
    process.stderr.write(`capstan-server: ${configErrorText(err)}\n`);
    process.exit(EXIT_CONFIG);
  }
}

/** Open the store, run one command, close it. A refused request (coded 4xx error) exits 4. */
export async function withStore(flags: CommonFlags, fn: (store: Store, config: ServerConfig) => Promise<void>): Promise<void> {
  const config = configFrom(flags);
  let store: Store;
  try {
    // What a command needs is loaded when it runs, so `--help` and a usage error answer at once.
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

/** The JSON with --json, else the text. */
export function out(flags: CommonFlags, json: unknown, text: () => string): void {
  process.stdout.write(flags.json ? `${JSON.stringify(json)}\n` : text());
}
