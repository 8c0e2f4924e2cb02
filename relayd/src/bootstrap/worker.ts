/**
 * Bootstrap from the relay (docs/bootstrap.md, "From a relay"): the nodes whose manager this
 * relay hosts get their agent over SSH from here, inside their segment. Every `poll_interval` (and
 * at once when a task ends) the relay claims up to its free slots from the upstream
 * (shared/bootstrap/relay.ts), opens each task's sealed secrets with its own key — in memory, for
 * that task only — and runs the same SSH steps as the server (shared/bootstrap/ssh.ts), reporting
 * each step, a first-use host key, the install and any coded failure back. The enrol step is the
 * server's: it sees the agent's first inventory.
 *
 * Only outbound calls, with the relay's token, through the upstream client (TLS pinning, CA).
 * A task the server says is no longer in progress (cancelled, timed out) stops at its next step.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { readFile, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { bootstrapOverSsh, type AgentPackage, type BootstrapStep } from '@capstan/toolkit/bootstrap/ssh';
import { AgentPackages } from '@capstan/toolkit/bootstrap/packages';
import { Slots } from '@capstan/toolkit/slots';
import { openWithKey, sealedTaskAad } from '@capstan/toolkit/bootstrap/seal';
import {
  RELAY_BOOTSTRAP_PATH, type RelayBootstrapAnswer, type RelayBootstrapEvent, type RelayBootstrapTask, type SealedTaskSecrets,
} from '@capstan/toolkit/bootstrap/relay';
import { makeDir } from '@capstan/shared/dir';
import { capstanError, ERROR_CODES } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import type { Upstream } from '../forward/upstream.js';

export interface RelayBootstrapOptions {
  upstream: Upstream;
  relayId: string;
  /** This relay's private key (PEM): what the tasks are sealed to. */
  keyPem: () => Promise<string>;
  pollMs: number;
  concurrency: number;
  /** What the bootstrapped agents are told to talk to; null: the job's relay_url. */
  agentUrl: () => string | null;
  maxPackageBytes: number;
  /** Where downloaded packages are kept, by sha256 (not secret). */
  cacheDir: string;
  timeoutMs: number;
  log: Logger;
  auth?: () => Promise<Record<string, string>>;
  refused?: () => void;
}

/** The task was cancelled or timed out at the server: stop without reporting. */
class Stopped extends Error {}

const DEB_NAME = /^capstan-agent_[^_/]+_([a-z0-9-]+)\.deb$/;

export class RelayBootstrapper {
  /** Claims never overlap; a kick during one waits for the next poll (each claim is a call upstream). */
  private readonly slots: Slots;
  /** Downloads by URL (bootstrap.package_url at the server), each checked against its sha256 once. */
  private readonly byUrl = new Map<string, AgentPackages>();
  private readonly base: string;

  constructor(private readonly o: RelayBootstrapOptions) {
    this.base = `${RELAY_BOOTSTRAP_PATH}/${encodeURIComponent(o.relayId)}`;
    this.slots = new Slots({
      slots: o.concurrency,
      pass: (free) => this.claim(free),
      passFailed: (err) => this.o.log.warn({ err }, 'bootstrap tasks not fetched (tried again at the next poll)'),
      whileBusy: 'skip',
    });
  }

  start(): void {
    this.slots.start(this.o.pollMs);
  }

  stop(): Promise<void> {
    return this.slots.stop();
  }

  /** Claim tasks for the free slots. */
  kick(): void {
    this.slots.kick();
  }

  /** One call with the relay's token; a 401 renews the token and tries once more. */
  private async call(method: 'GET' | 'POST', path: string, body?: unknown) {
    const send = async (auth: Record<string, string>) => this.o.upstream.request({
      method, path: `${this.base}${path}`, timeoutMs: this.o.timeoutMs,
      headers: { accept: 'application/json', ...(body !== undefined && { 'content-type': 'application/json' }), ...auth },
      ...(body !== undefined && { body: Buffer.from(JSON.stringify(body)) }),
    });
    let res = await send((await this.o.auth?.()) ?? {});
    if (res.statusCode === 401 && this.o.auth && this.o.refused) {
      await res.body.dump();
      this.o.refused();
      res = await send(await this.o.auth());
    }
    return res;
  }

  private async json<T>(method: 'GET' | 'POST', path: string, body?: unknown): Promise<T> {
    const res = await this.call(method, path, body);
    const text = await res.body.text();
    if (res.statusCode !== 200) throw capstanError('ERR_UPSTREAM', `upstream answered ${res.statusCode} to ${method} ${path}: ${text.slice(0, 300)}`);
    const data = (JSON.parse(text) as { data?: T }).data;
    if (data === undefined) throw capstanError('ERR_UPSTREAM', `upstream sent no data to ${method} ${path}`);
    return data;
  }

  private async claim(free: number): Promise<void> {
    if (free <= 0) return;
    const agentUrl = this.o.agentUrl();
    const tasks = await this.json<RelayBootstrapTask[]>('POST', '/claim', { limit: free, ...(agentUrl && { agent_url: agentUrl }) });
    if (!Array.isArray(tasks)) throw capstanError('ERR_UPSTREAM', 'upstream sent no task list');
    for (const task of tasks) {
      this.slots.run(() => this.run(task), (err) => this.o.log.error({ err, job: task.job_id, nodeId: task.node_id }, 'bootstrap task failed unexpectedly'));
    }
  }

  private report(task: RelayBootstrapTask, event: RelayBootstrapEvent): Promise<RelayBootstrapAnswer> {
    return this.json<RelayBootstrapAnswer>('POST', `/tasks/${encodeURIComponent(task.job_id)}/${encodeURIComponent(task.node_id)}`, event);
  }

