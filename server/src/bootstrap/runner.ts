/**
 * Running bootstrap jobs from the server (docs/bootstrap.md). Their tasks follow the jobs' state
 * machine: a pass claims pending tasks (pending → scheduled, one conditional update, so two
 * servers on one database never both take a task), then each node goes in_progress and through
 * the steps connect, verify, copy, install (toolkit/src/bootstrap/ssh.ts, the part a relay can run
 * too), enrol (here: waiting for the agent's first inventory carrying this task's secret, which
 * the inventory ingest uses once to join the node's row and accept it) and done. Failures end the
 * task `failed` with a reason naming the coded error (REASONS in jobs/states.ts).
 *
 * Nodes whose manager a relay hosts are that relay's (store pendingWork's `host`): the relay claims
 * them (claimForRelay: the same preparation, the secrets sealed to its certificate), runs the same
 * SSH steps and reports them (relayEvent), which are recorded here as the server's own are; the
 * enrol step is always the server's.
 *
 * Timeouts: each step has its own (bootstrap.connect_timeout, command_timeout, enrol_timeout),
 * and the job's deadline aborts whatever is left (the jobs sweep). A task cancelled or timed out
 * meanwhile stops at its next step: its step update finds it no longer in progress. Stopping the
 * server ends the SSH connections at once and leaves their tasks to that deadline.
 */
import { createHash, randomBytes } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import { bootstrapOverSsh, isBootstrapError, type AgentPackage, type BootstrapStep, type SshCredential } from '@capstan/toolkit/bootstrap/ssh';
import { sealedTaskAad, sealToCertificate } from '@capstan/toolkit/bootstrap/seal';
import { Slots } from '@capstan/toolkit/slots';
import type { RelayBootstrapAnswer, RelayBootstrapEvent, RelayBootstrapTask, SealedTaskSecrets } from '@capstan/toolkit/bootstrap/relay';
import { chooseCredential, openCredential } from './credentials.js';
import type { AgentPackages } from '@capstan/toolkit/bootstrap/packages';
import { notBootstrappable } from '../jobs/create.js';
import type { KeySealer } from '../identity/seal.js';
import type { JobRecord, NodeRecord, Store } from '../store/store.js';

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
  /** bootstrap.package_url and its sha256, handed to relays to download from (absent: they ask the server). */
  packageSource?: { url: string; sha256: string };
  /**
   * The server's current policy public key (PEM): written into every agent configuration a
   * bootstrap makes (`[policy] public_key_pem`), so the agent never trusts a key on first use.
   */
  policyKeyPem?: () => string;
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
  ERR_BOOTSTRAP_RELAY: 'relay_key',
  ERR_BOOTSTRAP_SEALED: 'relay_key',
};

/** The digest under which a task's enrollment secret is stored (and looked up at ingest). */
export const enrolDigest = (secret: string) => createHash('sha256').update(secret, 'utf8').digest('hex');

/** TOML basic string (JSON's escapes are TOML's for what a URL or a path holds). */
const tomlString = (s: string) => JSON.stringify(s);

/**
 * The agent's configuration a bootstrap writes. With the server's policy key it is pinned there
 * (`[policy] public_key_pem`): the agent then refuses a bundle no chain from that key endorses,
 * instead of pinning whatever key its first policy offers.
 */
export function agentConfigText(o: { relayUrl: string; secret: string; installRoot: string; jobId: string; policyKeyPem?: string }): string {
  const root = o.installRoot.replace(/\/+$/, '');
  const pem = o.policyKeyPem?.trim();
  return [
    `# Written by capstan-server's bootstrap job ${o.jobId}.`,
    '[agent]',
    `relay = ${tomlString(o.relayUrl)}`,
    '# Single-use secret of this bootstrap: its first inventory joins the node\'s row and is accepted.',
    `enrollment_secret = ${tomlString(o.secret)}`,
    ...(root ? [`state_dir = ${tomlString(`${root}/var/lib/capstan/agent`)}`] : []),
    ...(pem ? ['', '[policy]', '# The server\'s policy key, pinned at bootstrap.', `public_key_pem = ${tomlString(`${pem}\n`)}`] : []),
    '',
  ].join('\n');
}

/** Thrown by a step update when the task is no longer in progress (cancelled, timed out). */
class Stopped extends Error {}

export class BootstrapRunner {
  /**
   * Passes never overlap; a kick during one (a job created, a task ended) passes again after it.
   * Its signal ends every SSH connection when the server stops, rather than waiting out
   * command_timeout.
   */
  private readonly slots: Slots;
  private readonly now: () => Date;

