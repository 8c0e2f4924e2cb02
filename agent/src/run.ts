/**
 * One agent run: identity → inventory (when due) → checks → run log → sign → compress → outbox →
 * flush to the relay. Everything it produces goes through the outbox, so a relay outage delays
 * delivery and never loses a run.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { bundleExpectations, computeCompliance, summarize, type ComplianceCounts } from '@capstan/shared/compliance/compute';
import { compressSync } from '@capstan/shared/envelope/codec';
import { type Enrollment } from '@capstan/shared/identity/keeper';
import { INVENTORY_TOKEN_FIELD, tokenRequestStamp } from '@capstan/shared/identity/renew';
import { type Logger } from '@capstan/shared/log';
import { inventoryFileName, runLogFileName } from '@capstan/shared/runlog/name';
import { signSmime } from '@capstan/shared/smime/sign';
import { configuredPolicyKey, type AgentConfig } from './config.js';
import { selfChecks } from './checks.js';
import { ensureIdentity, writeAtomic, type AgentIdentity } from './identity/state.js';
import { collectInventory } from './inventory/collect.js';
import { acquireRunLock, nextRunStart } from './identity/lock.js';
import { policyServerId } from './identity/policy-server.js';
import { TokenKeeper } from './identity/token.js';
import { Outbox, type FlushResult } from './queue/outbox.js';
import { RelayClient } from './queue/upload.js';
import { RunLogWriter } from './runlog/write.js';
import { nodeData } from '@capstan/shared/policy/data';
import { Redactor } from '@capstan/shared/policy/secrets';
import { applyDirectives, defaultIdentities, nodeConditionEnv } from './policy/apply.js';
import { fetchPolicy } from './policy/fetch.js';
import { reportPolicy } from './policy/report.js';
import { fetchShared } from './policy/shared-folder.js';
import { secretPaths } from './methods/diff.js';

export interface RunResult {
  nodeId: string;
  inventorySent: boolean;
  runLog: string;
  counts: Readonly<Record<string, number>>;
  /**
   * The run's compliance against the policy it ran, by the server's own computation (shared):
   * what the server shows for this run once it arrives, before time (applying, no answer) or a
   * newer policy there changes it.
   */
  compliance: ComplianceCounts;
  flush: FlushResult;
  configId: string;
  /** Why the server issued no identity token in this run: the node is not accepted (yet). */
  enrollment: Enrollment | null;
}

interface InventoryStamp {
  sent_at: number;
  hash: string;
}

/** Fields that change on every collection and must not make an inventory count as "changed". */
function stableHash(inv: Record<string, unknown>): string {
  const { uptime: _u, memory, disks, ...rest } = inv as { uptime?: unknown; memory?: { total?: number }; disks?: Array<{ mount: string; size: number }> };
  const stable = { ...rest, memory: memory?.total, disks: (disks ?? []).map((d) => [d.mount, d.size]) };
  return createHash('sha256').update(JSON.stringify(stable)).digest('hex');
}

/**
 * Queue the inventory when due; the name of the file queued, or null. With `tokenRequest`, the
 * signed inventory also asks for the node's token (INVENTORY_TOKEN_FIELD).
 */
export async function sendInventoryIfDue(
  config: AgentConfig, id: AgentIdentity, outbox: Outbox, inv: Record<string, unknown>, opts: { force?: boolean; now: Date; tokenRequest?: boolean },
): Promise<string | null> {
  const stampPath = join(config.agent.state_dir, 'inventory.stamp');
  const stamp = await readFile(stampPath, 'utf8').then((t) => JSON.parse(t) as InventoryStamp).catch(() => null);
  const hash = stableHash(inv);
  // The secret travels only inside the signed inventory; the server removes it before storing.
  const sent = {
    ...inv,
    ...(config.agent.enrollment_secret && { enrollment_secret: config.agent.enrollment_secret }),
    ...(opts.tokenRequest && { [INVENTORY_TOKEN_FIELD]: tokenRequestStamp(opts.now) }),
  };
  // A fixed offset per node within the splay (like systemd's FixedRandomDelay): stable for one node,
  // spread across the fleet.
  const offset = config.inventory.splay > 0 ? createHash('sha256').update(id.nodeId).digest().readUInt32BE(0) % config.inventory.splay : 0;
  const due = opts.force || !stamp || stamp.hash !== hash || opts.now.getTime() - stamp.sent_at >= config.inventory.interval + offset;
  if (!due) return null;
  const signed = signSmime(Buffer.from(JSON.stringify(sent)), id);
  const name = inventoryFileName(id.nodeId, opts.now, 'zstd');
  await outbox.add('inventories', name, compressSync(signed, 'zstd'));
  await writeAtomic(stampPath, JSON.stringify({ sent_at: opts.now.getTime(), hash } satisfies InventoryStamp), 0o600);
  return name;
}

