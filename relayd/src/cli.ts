#!/usr/bin/env node
/**
 * capstan-relayd: the only module that reads argv, the environment and signals, and decides exit
 * codes (0 ok, 1 crash, 2 usage or configuration error, 3 other start-up error).
 *
 * Signals: SIGTERM/SIGINT stop gracefully (stop accepting, finish uploads in flight, give forwards
 * processing.shutdown_grace, exit 0; a second signal exits at once). SIGHUP reloads the nodes
 * list, certificates, admin token and log level, as POST system/reload does.
 */
import { Command } from 'commander';
import { isCapstanError } from '@capstan/shared/errors';
import { logOptions } from '@capstan/shared/log';
import { CAPSTAN_VERSION, DEFAULT_RELAYD_LISTEN, EXIT_CONFIG, EXIT_CRASH, EXIT_OK, EXIT_STARTUP } from '@capstan/shared/protocol';
import { configErrorText, EXIT_CODES_HELP, isConfigError, usageErrorsExit2 } from '@capstan/shared/usage';
import { runDaemon, sdNotify } from '@capstan/toolkit/systemd';
import { loadRelaydConfig, type RelaydConfig } from './config.js';
import type { RelayHandle } from './daemon.js';
import { ensureRelayKey } from './identity/own.js';
import { NodesList } from './data/nodes.js';
import { loadAdminToken, loadListenerTls, loadUpstreamTls } from './tls.js';

interface Flags {
  config?: string;
  listen?: string;
  spoolDir?: string;
  upstream?: string[];
  nodeId?: string;
  nodesList?: string;
  sharedFiles?: string;
  sharedFolder?: string;
  logLevel?: string;
  test?: boolean;
  identity?: boolean;
}

/** Everything `--test` checks: the file itself, then every file it names. */
async function checkFiles(c: RelaydConfig): Promise<void> {
  await NodesList.load(c.general.node_id, c.general.nodes_list_file);
  await loadAdminToken(c);
  await loadListenerTls(c);
  await loadUpstreamTls(c);
}

const program = new Command('capstan-relayd')
  .description('Capstan relay: spools agent uploads durably and forwards them upstream')
  .version(CAPSTAN_VERSION, '-V, --version')
  .addHelpText('after', `\n${EXIT_CODES_HELP}.`)
  .option('-c, --config <file>', 'TOML configuration file')
  .option('--listen <host:port>', `address to listen on (default ${DEFAULT_RELAYD_LISTEN})`)
  .option('--spool-dir <dir>', 'spool directory')
  .option('--upstream <url>', 'upstream relay or server URL; given again: the next ones, in order, for when it does not answer (upstream.fallback_urls)', (v: string, prev: string[] | undefined) => [...(prev ?? []), v])
  .option('--node-id <id>', "this relay's node id")
  .option('--nodes-list <file>', "RUDDER's nodeslist.json: the nodes below this relay")
  .option('--shared-files <dir>', 'shared-files store')
  .option('--shared-folder <dir>', 'shared-folder root')
  .option('--log-level <level>', 'trace, debug, info, warn, error')
  .option('--test', 'check the configuration and the files it names, then exit')
  .option('--identity', "make this relay's node key and certificate when absent, print {node_id, certificate} as JSON (what an admin registers at the server as a relay), then exit")
  .action(async (flags: Flags) => {
    const load = () =>
      loadRelaydConfig({
        path: flags.config,
        overrides: {
          'general.listen': flags.listen,
          'general.node_id': flags.nodeId,
          'general.nodes_list_file': flags.nodesList,
          'spool.directory': flags.spoolDir,
          'upstream.url': flags.upstream?.[0],
          ...(flags.upstream && flags.upstream.length > 1 ? { 'upstream.fallback_urls': flags.upstream.slice(1) } : {}),
          'shared_files.path': flags.sharedFiles,
          'shared_folder.path': flags.sharedFolder,
          'log.level': flags.logLevel,
        },
      });
    let config: RelaydConfig;
    try {
      config = load();
      if (flags.test) await checkFiles(config);
    } catch (err) {
      process.stderr.write(`capstan-relayd: ${configErrorText(err)}\n`);
      process.exit(EXIT_CONFIG);
    }
    if (flags.test) {
      process.stdout.write('configuration ok\n');
      process.exit(EXIT_OK);
    }
    if (flags.identity) {
      try {
        const pair = await ensureRelayKey(config);
        process.stdout.write(`${JSON.stringify({ node_id: config.general.node_id, certificate: pair.certPem, certificate_file: pair.certPath, key_file: pair.keyPath })}\n`);
        process.exit(EXIT_OK);
      } catch (err) {
        process.stderr.write(`capstan-relayd: ${isCapstanError(err) ? err.message : String(err)}\n`);
        process.exit(EXIT_STARTUP);
      }
    }
    // The daemon is loaded only to run: --help, --test and --identity answer without it.
    const [{ pino }, { startRelay }] = await Promise.all([import('pino'), import('./daemon.js')]);
    const log = pino(logOptions('capstan-relayd', config.log.level, pino.stdSerializers.err));
    let handle: RelayHandle;
    try {
      handle = await startRelay(config, log, {
        reloadConfig: load,
        setLogLevel: (level) => {
          log.level = level;
        },
      });
    } catch (err) {
      log.fatal({ err }, 'start-up failed');
      process.stderr.write(`capstan-relayd: cannot start: ${(err as Error).message}\n`);
      process.exit(isConfigError(err) ? EXIT_CONFIG : EXIT_STARTUP);
    }
    process.on('SIGHUP', () => {
      handle.reload().then(
        () => void sdNotify({ status: 'configuration reloaded' }),
        (err: unknown) => log.error({ err }, 'reload failed, keeping the previous configuration'),
      );
    });

    // Signals, the address on stdout, READY=1 and the watchdog (toolkit/src/systemd.ts).
    await runDaemon({ log, url: handle.url, close: () => handle.close(), stoppingStatus: 'stopping: finishing the uploads in flight', exit: (code) => process.exit(code) });
    const statusTimer = process.env.NOTIFY_SOCKET
      ? setInterval(() => void handle.statusLine().then((status) => sdNotify({ status })), 10_000)
      : null;
    statusTimer?.unref();
  });

usageErrorsExit2(program, 'capstan-relayd', (code) => process.exit(code));
program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`capstan-relayd: ${String(err)}\n`);
  process.exit(EXIT_CRASH);
});
