#!/usr/bin/env node
/**
 * capstan-agent: `run` (what the systemd timer starts), `inventory` (print it), `info` (identity),
 * `queue list|flush`. Only this module reads argv and decides exit codes: 0 ok, 1 crash,
 * 2 usage or configuration error, 3 other start-up error, 4 the run reported errors, 5 the node
 * waits for acceptance, 6 the server refused the node.
 */
import { policyServerId } from './identity/policy-server.js';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import { Command } from 'commander';
import { pino } from 'pino';
import { complianceLine } from '@capstan/shared/compliance/compute';
import { isCapstanError } from '@capstan/shared/errors';
import { logOptions, type Logger } from '@capstan/shared/log';
import { CAPSTAN_VERSION, EXIT_CONFIG, EXIT_CRASH, EXIT_OK } from '@capstan/shared/protocol';
import { EXIT_CODES_HELP, usageErrorsExit2 } from '@capstan/shared/usage';
import { loadAgentConfig, type AgentConfig } from './config.js';
import { ensureIdentity } from './identity/state.js';
import { collectInventory } from './inventory/collect.js';
import { Outbox } from './queue/outbox.js';
import { RelayClient } from './queue/upload.js';
import { runAgent, type RunResult } from './run.js';
import { serveRemoteRuns } from './remote-run/serve.js';

const EXIT_RUN_ERRORS = 4;
const EXIT_PENDING = 5;
const EXIT_REFUSED = 6;

interface Flags {
  config?: string;
  relay?: string;
  stateDir?: string;
  logLevel?: string;
  test?: boolean;
}

function loadOrExit(flags: Flags): AgentConfig {
  try {
    return loadAgentConfig({
      path: flags.config,
      overrides: { 'agent.relay': flags.relay, 'agent.state_dir': flags.stateDir, 'log.level': flags.logLevel },
    });
  } catch (err) {
    process.stderr.write(`capstan-agent: ${isCapstanError(err) ? err.message : String(err)}\n`);
    process.exit(EXIT_CONFIG);
  }
}

/** `--test`: the configuration and the file it names (the policy key), then exit 0, or 2 with why. */
function testConfig(flags: Flags): never {
  const config = loadOrExit(flags);
  if (config.policy.public_key) {
    let pem: string;
    try {
      pem = readFileSync(config.policy.public_key, 'utf8');
    } catch (err) {
      process.stderr.write(`capstan-agent: policy.public_key ${config.policy.public_key}: ${(err as Error).message}\n`);
      process.exit(EXIT_CONFIG);
    }
    if (!pem.includes('-----BEGIN PUBLIC KEY-----')) {
      process.stderr.write(`capstan-agent: policy.public_key ${config.policy.public_key} is not a PEM public key\n`);
      process.exit(EXIT_CONFIG);
    }
  }
  process.stdout.write('configuration ok\n');
  process.exit(EXIT_OK);
}

/** What a run says, and exits with, when the server will not serve this node yet, or at all. */
function enrollmentNotice(r: RunResult): { line: string; code: number } | null {
  if (r.enrollment === 'refused') return { line: `node ${r.nodeId} is refused by the server: an admin refused it; nothing it sends is kept\n`, code: EXIT_REFUSED };
  if (r.enrollment) return { line: `node ${r.nodeId} is waiting for acceptance: accept it at the server (capstan-server nodes accept ${r.nodeId})\n`, code: EXIT_PENDING };
  return null;
}

function setup(flags: Flags): { config: AgentConfig; log: Logger } {
  if (flags.test) testConfig(flags);
  const config = loadOrExit(flags);
  // Synchronous logging to stderr: a one-shot run that is killed must not lose its last lines.
  const log = pino(logOptions('capstan-agent', config.log.level, pino.stdSerializers.err), pino.destination({ dest: 2, sync: true }));
  return { config, log };
}

const common = (c: Command) =>
  c
    .option('-c, --config <file>', 'TOML configuration file')
    .option('--relay <url>', 'relay (or server) URL')
    .option('--state-dir <dir>', 'state directory (identity, outbox)')
    .option('--log-level <level>', 'trace, debug, info, warn, error')
    .option('--test', 'check the configuration (and the policy key file it names), print "configuration ok", exit');

const program = new Command('capstan-agent')
  .description('Capstan agent: inventory, checks and signed run logs sent to a relay')
  .version(CAPSTAN_VERSION, '-V, --version')
  .addHelpText('after', `\n${EXIT_CODES_HELP}, ${EXIT_RUN_ERRORS} the run's checks reported errors, ${EXIT_PENDING} the node is waiting for acceptance, ${EXIT_REFUSED} the server refused the node.`);
