/**
 * `capstan-server serve`: runs the root until SIGTERM or SIGINT. `--test` checks the configuration
 * (exit 2) and that the database answers (exit 3, or 75 while it does not answer yet), then exits.
 */
import { join } from 'node:path';
import type { Command } from 'commander';
import type { Logger } from 'pino';
import { isCapstanError } from '@capstan/shared/errors';
import { logOptions } from '@capstan/shared/log';
import { DEFAULT_SERVER_LISTEN, EXIT_CONFIG, EXIT_CRASH, EXIT_OK, EXIT_STARTUP, EXIT_UNAVAILABLE } from '@capstan/shared/protocol';
import { isConfigError } from '@capstan/shared/usage';
import { loadListenerTls } from '@capstan/toolkit/http/tls';
import { sdAssign, startWatchdog } from '@capstan/toolkit/systemd';
import { checkDatabase, isDatabaseUnavailable } from '../registry/open.js';
import type { ServerConfig } from '../config.js';
import { configFrom, flagsOf } from './common.js';

/** Tell systemd we are ready (Type=notify); outside systemd (no NOTIFY_SOCKET) there is nobody to tell. */
async function notifyReady(log: Logger, status: string): Promise<void> {
  if (!process.env.NOTIFY_SOCKET) return;
  try {
    const { default: notify } = await import('systemd-notify');
    await notify({ ready: true, status });
  } catch (err) {
    // The systemd-notify binary may be missing; the unit then times out, which says why.
    log.warn({ err }, 'cannot notify systemd');
  }
}

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
      let stopWatchdog = () => {};
      let stopping = false;
      const stop = (signal: string) => {
        if (stopping) {
          // A second signal: the operator does not want to wait for the batch in flight.
          log.warn({ signal }, 'stopping now');
          process.exit(EXIT_CRASH);
        }
        stopping = true;
        log.info({ signal }, 'stopping: finishing the files and sweep batch in flight');
        stopWatchdog();
        // STOPPING=1: systemd shows "deactivating" while the batch in flight finishes.
        const told = sdAssign(process.env, ['STOPPING=1', 'STATUS=stopping: finishing the files and sweep batch in flight']);
        Promise.all([handle.close(), told]).then(
          () => process.exit(EXIT_OK),
          (err: unknown) => {
            log.error({ err }, 'stop failed');
            process.exit(EXIT_CRASH);
          },
        );
      };
      // Handlers first: systemd may send SIGTERM as soon as it has READY=1.
      process.on('SIGTERM', () => stop('SIGTERM'));
      process.on('SIGINT', () => stop('SIGINT'));
      process.stdout.write(`${JSON.stringify({ ready: true, url: handle.url })}\n`);
      await notifyReady(log, `listening on ${handle.url}`);
      // WatchdogSec in the unit: pings at half its interval for as long as the event loop turns.
      if (!stopping) stopWatchdog = startWatchdog(process.env);
    });
}
