#!/usr/bin/env node
/**
 * capstan-relayd: the only module that reads argv, the environment and signals, and decides exit
 * codes (0 ok, 1 crash, 2 configuration error, 3 other start-up error).
 */
import { Command } from 'commander';
import { pino } from 'pino';
import { CAPSTAN_VERSION, EXIT_CONFIG, EXIT_CRASH, EXIT_STARTUP, isCapstanError } from '@capstan/shared';
import { loadRelaydConfig, type RelaydConfig } from './config.js';
import { startRelay } from './daemon.js';

interface Flags {
  config?: string;
  listen?: string;
  spoolDir?: string;
  upstream?: string;
  nodeId?: string;
  logLevel?: string;
  test?: boolean;
}

const program = new Command('capstan-relayd')
  .description('Capstan relay: spools agent uploads durably and forwards them upstream')
  .version(CAPSTAN_VERSION, '-V, --version')
  .option('-c, --config <file>', 'TOML configuration file')
  .option('--listen <host:port>', 'address to listen on (default 127.0.0.1:3030)')
  .option('--spool-dir <dir>', 'spool directory')
  .option('--upstream <url>', 'upstream relay or server URL')
  .option('--node-id <id>', "this relay's node id")
  .option('--log-level <level>', 'trace, debug, info, warn, error')
  .option('--test', 'check the configuration and exit')
  .action(async (flags: Flags) => {
    let config: RelaydConfig;
    try {
      config = loadRelaydConfig({
        path: flags.config,
        overrides: {
          'general.listen': flags.listen,
          'general.node_id': flags.nodeId,
          'spool.directory': flags.spoolDir,
          'upstream.url': flags.upstream,
          'log.level': flags.logLevel,
        },
      });
    } catch (err) {
      process.stderr.write(`capstan-relayd: ${isCapstanError(err) ? err.message : String(err)}\n`);
      process.exit(EXIT_CONFIG);
    }
    if (flags.test) {
      process.stdout.write('configuration ok\n');
      process.exit(0);
    }
    const log = pino({ level: config.log.level, base: { program: 'capstan-relayd' } });
    let handle;
    try {
      handle = await startRelay(config, log);
    } catch (err) {
      log.fatal({ err }, 'start-up failed');
      process.stderr.write(`capstan-relayd: cannot start: ${(err as Error).message}\n`);
      process.exit(EXIT_STARTUP);
    }
    // Readiness for `Type=notify` units, and the chosen address on stdout for scripts and tests.
    process.stdout.write(`${JSON.stringify({ ready: true, url: handle.url })}\n`);
    const stop = (signal: string) => {
      log.info({ signal }, 'stopping');
      void handle.close().then(() => process.exit(0));
    };
    process.once('SIGTERM', () => stop('SIGTERM'));
    process.once('SIGINT', () => stop('SIGINT'));
  });

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`capstan-relayd: ${String(err)}\n`);
  process.exit(EXIT_CRASH);
});