  constructor(private readonly o: BootstrapRunnerOptions) {
    this.now = o.now ?? (() => new Date());
    this.slots = new Slots({
      slots: o.settings.concurrency,
      pass: (free) => this.pass(free),
      passFailed: (err) => this.o.log.warn({ err }, 'bootstrap dispatch failed (retried at the next sweep)'),
      whileBusy: 'rerun',
    });
  }

  start(): void {
    this.slots.start(this.o.sweepIntervalMs, () => {
      this.kick();
      void this.o.store.bootstrap.deleteEnrolTokensBefore(this.now().toISOString(), 1000).catch((err: unknown) => this.o.log.warn({ err }, 'expired enrol tokens not deleted'));
    });
  }

  stop(): Promise<void> {
    return this.slots.stop();
  }

  /** Take pending bootstrap tasks, up to the free slots. */
  kick(): void {
    this.slots.kick();
  }

  private async pass(free: number): Promise<void> {
    if (free <= 0 || this.stopped) return;
    const work = await this.o.store.jobs.pendingWork(free, 'bootstrap');
    for (const { job, nodes } of work) {
      const claimed = await this.o.store.jobs.claimTasks(job.id, nodes, { at: this.now().toISOString(), relay: 'server', message: 'bootstrapping from the server' });
      for (const node of claimed) {
        this.slots.run(() => this.task(job, node), (err) => this.o.log.error({ err, job: job.id, nodeId: node }, 'bootstrap task failed unexpectedly'));
      }
    }
  }

  private get stopped(): boolean {
    return this.slots.stopped;
  }

