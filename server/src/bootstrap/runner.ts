/**
 * Running bootstrap jobs from the server (docs/bootstrap.md). Their tasks follow the jobs' state
 * machine: a pass claims pending tasks (pending → scheduled, one conditional update, so two
 * servers on one database never both take a task), then each node goes in_progress and through
 * the steps connect, verify, copy, install (shared/src/bootstrap/ssh.ts, the part a relay can run
 * too), enrol (here: waiting for the agent's first inventory carrying this task's secret, which
 * the inventory ingest uses once to join the node's row and accept it) and done. Failures end the
 * task `failed` with a reason naming the coded error (REASONS in jobs/states.ts).
 *
 * Timeouts: each step has its own (bootstrap.connect_timeout, command_timeout, enrol_timeout),
 * and the job's deadline aborts whatever is left (the jobs sweep). A task cancelled or timed out
 * meanwhile stops at its next step: its step update finds it no longer in progress. Stopping the
 * server ends the SSH connections at once and leaves their tasks to that deadline.
 */
import { createHash, randomBytes } from 'node:crypto';
import { capstanError, type Logger } from '@capstan/shared';
import { bootstrapOverSsh, isBootstrapError, type BootstrapStep } from './ssh.js';
import { chooseCredential, openCredential } from './credentials.js';
import type { AgentPackages } from './packages.js';
import { notBootstrappable } from '../jobs/create.js';
import type { KeySealer } from '../identity/seal.js';
import type { JobRecord, Store } from '../store/store.js';

export interface BootstrapSettings {
  concurrency: number;
  connect_timeout: number;
  command_timeout: number;
  enrol_timeout: number;
  enrol_poll: number;
  sudo: string;
  start_command: string;
  remote_tmp: string;
  install_root: string;
}

export interface BootstrapRunnerOptions {
  store: Store;
  log: Logger;
  sealer: KeySealer;
  packages: AgentPackages;
  settings: BootstrapSettings;
  sweepIntervalMs: number;
  now?: () => Date;
}

/** Coded errors → the task's failure reason. */
const REASON_OF: Record<string, string> = {
  ERR_BOOTSTRAP_AUTH: 'auth_refused',
  ERR_BOOTSTRAP_HOST_KEY_CHANGED: 'host_key_changed',
  ERR_BOOTSTRAP_CONNECT: 'unreachable',
  ERR_BOOTSTRAP_NO_SUDO: 'no_sudo',
  ERR_BOOTSTRAP_UNSUPPORTED_OS: 'unsupported_os',
  ERR_BOOTSTRAP_NO_PACKAGE: 'no_package',
  ERR_BOOTSTRAP_COPY: 'copy_failed',
  ERR_BOOTSTRAP_INSTALL: 'install_failed',
  ERR_BOOTSTRAP_ENROL_TIMEOUT: 'enrol_timeout',
  ERR_BOOTSTRAP_COMMAND_TIMEOUT: 'command_timeout',
  ERR_CREDENTIAL_NONE: 'no_credential',
  ERR_CREDENTIAL_UNKNOWN: 'no_credential',
  ERR_CREDENTIAL_AMBIGUOUS: 'ambiguous_credential',
  ERR_CREDENTIAL_SEALED: 'credential_sealed',
};

/** The digest under which a task's enrollment secret is stored (and looked up at ingest). */
export const enrolDigest = (secret: string) => createHash('sha256').update(secret, 'utf8').digest('hex');

/** TOML basic string (JSON's escapes are TOML's for what a URL or a path holds). */
const tomlString = (s: string) => JSON.stringify(s);