export interface RunOptions {
  clock?: () => Date;
  forceInventory?: boolean;
  /** Audit every directive, whatever its mode. */
  audit?: boolean;
  /** Look only: print what enforce would do; nothing is changed, signed or sent. */
  dryRun?: boolean;
  /** Each directive outcome as it happens. */
  onOutcome?: (line: string) => void;
  /** Environment for the commands methods run (tests put fake tools on PATH). */
  env?: NodeJS.ProcessEnv;
}

export async function runAgent(config: AgentConfig, log: Logger, opts: RunOptions = {}): Promise<RunResult> {
  const clock = opts.clock ?? (() => new Date());
  const id = await ensureIdentity(config.agent.state_dir, config.agent.key_bits);
  const release = await acquireRunLock(config.agent.state_dir);
  try {
    return await runLocked(config, log, id, clock, opts);
  } finally {
    await release();
  }
}

async function runLocked(config: AgentConfig, log: Logger, id: AgentIdentity, clock: () => Date, opts: RunOptions): Promise<RunResult> {
  const startedAt = opts.dryRun ? clock() : await nextRunStart(config.agent.state_dir, clock);
  const outbox = new Outbox(join(config.agent.state_dir, 'outbox'), log);
  await outbox.init();
  const env = opts.env ?? process.env;

  const policyServer = opts.dryRun
    ? new URL(config.agent.relay).hostname
    : await policyServerId(config.agent.relay, config.agent.state_dir, config.agent.timeout, log);
  const inv = await collectInventory({
    nodeId: id.nodeId, certPem: id.certPem, policyServer, cloudInstanceData: config.inventory.cloud_instance_data,
    facts: {
      dir: config.inventory.facts_dir, timeoutMs: config.inventory.facts_timeout,
      maxBytes: config.inventory.facts_max_size, maxFiles: config.inventory.facts_max_files,
    },
  });
  const auth = new TokenKeeper({ relay: config.agent.relay, stateDir: config.agent.state_dir, timeoutMs: config.agent.timeout, id, log, clock });
  // A token due (or none yet) is asked for inside the inventory too: a server answering the upload
  // itself hands it back. Through a relay (which answers uploads itself) the signed renewal below does.
  const tokenRequest = !opts.dryRun && (await auth.due());
  const inventoryFile = opts.dryRun ? null : await sendInventoryIfDue(config, id, outbox, inv, { force: opts.forceInventory, now: startedAt, tokenRequest });
  const inventorySent = inventoryFile !== null;
  const client = new RelayClient(config.agent.relay, config.agent.timeout, inventoryFile && tokenRequest ? { file: inventoryFile, onToken: (t) => auth.accept(t) } : undefined);
  // Sent before the policy request, so that a token in the answer serves this run already.
  const early = inventoryFile && tokenRequest ? await outbox.flush(client) : null;
  if (early?.error) log.debug({ err: early.error }, 'inventory not sent yet');

  const configuredKey = await configuredPolicyKey(config, (p) => readFile(p, 'utf8'));
  const policy = await fetchPolicy({ relay: config.agent.relay, nodeId: id.nodeId, stateDir: config.agent.state_dir, timeoutMs: config.agent.timeout, configuredKeyPem: configuredKey, auth });
  if (policy.problem && policy.problem.code !== 'ERR_NOT_FOUND') {
    // A node not accepted yet gets no policy: expected, and said once by the token keeper already.
    const fields = { code: policy.problem.code, reason: policy.problem.message, using: policy.source };
    if (auth.enrollment) log.debug(fields, 'policy not refreshed');
    else log.warn(fields, 'policy not refreshed');
  }

  // Every secret the run opens is taken out of whatever it writes (docs/policy.md, Secrets).
  const redactor = new Redactor();
  const w = new RunLogWriter({ nodeId: id.nodeId, configId: policy.bundle?.config_id ?? 'none', startedAt, clock, redact: (s) => redactor.redact(s) });
  // No policy yet (404) is the normal state of a new node, not worth a warning in every run.
  if (policy.problem && !policy.problem.refused && policy.problem.code !== 'ERR_NOT_FOUND') {
    // An agent log line, as RUDDER captures them: the server attaches it to the next report.
    w.log('warning', `policy not refreshed (${policy.problem.code}): ${policy.problem.message}; running ${policy.source === 'none' ? 'no policy' : 'the cached policy'}`);
  }
  w.start();
  await selfChecks(w, { stateDir: config.agent.state_dir, keyPath: id.keyPath });
  // Which policy runs, or why a fresh one was refused (the last good policy still runs).
  reportPolicy(w, policy);
  if (policy.bundle) {
    await applyDirectives(policy.bundle.directives, {
      writer: w,
      forceAudit: opts.audit ?? false,
      conditionEnv: nodeConditionEnv(defaultIdentities(id.nodeId, inv.fqdn as string | undefined), nodeData(inv, {
        id: id.nodeId, hostname: String(inv.hostname ?? ''), relay: policyServer, properties: policy.bundle.properties ?? {},
      }), env),
      nodeKeyPem: id.keyPem,
      bundleSecrets: policy.bundle.secrets,
      redactor,
      ctx: {
        dryRun: opts.dryRun ?? false,
        log,
        env,
        commandTimeoutMs: config.methods.command_timeout,
        sysctlRoot: config.methods.sysctl_root,
        diff: {
          maxBytes: config.methods.max_diff_bytes,
          maxFileSize: config.methods.max_diff_file_size,
          isSecret: secretPaths({ stateDir: config.agent.state_dir, globs: config.methods.diff_secret_paths }),
        },
        fetchShared: (path, sha256) => fetchShared(config.agent.relay, path, config.agent.timeout, auth, { sha256 }),
      },
      onOutcome: opts.onOutcome ? (d, o, type) => opts.onOutcome!(redactor.redact(`${type}\t${d.rule_id}/${d.id}\t${o.component} ${o.key}: ${o.message}`)) : undefined,
    });
  }
  w.end();
  const compliance = computeCompliance(policy.bundle ? bundleExpectations(policy.bundle.directives) : null, summarize(w.reports).outcomes).counts;
  if (opts.dryRun) return { nodeId: id.nodeId, inventorySent, runLog: '', counts: w.reportCounts, compliance, flush: { sent: 0, rejected: 0, remaining: 0 }, configId: w.configId, enrollment: auth.enrollment };

  const signed = signSmime(Buffer.from(w.text()), id);
  const runLog = runLogFileName(id.nodeId, startedAt, 'zstd');
  await outbox.add('reports', runLog, compressSync(signed, 'zstd'));

  await outbox.enforceCaps(config.queue.max_files, config.queue.max_age, clock().getTime());
  const last = await outbox.flush(client);
  // What this run sent, the early flush included.
  const flush = early ? { ...last, sent: last.sent + early.sent, rejected: last.rejected + early.rejected } : last;
  if (flush.error) log.warn({ err: flush.error, queued: flush.remaining }, 'relay unreachable, files kept for the next run');
  return { nodeId: id.nodeId, inventorySent, runLog, counts: w.reportCounts, compliance, flush, configId: w.configId, enrollment: auth.enrollment };
}
