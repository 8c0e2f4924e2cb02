/**
 * `capstan-server serve`: runs the root until SIGTERM or SIGINT. `--test` checks the configuration
 * (exit 2) and that the database answers (exit 3, or 75 while it does not answer yet), then exits.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import { isCapstanError } from '@capstan/shared/errors';
import { logOptions } from '@capstan/shared/log';
import { DEFAULT_SERVER_LISTEN, EXIT_CONFIG, EXIT_OK, EXIT_STARTUP, EXIT_UNAVAILABLE } from '@capstan/shared/protocol';
import { isConfigError } from '@capstan/shared/usage';
import { loadListenerTls } from '@capstan/toolkit/http/tls';
import { runDaemon } from '@capstan/toolkit/systemd';
import { checkDatabase, isDatabaseUnavailable } from '../registry/open.js';
import type { ServerConfig } from '../config.js';
import { configFrom, flagsOf } from './common.js';

/** `--test`: exits with what it found. */
async function testAndExit(config: ServerConfig): Promise<never> {
  try {
    await loadListenerTls(config.tls);
  } catch (err) {
    process.stderr.write(`capstan-server: ${isCapstanError(err) ? err.message : String(err)}\n`);
    process.exit(EXIT_CONFIG);
  }
  try {
    const db = await checkDatabase({
      ...(config.database.url && { databaseUrl: config.database.url }),
      sqlitePath: join(config.general.data_dir, 'capstan.db'),
      timeoutMs: 10_000,
    });
    process.stdout.write(`configuration ok; ${db}\n`);
    process.exit(EXIT_OK);
  } catch (err) {
    process.stderr.write(`capstan-server: ${isCapstanError(err) ? `${err.code}: ${err.message}` : String(err)}\n`);
    process.exit(isDatabaseUnavailable(err) ? EXIT_UNAVAILABLE : EXIT_STARTUP);
  }
}

export function serveCommand(program: Command): void {
  program.command('serve').description('run the server')
    .option('--listen <host:port>', `address to listen on (default ${DEFAULT_SERVER_LISTEN})`)
    .option('--log-level <level>', 'trace, debug, info, warn, error')
    .option('--test', 'check the configuration and that the database is reachable, then exit (2: configuration, 3: database)')
    .action(async (_o: unknown, cmd: Command) => {
      const flags = flagsOf<{ test?: boolean }>(cmd);
      const config = configFrom(flags);
      if (flags.test) await testAndExit(config);
      // The server itself is loaded only to serve: the other verbs start in a fraction of the time.
      const [{ pino }, { startServer }] = await Promise.all([import('pino'), import('../server.js')]);
      const log = pino(logOptions('capstan-server', config.log.level, pino.stdSerializers.err));
      let handle;
      try {
        handle = await startServer(config, log);
      } catch (err) {
        log.fatal({ err }, 'start-up failed');
        process.stderr.write(`capstan-server: cannot start: ${(err as Error).message}\n`);
        process.exit(isConfigError(err) ? EXIT_CONFIG : isDatabaseUnavailable(err) ? EXIT_UNAVAILABLE : EXIT_STARTUP);
      }
      // Signals, the address on stdout, READY=1 and the watchdog (toolkit/src/systemd.ts).
      await runDaemon({
        log, url: handle.url, close: () => handle.close(), exit: (code) => process.exit(code),
        stoppingStatus: 'stopping: finishing the files and sweep batch in flight',
      });
    });
}
