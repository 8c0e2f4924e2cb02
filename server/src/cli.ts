#!/usr/bin/env node
/**
 * capstan-server: `serve` runs the root; `nodes …` are admin verbs that work on the same store
 * directly (so they work with the server down, too). Only this module reads argv, the environment
 * and signals, and chooses exit codes (0 ok, 1 crash, 2 configuration, 3 other start-up error).
 */
import { join } from 'node:path';
import { Command } from 'commander';
import { pino } from 'pino';
import { CAPSTAN_VERSION, EXIT_CONFIG, EXIT_CRASH, EXIT_STARTUP, isCapstanError } from '@capstan/shared';
import { loadServerConfig, type ServerConfig } from './config.js';
import { startServer } from './server.js';
import { openStore } from './store/index.js';
import type { Store } from './store/store.js';

interface CommonFlags {
  config?: string;
  dataDir?: string;
  database?: string;
  listen?: string;
  logLevel?: string;
}

function configFrom(flags: CommonFlags): ServerConfig {
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
    process.stderr.write(`capstan-server: ${isCapstanError(err) ? err.message : String(err)}\n`);
    process.exit(EXIT_CONFIG);
  }
}

async function withStore<T>(flags: CommonFlags, fn: (store: Store) => Promise<T>): Promise<T> {
  const config = configFrom(flags);
  let store: Store;
  try {
    store = await openStore(
      config.database.url ? { databaseUrl: config.database.url } : { sqlitePath: join(config.general.data_dir, 'capstan.db') },
    );
  } catch (err) {
    process.stderr.write(`capstan-server: cannot open the store: ${(err as Error).message}\n`);
    process.exit(EXIT_STARTUP);
  }
  try {
    return await fn(store);
  } finally {
    await store.close();
  }
}

const storeOptions = (c: Command) =>
  c
    .option('-c, --config <file>', 'TOML configuration file')
    .option('--data-dir <dir>', 'data directory (SQLite database, spool, admin token)')
    .option('--database <url>', 'PostgreSQL URL (postgres://…); default SQLite in the data directory');

const program = new Command('capstan-server')
  .description('Capstan root server: verifies and ingests run logs and inventories, keeps the node registry')
  .version(CAPSTAN_VERSION, '-V, --version');

storeOptions(program.command('serve').description('run the server'))
  .option('--listen <host:port>', 'address to listen on (default 127.0.0.1:3031)')
  .option('--log-level <level>', 'trace, debug, info, warn, error')
  .option('--test', 'check the configuration and exit')
  .action(async (flags: CommonFlags & { test?: boolean }) => {
    const config = configFrom(flags);
    if (flags.test) {
      process.stdout.write('configuration ok\n');
      process.exit(0);
    }
    const log = pino({ level: config.log.level, base: { program: 'capstan-server' } });
    let handle;
    try {
      handle = await startServer(config, log);
    } catch (err) {
      log.fatal({ err }, 'start-up failed');
      process.stderr.write(`capstan-server: cannot start: ${(err as Error).message}\n`);
      process.exit(EXIT_STARTUP);
    }
    process.stdout.write(`${JSON.stringify({ ready: true, url: handle.url })}\n`);
    const stop = (signal: string) => {
      log.info({ signal }, 'stopping');
      void handle.close().then(() => process.exit(0));
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });

const nodes = program.command('nodes').description('look at and decide on nodes');
storeOptions(nodes.command('list').description('list nodes'))
  .option('--pending', 'only nodes waiting for acceptance')
  .option('--json', 'print JSON')
  .action(async (flags: CommonFlags & { pending?: boolean; json?: boolean }) => {
    await withStore(flags, async (store) => {
      const res = await store.listNodes({ accepted: flags.pending ? 'pending' : undefined, page: 1, per_page: 1000 });
      if (flags.json) {
        process.stdout.write(`${JSON.stringify({ data: res.data, total: res.total })}\n`);
        return;
      }
      for (const n of res.data) {
        process.stdout.write(`${n.id}\t${n.hostname}\t${n.accepted}\t${n.status}\t${n.last_run_at ?? '-'}\n`);
      }
    });
  });
for (const [verb, acceptance] of [['accept', 'accepted'], ['refuse', 'refused']] as const) {
  storeOptions(nodes.command(`${verb} <id>`).description(`${verb} a pending node`)).action(async (id: string, flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      const node = await store.getNode(id);
      if (!node) {
        process.stderr.write(`capstan-server: node ${id} is unknown\n`);
        process.exitCode = 4;
        return;
      }
      if (acceptance === 'accepted' && !node.certificate) {
        process.stderr.write(`capstan-server: node ${id} has sent no certificate yet\n`);
        process.exitCode = 4;
        return;
      }
      await store.setAcceptance(id, acceptance, new Date().toISOString());
      process.stdout.write(`${id} ${acceptance}\n`);
    });
  });
}

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`capstan-server: ${String(err)}\n`);
  process.exit(EXIT_CRASH);
});