/** The agent's configuration a bootstrap writes. */
export function agentConfigText(o: { relayUrl: string; secret: string; installRoot: string; jobId: string }): string {
  const root = o.installRoot.replace(/\/+$/, '');
  return [
    `# Written by capstan-server's bootstrap job ${o.jobId}.`,
    '[agent]',
    `relay = ${tomlString(o.relayUrl)}`,
    '# Single-use secret of this bootstrap: its first inventory joins the node\'s row and is accepted.',
    `enrollment_secret = ${tomlString(o.secret)}`,
    ...(root ? [`state_dir = ${tomlString(`${root}/var/lib/capstan/agent`)}`] : []),
    '',
  ].join('\n');
}

/** Thrown by a step update when the task is no longer in progress (cancelled, timed out). */
class Stopped extends Error {}

export class BootstrapRunner {
  private timer: NodeJS.Timeout | null = null;
  private running = 0;
  private passing: Promise<void> | null = null;
  private again = false;
  private stopped = false;
  private readonly inFlight = new Set<Promise<void>>();
  /** Ends every SSH connection when the server stops, rather than waiting out command_timeout. */
  private readonly abort = new AbortController();
  private readonly now: () => Date;

  constructor(private readonly o: BootstrapRunnerOptions) {
    this.now = o.now ?? (() => new Date());
  }

  start(): void {
    this.timer = setInterval(() => {
      this.kick();
      void this.o.store.bootstrap.deleteEnrolTokensBefore(this.now().toISOString(), 1000).catch((err: unknown) => this.o.log.warn({ err }, 'expired enrol tokens not deleted'));
    }, this.o.sweepIntervalMs);
    this.timer.unref();
    this.kick();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.abort.abort();
    await this.passing;
    await Promise.allSettled([...this.inFlight]);
  }

  /** Take pending bootstrap tasks, up to the free slots. Passes never overlap. */
  kick(): void {
    if (this.stopped) return;
    if (this.passing) {
      this.again = true;
      return;
    }
    this.passing = (async () => {
      do {
        this.again = false;
        try {
          await this.pass();
        } catch (err) {
          this.o.log.warn({ err }, 'bootstrap dispatch failed (retried at the next sweep)');
        }
      } while (this.again && !this.stopped);
    })().finally(() => {
      this.passing = null;
    });
  }

  private async pass(): Promise<void> {
    const free = this.o.settings.concurrency - this.running;
    if (free <= 0 || this.stopped) return;
    const work = await this.o.store.jobs.pendingWork(free, 'bootstrap');
    for (const { job, nodes } of work) {
      const claimed = await this.o.store.jobs.claimTasks(job.id, nodes, { at: this.now().toISOString(), relay: 'server', message: 'bootstrapping from the server' });
      for (const node of claimed) {
        this.running++;
        const p = this.task(job, node)
          .catch((err: unknown) => this.o.log.error({ err, job: job.id, nodeId: node }, 'bootstrap task failed unexpectedly'))
          .finally(() => {
            this.running--;
            this.inFlight.delete(p);
            this.kick();
          });
        this.inFlight.add(p);
      }
    }
  }