usageErrorsExit2(program, 'capstan-agent', (code) => process.exit(code));
// `capstan-agent --test [-c file]`: what an admin runs after editing agent.toml.
// Program options only before the command, so that `run -c <file>` stays the command's own.
program
  .enablePositionalOptions()
  .argument('[command]')
  .usage('[options] [command]')
  .option('-c, --config <file>', 'TOML configuration file (with --test)')
  .option('--test', 'check the configuration (and the policy key file it names), print "configuration ok", exit')
  .action((command: string | undefined, flags: Flags) => {
    if (command !== undefined) program.error(`error: unknown command '${command}'`);
    if (!flags.test) program.help({ error: true });
    testConfig(flags);
  });

common(program.command('run').description('run once: inventory when due, checks, run log, upload'))
  .option('--force-inventory', 'send the inventory even if unchanged')
  .option('--audit', 'audit every directive, whatever its mode: change nothing')
  .option('--dry-run', 'print what the run would do; change, sign and send nothing')
  .action(async (flags: Flags & { forceInventory?: boolean; audit?: boolean; dryRun?: boolean }) => {
    const { config, log } = setup(flags);
    const r = await runAgent(config, log, {
      forceInventory: flags.forceInventory,
      audit: flags.audit,
      dryRun: flags.dryRun,
      onOutcome: flags.dryRun ? (line) => process.stdout.write(`${line}\n`) : undefined,
    });
    const c = r.counts;
    // The same figure the server computes for this run (shared compliance, same expectations).
    process.stdout.write(
      `node ${r.nodeId} config ${r.configId}: ${r.compliance.repaired} repaired, ${r.compliance.error} errors, ${complianceLine(r.compliance)}; ` +
        `sent ${r.flush.sent}, queued ${r.flush.remaining}${r.inventorySent ? ', inventory sent' : ''}\n`,
    );
    if ((c.result_error ?? 0) + (c.audit_error ?? 0) > 0) process.exitCode = 4;
    const notice = enrollmentNotice(r);
    if (notice) {
      process.stdout.write(notice.line);
      process.exitCode = notice.code;
    }
  });

common(program.command('inventory').description('print the inventory this node would send')).action(async (flags: Flags) => {
  const { config, log } = setup(flags);
  const id = await ensureIdentity(config.agent.state_dir, config.agent.key_bits);
  const policyServer = await policyServerId(config.agent.relay, config.agent.state_dir, config.agent.timeout, log);
  const inv = await collectInventory({
    nodeId: id.nodeId, certPem: id.certPem, policyServer, cloudInstanceData: config.inventory.cloud_instance_data,
    facts: {
      dir: config.inventory.facts_dir, timeoutMs: config.inventory.facts_timeout,
      maxBytes: config.inventory.facts_max_size, maxFiles: config.inventory.facts_max_files,
    },
  });
  process.stdout.write(`${JSON.stringify(inv, null, 2)}\n`);
});

common(program.command('info').description("print this node's id and certificate")).action(async (flags: Flags) => {
  const { config } = setup(flags);
  const id = await ensureIdentity(config.agent.state_dir, config.agent.key_bits);
  process.stdout.write(`${JSON.stringify({ node_id: id.nodeId, relay: config.agent.relay, certificate: id.certPem }, null, 2)}\n`);
});

common(program.command('listen').description('keep a connection to the relay and run when a remote run is triggered'))
  .action(async (flags: Flags) => {
    const { config, log } = setup(flags);
    const stop = new AbortController();
    for (const sig of ['SIGTERM', 'SIGINT'] as const) process.once(sig, () => stop.abort());
    await serveRemoteRuns(config, log, stop.signal);
  });

const queue = program.command('queue').description('files waiting to be sent');
common(queue.command('list').description('list the outbox')).action(async (flags: Flags) => {
  const { config, log } = setup(flags);
  const outbox = new Outbox(join(config.agent.state_dir, 'outbox'), log);
  await outbox.init();
  for (const e of await outbox.list()) process.stdout.write(`${e.kind}\t${e.name}\t${new Date(e.mtimeMs).toISOString()}\n`);
});
common(queue.command('flush').description('send the outbox now')).action(async (flags: Flags) => {
  const { config, log } = setup(flags);
  const outbox = new Outbox(join(config.agent.state_dir, 'outbox'), log);
  await outbox.init();
  const r = await outbox.flush(new RelayClient(config.agent.relay, config.agent.timeout));
  process.stdout.write(`sent ${r.sent}, rejected ${r.rejected}, remaining ${r.remaining}\n`);
  if (r.error) process.exitCode = 3;
});

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`capstan-agent: ${isCapstanError(err) ? `${err.code}: ${err.message}` : String(err)}\n`);
  process.exit(EXIT_CRASH);
});