  private async run(task: RelayBootstrapTask): Promise<void> {
    const log = this.o.log.child({ job: task.job_id, nodeId: task.node_id });
    try {
      // Opened now, held by this function only: nothing of it is written, logged or sent.
      const secrets = JSON.parse(openWithKey(await this.o.keyPem(), sealedTaskAad(this.o.relayId, task.job_id, task.node_id), task.sealed)) as SealedTaskSecrets;
      const outcome = await bootstrapOverSsh({
        host: task.host,
        credential: {
          user: task.user, port: task.port,
          ...(secrets.private_key !== undefined && { privateKey: secrets.private_key }),
          ...(secrets.passphrase !== undefined && { passphrase: secrets.passphrase }),
          ...(secrets.password !== undefined && { password: secrets.password }),
        },
        packageFor: (arch) => this.packageFor(task, arch),
        agentConfig: secrets.agent_config,
        installRoot: task.install_root,
        sudo: task.sudo,
        startCommand: task.start_command,
        remoteTmp: task.remote_tmp,
        connectTimeoutMs: task.connect_timeout_ms,
        commandTimeoutMs: task.command_timeout_ms,
        signal: this.slots.signal,
      }, {
        step: async (step: BootstrapStep, message: string) => {
          if (!(await this.report(task, { step: step as 'connect', message })).in_progress) throw new Stopped();
        },
        hostKey: async (algorithm, fingerprint) => {
          // A pin the server sent is checked here; a first key is the server's to record.
          if (task.host_key) return task.host_key.algorithm === algorithm && task.host_key.fingerprint === fingerprint;
          return (await this.report(task, { host_key: { algorithm, fingerprint } })).accepted === true;
        },
      });
      log.info({ arch: outcome.arch, hostKey: outcome.hostKey.fingerprint }, 'agent installed');
      await this.report(task, { installed: { os: outcome.os, arch: outcome.arch } });
    } catch (err) {
      if (err instanceof Stopped || this.slots.stopped) return;
      const code = (err as { code?: string }).code;
      const known = typeof code === 'string' && Object.hasOwn(ERROR_CODES, code);
      if (!known) log.warn({ err }, 'bootstrap failed');
      else log.info({ code }, 'bootstrap failed');
      await this.report(task, { failed: { code: known ? code : 'ERR_INTERNAL', message: String((err as Error).message ?? err).slice(0, 2000) } })
        .catch((e: unknown) => log.warn({ err: e }, 'bootstrap failure not reported (the job\'s deadline will end the task)'));
    }
  }

  /** The package for the node's architecture: from the server's package_url, or from the upstream. */
  private async packageFor(task: RelayBootstrapTask, arch: string): Promise<AgentPackage | null> {
    if (task.package) {
      const key = `${task.package.url} ${task.package.sha256}`;
      let p = this.byUrl.get(key);
      if (!p) {
        p = new AgentPackages({ dir: '', url: task.package.url, sha256: task.package.sha256, maxBytes: this.o.maxPackageBytes, cacheDir: this.o.cacheDir });
        this.byUrl.set(key, p);
      }
      return p.packageFor(arch);
    }
    return this.fromUpstream(arch);
  }

  private async fromUpstream(arch: string): Promise<AgentPackage | null> {
    let res;
    try {
      res = await this.call('GET', `/package/${encodeURIComponent(arch)}`);
    } catch (err) {
      throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `cannot download the agent package from the upstream: ${(err as Error).message}`);
    }
    if (res.statusCode !== 200) {
      const text = await res.body.text().catch(() => '');
      let code = '';
      try {
        code = (JSON.parse(text) as { error?: { code?: string } }).error?.code ?? '';
      } catch { /* not JSON */ }
      if (code === 'ERR_BOOTSTRAP_UNSUPPORTED_OS') return null;
      throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `the upstream answered ${res.statusCode} for the ${arch} agent package: ${text.slice(0, 300)}`);
    }
    const want = String(res.headers['x-capstan-sha256'] ?? '').toLowerCase();
    const name = String(res.headers['x-capstan-package'] ?? '');
    const m = DEB_NAME.exec(name);
    if (!/^[0-9a-f]{64}$/.test(want) || !m) {
      await res.body.dump();
      throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', 'the upstream sent a package without its sha256 or name');
    }
    const path = join(this.o.cacheDir, `capstan-agent-${want}.deb`);
    const sum = async (p: string) => createHash('sha256').update(await readFile(p)).digest('hex');
    if (await stat(path).then((s) => s.isFile(), () => false)) {
      if ((await sum(path)) === want) {
        await res.body.dump();
        return { path, arch: m[1]! };
      }
      await unlink(path).catch(() => undefined);
    }
    await makeDir(this.o.cacheDir, 0o750);
    const tmp = `${path}.${process.pid}.${Math.random().toString(36).slice(2)}.tmp`;
    const hash = createHash('sha256');
    const out = createWriteStream(tmp, { mode: 0o640 });
    let bytes = 0;
    try {
      for await (const chunk of res.body as AsyncIterable<Buffer>) {
        bytes += chunk.length;
        if (bytes > this.o.maxPackageBytes) throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', 'the agent package is larger than bootstrap.max_package_size');
        hash.update(chunk);
        if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      }
      await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
      const got = hash.digest('hex');
      if (got !== want) throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `the agent package received has sha256 ${got}, not the ${want} the upstream announced`);
      await rename(tmp, path);
      return { path, arch: m[1]! };
    } catch (err) {
      out.destroy();
      await unlink(tmp).catch(() => undefined);
      if ((err as { code?: string }).code === 'ERR_BOOTSTRAP_NO_PACKAGE') throw err;
      throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `cannot download the agent package: ${(err as Error).message}`);
    }
  }
}