  /**
   * What both a server-run and a relay-run task need first: the node (still bootstrappable), its
   * credential opened, and its enrollment secret made (stored as a digest until the deadline).
   * Null when the task was failed here already (the node cannot be bootstrapped).
   */
  private async prepare(job: JobRecord, nodeId: string): Promise<{ node: NodeRecord; credentialId: string; credential: SshCredential; secret: string } | null> {
    const { store } = this.o;
    const node = (await store.listNodes({ filters: [{ key: 'id', values: [nodeId] }], page: 1, per_page: 1 })).data.find((n) => n.id === nodeId);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} was deleted`);
    const why = notBootstrappable(node);
    if (why) {
      await store.jobs.transition(job.id, nodeId, { to: 'failed', reason: why.reason, at: this.at(), expect: ['in_progress'], message: why.message });
      return null;
    }
    const named = job.bootstrap?.credential ?? null;
    const chosen = named ?? chooseCredential(node, await store.bootstrap.listCredentials()).id;
    const sealed = await store.bootstrap.getSealedCredential(chosen);
    if (!sealed) throw capstanError('ERR_CREDENTIAL_UNKNOWN', `credential ${chosen} is unknown`);
    const credential = openCredential(sealed, this.o.sealer);
    // The task's own secret: stored as a digest, valid until the job's deadline, used once.
    const secret = randomBytes(24).toString('base64url');
    await store.bootstrap.putEnrolToken({ digest: enrolDigest(secret), job_id: job.id, node_id: nodeId, expires_at: job.deadline_at });
    return { node, credentialId: chosen, credential, secret };
  }

  private policyKey(): { policyKeyPem?: string } {
    const pem = this.o.policyKeyPem?.();
    return pem ? { policyKeyPem: pem } : {};
  }

  private at(): string {
    return this.now().toISOString();
  }

  /** End a task failed with the reason its coded error names. */
  private async fail(job: JobRecord | string, nodeId: string, err: unknown, log: Logger): Promise<void> {
    const code = (err as { code?: string }).code ?? '';
    const reason = REASON_OF[code] ?? 'bootstrap_error';
    const message = isBootstrapError(err) || code.startsWith('ERR_') ? `${code}: ${(err as Error).message}` : `ERR_INTERNAL: ${(err as Error).message}`;
    if (reason === 'bootstrap_error') log.warn({ err }, 'bootstrap failed');
    else log.info({ code }, 'bootstrap failed');
    await this.o.store.jobs.transition(typeof job === 'string' ? job : job.id, nodeId, { to: 'failed', reason, at: this.at(), expect: ['in_progress'], message: message.slice(0, 2000) });
  }

  /**
   * The enrol step, here whoever ran the SSH steps: wait for the agent's first inventory carrying
   * the task's secret, then done; enrol_timeout otherwise.
   */
  private async enrol(jobId: string, nodeId: string, relayUrl: string, arch: string, step: (s: BootstrapStep, m: string) => Promise<void>, log: Logger): Promise<void> {
    const { store, settings } = this.o;
    await step('enrol', `agent installed (${arch}); waiting for its first inventory to ${relayUrl}`);
    const deadline = Date.now() + settings.enrol_timeout;
    let enrolled: string | null = null;
    for (;;) {
      enrolled = await store.bootstrap.enrolledBy(jobId, nodeId);
      if (enrolled || this.stopped || Date.now() >= deadline) break;
      const task = await store.jobs.getTask(jobId, nodeId);
      if (task?.state !== 'in_progress') throw new Stopped();
      await new Promise((r) => setTimeout(r, Math.min(settings.enrol_poll, Math.max(0, deadline - Date.now()))));
    }
    if (!enrolled) {
      if (this.stopped) throw new Stopped(); // the job's deadline settles it
      throw capstanError('ERR_BOOTSTRAP_ENROL_TIMEOUT', `no inventory with this job's secret within ${settings.enrol_timeout} ms (bootstrap.enrol_timeout)`);
    }
    await step('done', `enrolled as node ${enrolled}`);
    await store.jobs.transition(jobId, nodeId, { to: 'done', reason: 'completed', at: this.at(), expect: ['in_progress'], message: `enrolled as node ${enrolled}` });
    log.info({ enrolledAs: enrolled }, 'node bootstrapped');
  }

  private stepper(jobId: string, nodeId: string) {
    return async (s: BootstrapStep, message: string) => {
      if (!(await this.o.store.jobs.setTaskStep(jobId, nodeId, s, message, this.at()))) throw new Stopped();
    };
  }

  private async task(job: JobRecord, nodeId: string): Promise<void> {
    const { store, settings } = this.o;
    const log = this.o.log.child({ job: job.id, nodeId });
    const started = await store.jobs.transition(job.id, nodeId, { to: 'in_progress', reason: 'started', at: this.at(), expect: ['scheduled'], relay: 'server', message: 'started from the server' });
    if (!started) return;
    const step = this.stepper(job.id, nodeId);
    try {
      const ready = await this.prepare(job, nodeId);
      if (!ready) return;
      const { node, credential, secret } = ready;
      const relayUrl = job.bootstrap?.relay_url ?? '';
      const root = settings.install_root.replace(/\/+$/, '');
      const outcome = await bootstrapOverSsh({
        host: node.address!,
        credential,
        packageFor: (arch) => this.o.packages.packageFor(arch),
        agentConfig: agentConfigText({ relayUrl, secret, installRoot: root, jobId: job.id, ...this.policyKey() }),
        installRoot: root || '/',
        sudo: settings.sudo,
        startCommand: settings.start_command,
        remoteTmp: settings.remote_tmp,
        connectTimeoutMs: settings.connect_timeout,
        commandTimeoutMs: settings.command_timeout,
        signal: this.slots.signal,
      }, {
        step,
        hostKey: async (algorithm, fingerprint) => {
          // Trust on first use: the first key seen is pinned; any other stops until an admin clears it.
          const pin = await store.bootstrap.pinHostKey({ node_id: nodeId, algorithm, fingerprint, pinned_at: this.at(), job_id: job.id });
          return pin.fingerprint === fingerprint && pin.algorithm === algorithm;
        },
      });
      log.info({ credential: ready.credentialId, arch: outcome.arch, hostKey: outcome.hostKey.fingerprint }, 'agent installed, waiting for its inventory');
      await this.enrol(job.id, nodeId, relayUrl, outcome.arch, step, log);
    } catch (err) {
      // Stopping: the task stays in progress and the job's deadline settles it; no false reason.
      if (err instanceof Stopped || this.stopped) return;
      await this.fail(job, nodeId, err, log);
    }
  }

  /**
   * A relay asks for the bootstrap tasks it runs (nodes whose manager it hosts), up to `limit`:
   * each is claimed for it and started (in_progress, `relay` naming it), prepared as a server-run
   * task is, and handed over with its secrets sealed to the relay's certificate. Tasks that fail
   * in preparation (no credential, nothing to bootstrap) are failed here and not handed over.
   */
  async claimForRelay(relay: string, limit: number, agentUrl: string | null): Promise<RelayBootstrapTask[]> {
    const { store, settings } = this.o;
    if (this.stopped) return [];
    const out: RelayBootstrapTask[] = [];
    const work = await store.jobs.pendingWork(limit, 'bootstrap', relay);
    if (work.length === 0) return out;
    const relayNode = await store.getNode(relay);
    for (const { job, nodes } of work) {
      const claimed = await store.jobs.claimTasks(job.id, nodes, { at: this.at(), relay, message: `handed to relay ${relay}` });
      for (const nodeId of claimed) {
        const log = this.o.log.child({ job: job.id, nodeId, relay });
        const started = await store.jobs.transition(job.id, nodeId, { to: 'in_progress', reason: 'started', at: this.at(), expect: ['scheduled'], relay, message: `started from relay ${relay}` });
        if (!started) continue;
        try {
          if (!relayNode?.certificate) throw capstanError('ERR_BOOTSTRAP_RELAY', `relay ${relay} has no registered certificate to seal the task to`);
          const ready = await this.prepare(job, nodeId);
          if (!ready) continue;
          const { node, credential, secret } = ready;
          const root = settings.install_root.replace(/\/+$/, '');
          // The node's agent talks to the relay that installs it, when the relay says where it listens.
          const relayUrl = agentUrl ?? job.bootstrap?.relay_url ?? '';
          const secrets: SealedTaskSecrets = {
            ...(credential.privateKey !== undefined && { private_key: credential.privateKey }),
            ...(credential.passphrase !== undefined && { passphrase: credential.passphrase }),
            ...(credential.password !== undefined && { password: credential.password }),
            agent_config: agentConfigText({ relayUrl, secret, installRoot: root, jobId: job.id, ...this.policyKey() }),
          };
          const pin = await store.bootstrap.getHostKey(nodeId);
          out.push({
            job_id: job.id, node_id: nodeId, host: node.address!, user: credential.user, port: credential.port,
            sealed: sealToCertificate(relayNode.certificate, sealedTaskAad(relay, job.id, nodeId), JSON.stringify(secrets)),
            host_key: pin && { algorithm: pin.algorithm, fingerprint: pin.fingerprint },
            package: this.o.packageSource ?? null,
            install_root: root || '/', sudo: settings.sudo, start_command: settings.start_command, remote_tmp: settings.remote_tmp,
            connect_timeout_ms: settings.connect_timeout, command_timeout_ms: settings.command_timeout,
          });
          log.info({ credential: ready.credentialId }, 'bootstrap task handed to its relay');
        } catch (err) {
          await this.fail(job, nodeId, err, log);
        }
      }
    }
    return out;
  }

  /** What a relay reports on a task it runs: recorded as the server records its own steps. */
  async relayEvent(relay: string, jobId: string, nodeId: string, event: RelayBootstrapEvent): Promise<RelayBootstrapAnswer> {
    const { store } = this.o;
    const task = await store.jobs.getTask(jobId, nodeId);
    // The same answer for unknown and not-yours: a relay learns nothing of others' tasks.
    if (!task || task.relay !== relay) throw capstanError('ERR_NOT_FOUND', `relay ${relay} runs no bootstrap task ${jobId}/${nodeId}`);
    if (task.state !== 'in_progress') return { in_progress: false };
    const log = this.o.log.child({ job: jobId, nodeId, relay });
    if ('step' in event) {
      return { in_progress: await store.jobs.setTaskStep(jobId, nodeId, event.step, event.message, this.at()) };
    }
    if ('host_key' in event) {
      const { algorithm, fingerprint } = event.host_key;
      const pin = await store.bootstrap.pinHostKey({ node_id: nodeId, algorithm, fingerprint, pinned_at: this.at(), job_id: jobId });
      return { in_progress: true, accepted: pin.fingerprint === fingerprint && pin.algorithm === algorithm };
    }
    if ('failed' in event) {
      await this.fail(jobId, nodeId, Object.assign(new Error(event.failed.message), { code: event.failed.code }), log);
      return { in_progress: false };
    }
    // Installed: the enrol step is the server's, in this process (a restart leaves it to the deadline).
    log.info({ arch: event.installed.arch }, 'agent installed by the relay, waiting for its inventory');
    const p = this.enrol(jobId, nodeId, `relay ${relay}`, event.installed.arch, this.stepper(jobId, nodeId), log)
      .catch(async (err: unknown) => {
        if (err instanceof Stopped || this.stopped) return;
        await this.fail(jobId, nodeId, err, log);
      })
      .catch((err: unknown) => log.error({ err }, 'bootstrap enrol wait failed unexpectedly'));
    this.slots.track(p);
    return { in_progress: true };
  }

  /** The agent package for an architecture, as relays download it (null: none for it). */
  packageFor(arch: string): Promise<AgentPackage | null> {
    return this.o.packages.packageFor(arch);
  }
}