  private async task(job: JobRecord, nodeId: string): Promise<void> {
    const { store, settings } = this.o;
    const log = this.o.log.child({ job: job.id, nodeId });
    const at = () => this.now().toISOString();
    const started = await store.jobs.transition(job.id, nodeId, { to: 'in_progress', reason: 'started', at: at(), expect: ['scheduled'], relay: 'server', message: 'started from the server' });
    if (!started) return;
    const step = async (s: BootstrapStep, message: string) => {
      if (!(await store.jobs.setTaskStep(job.id, nodeId, s, message, at()))) throw new Stopped();
    };
    try {
      const node = (await store.listNodes({ filters: [{ key: 'id', values: [nodeId] }], page: 1, per_page: 1 })).data.find((n) => n.id === nodeId);
      if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} was deleted`);
      const why = notBootstrappable(node);
      if (why) {
        await store.jobs.transition(job.id, nodeId, { to: 'failed', reason: why.reason, at: at(), expect: ['in_progress'], message: why.message });
        return;
      }
      const named = job.bootstrap?.credential ?? null;
      const chosen = named ?? chooseCredential(node, await store.bootstrap.listCredentials()).id;
      const sealed = await store.bootstrap.getSealedCredential(chosen);
      if (!sealed) throw capstanError('ERR_CREDENTIAL_UNKNOWN', `credential ${chosen} is unknown`);
      const credential = openCredential(sealed, this.o.sealer);

      // The task's own secret: stored as a digest, valid until the job's deadline, used once.
      const secret = randomBytes(24).toString('base64url');
      await store.bootstrap.putEnrolToken({ digest: enrolDigest(secret), job_id: job.id, node_id: nodeId, expires_at: job.deadline_at });
      const relayUrl = job.bootstrap?.relay_url ?? '';
      const root = settings.install_root.replace(/\/+$/, '');
      const outcome = await bootstrapOverSsh({
        host: node.address!,
        credential,
        packageFor: (arch) => this.o.packages.packageFor(arch),
        agentConfig: agentConfigText({ relayUrl, secret, installRoot: root, jobId: job.id }),
        installRoot: root || '/',
        sudo: settings.sudo,
        startCommand: settings.start_command,
        remoteTmp: settings.remote_tmp,
        connectTimeoutMs: settings.connect_timeout,
        commandTimeoutMs: settings.command_timeout,
        signal: this.abort.signal,
      }, {
        step,
        hostKey: async (algorithm, fingerprint) => {
          // Trust on first use: the first key seen is pinned; any other stops until an admin clears it.
          const pin = await store.bootstrap.pinHostKey({ node_id: nodeId, algorithm, fingerprint, pinned_at: at(), job_id: job.id });
          return pin.fingerprint === fingerprint && pin.algorithm === algorithm;
        },
      });
      log.info({ credential: chosen, arch: outcome.arch, hostKey: outcome.hostKey.fingerprint }, 'agent installed, waiting for its inventory');

      await step('enrol', `agent installed (${outcome.arch}); waiting for its first inventory to ${relayUrl}`);
      const deadline = Date.now() + settings.enrol_timeout;
      let enrolled: string | null = null;
      for (;;) {
        enrolled = await store.bootstrap.enrolledBy(job.id, nodeId);
        if (enrolled || this.stopped || Date.now() >= deadline) break;
        const task = await store.jobs.getTask(job.id, nodeId);
        if (task?.state !== 'in_progress') throw new Stopped();
        await new Promise((r) => setTimeout(r, Math.min(settings.enrol_poll, Math.max(0, deadline - Date.now()))));
      }
      if (!enrolled) {
        if (this.stopped) return; // the job's deadline settles it
        throw capstanError('ERR_BOOTSTRAP_ENROL_TIMEOUT', `no inventory with this job's secret within ${settings.enrol_timeout} ms (bootstrap.enrol_timeout)`);
      }
      await step('done', `enrolled as node ${enrolled}`);
      await store.jobs.transition(job.id, nodeId, { to: 'done', reason: 'completed', at: at(), expect: ['in_progress'], message: `enrolled as node ${enrolled}` });
      log.info({ enrolledAs: enrolled }, 'node bootstrapped');
    } catch (err) {
      // Stopping: the task stays in progress and the job's deadline settles it; no false reason.
      if (err instanceof Stopped || this.stopped) return;
      const code = (err as { code?: string }).code ?? '';
      const reason = REASON_OF[code] ?? 'bootstrap_error';
      const message = isBootstrapError(err) || code.startsWith('ERR_') ? `${code}: ${(err as Error).message}` : `ERR_INTERNAL: ${(err as Error).message}`;
      if (reason === 'bootstrap_error') log.warn({ err }, 'bootstrap failed');
      else log.info({ code }, 'bootstrap failed');
      await store.jobs.transition(job.id, nodeId, { to: 'failed', reason, at: at(), expect: ['in_progress'], message: message.slice(0, 2000) });
    }
  }
}
