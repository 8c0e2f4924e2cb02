/**
 * Start the real programs (built under <pkg>/dist) as child processes on port 0 and talk to them
 * over HTTP, as a user would. Each waits for the program's `{"ready":true,"url":…}` line.
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import type { Test } from 'tap';

export const ROOT = resolve(import.meta.dirname, '../..');
export const BIN = {
  agent: resolve(ROOT, 'agent/dist/cli.js'),
  relayd: resolve(ROOT, 'relayd/dist/cli.js'),
  server: resolve(ROOT, 'server/dist/cli.js'),
};
/** Where RUDDER's fixtures live when the shared folder is present (absent on a fresh clone elsewhere). */
export const CONFORMANCE = resolve(ROOT, '../shared/conformance/rudder');

/**
 * Why a contract fixture cannot be read (false when `path` exists), for a test to skip with.
 * In CI (`CI=true`) its absence is never a skip: it throws, failing the test file with a message
 * naming what is missing, so a run without the fixtures cannot pass for one that checked them.
 */
export function fixturesAbsent(path: string = CONFORMANCE): false | string {
  if (existsSync(path)) return false;
  return requiredInCi(`RUDDER conformance fixtures not found at ${path}`, 'check out the shared folder beside this repository');
}

/** A reason to skip (false: none), unless in CI, where it throws: what a contract test needs is installed there. */
export function requiredInCi(why: false | string, fix = '.ci/run installs it'): false | string {
  if (why && process.env.CI === 'true') throw new Error(`${why}: CI (CI=true) needs it; ${fix}`);
  return why;
}

/**
 * The command that starts a program as an admin's shell would: `node <bin> <args>` without tap's
 * NODE_OPTIONS. tap puts its process tracker (an ES module loader hook) into the NODE_OPTIONS of
 * every child, and puts it back on each spawn whatever env is passed: under it every program
 * started ~0.2 s later and loaded each of its modules through the hook's thread. `env -u` takes
 * it out just before node starts (env execs node: the pid is the program's, for signals). A test
 * that needs a node option (a module that shifts the clock) passes it in `nodeArgs`.
 */
export function programCommand(bin: string, args: string[], nodeArgs: string[] = []): [string, string[]] {
  return ['/usr/bin/env', ['-u', 'NODE_OPTIONS', ...programNode(), ...nodeArgs, bin, ...args]];
}

/**
 * The Node.js that runs the programs: this one, or another release named by CAPSTAN_TEST_NODE
 * (test/e2e/node-lts.test.ts runs the whole chain on the newest LTS that way). The native SQLite
 * addon is built for one Node.js ABI only, so with CAPSTAN_TEST_ADDONS (a folder holding a
 * node_modules/better-sqlite3 built for that release) a resolve hook makes the programs load it.
 */
export function programNode(): string[] {
  const node = process.env.CAPSTAN_TEST_NODE;
  if (node === undefined || node === '') return [process.execPath];
  const addons = process.env.CAPSTAN_TEST_ADDONS;
  return addons === undefined || addons === '' ? [node] : [node, '--import', resolve(ROOT, 'test/helpers/addon-redirect.mjs')];
}

export interface Running {
  url: string;
  proc: ChildProcess;
  output: string[];
  /** What the program wrote to stderr so far, in chunks. */
  stderr: string[];
  /** Its exit code (null when a signal ended it). */
  exited: Promise<number | null>;
  /** SIGTERM, and its exit code. */
  stop(): Promise<number | null>;
  /** Send a signal (SIGKILL for a crash, SIGHUP for a reload) and wait for the exit code. */
  signal(sig: NodeJS.Signals): Promise<number | null>;
}

/**
 * `t.testdir()` that outlives the test's teardowns. tap removes a test directory before running
 * the teardowns registered after it, so the programs a test started (stopped by those teardowns)
 * would still be writing into a directory being removed: on a busy machine, ENOTEMPTY, and a
 * program whose files vanish under it. A teardown registered first makes tap run them all
 * before the removal.
 */
export function programDir(
  t: { testdir(content?: Parameters<Test['testdir']>[0]): string; teardown(fn: () => unknown): void },
  content?: Parameters<Test['testdir']>[0],
): string {
  t.teardown(() => undefined);
  return t.testdir(content);
}

/**
 * A daemon started and ready (its `{"ready":true,"url":…}` line); `env` replaces the environment.
 * `wrap` runs the program under another command that execs it (a mount namespace, faults.ts).
 */
export async function startProgram(
  bin: string, args: string[], timeoutMs = 20_000, env?: NodeJS.ProcessEnv,
  wrap: (cmd: string, argv: string[]) => [string, string[]] = (cmd, argv) => [cmd, argv],
): Promise<Running> {
  const proc = spawn(...wrap(...programCommand(bin, args)), { stdio: ['ignore', 'pipe', 'pipe'], ...(env && { env }) });
  const output: string[] = [];
  const stderr: string[] = [];
  proc.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
  const url = await new Promise<string>((res, rej) => {
    const timer = setTimeout(() => {
      // Not left running (and writing into a directory the test is about to remove).
      proc.kill('SIGKILL');
      rej(new Error(`${bin} not ready in ${timeoutMs} ms: ${stderr.join('')}`));
    }, timeoutMs);
    void exited.then((code) => {
      clearTimeout(timer);
      rej(new Error(`${bin} exited with ${code}: ${stderr.join('')}`));
    });
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      output.push(line);
      if (line.startsWith('{"ready":true')) {
        clearTimeout(timer);
        res((JSON.parse(line) as { url: string }).url);
      }
    });
  });
  const signal = (sig: NodeJS.Signals) => {
    if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
    return exited;
  };
  return { url, proc, output, stderr, exited, stop: () => signal('SIGTERM'), signal };
}

export interface Ran {
  code: number | null;
  stdout: string;
  stderr: string;
}

/** Run a one-shot command (the agent, admin verbs) to completion; `env` replaces the environment. */
export function runProgram(bin: string, args: string[], timeoutMs = 60_000, env?: NodeJS.ProcessEnv): Promise<Ran> {
  return runUntil('exit', bin, args, timeoutMs, env);
}

/**
 * runProgram, answering once the output is read to its last byte: a long text (--help) may still
 * be in the pipe when the exit is seen on a busy machine. Only for a program that leaves no child
 * behind holding its output open (one would hold this answer until it ends).
 */
export function runProgramToEnd(bin: string, args: string[], timeoutMs = 60_000, env?: NodeJS.ProcessEnv): Promise<Ran> {
  return runUntil('close', bin, args, timeoutMs, env);
}

function runUntil(event: 'exit' | 'close', bin: string, args: string[], timeoutMs: number, env?: NodeJS.ProcessEnv): Promise<Ran> {
  return new Promise((res, rej) => {
    const proc = spawn(...programCommand(bin, args), { stdio: ['ignore', 'pipe', 'pipe'], ...(env && { env }) });
    let stdout = '';
    let stderr = '';
    proc.stdout.on('data', (d: Buffer) => (stdout += d.toString()));
    proc.stderr.on('data', (d: Buffer) => (stderr += d.toString()));
    const timer = setTimeout(() => {
      proc.kill('SIGKILL');
      rej(new Error(`${bin} ${args.join(' ')} timed out: ${stderr}`));
    }, timeoutMs);
    proc.once(event, (code: number | null) => {
      clearTimeout(timer);
      res({ code, stdout, stderr });
    });
  });
}

/** Poll until `fn` returns a value other than undefined, or fail after `timeoutMs`. */
export async function waitFor<T>(fn: () => Promise<T | undefined>, what: string, timeoutMs = 20_000): Promise<T> {
  const until = Date.now() + timeoutMs;
  let last: unknown;
  while (Date.now() < until) {
    try {
      const v = await fn();
      if (v !== undefined) return v;
    } catch (err) {
      last = err;
    }
    await new Promise((r) => setTimeout(r, 50));
  }
  throw new Error(`timed out waiting for ${what}${last ? `: ${String(last)}` : ''}`);
}

/** A tiny JSON client with the admin token. */
export function adminClient(base: string, token: string) {
  return async (method: string, path: string, body?: unknown): Promise<{ status: number; json: any }> => {
    const res = await fetch(`${base}${path}`, {
      method,
      headers: { authorization: `Bearer ${token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
      body: body === undefined ? undefined : JSON.stringify(body),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  };
}

/**
 * Register a relay at the server as an admin does before its first start: `capstan-relayd
 * --identity` (with the relay's own arguments: spool directory, node id, config) makes its key and
 * prints its node id and certificate; `POST /api/1/nodes {…, relay: true}` pins it. The relay then
 * gets its relay token by signed request, for its remote-run link and the providers endpoints.
 */
export async function registerRelay(api: ReturnType<typeof adminClient>, relaydArgs: string[], extra: Record<string, unknown> = {}): Promise<{ node_id: string; certificate: string }> {
  const ran = await runProgram(BIN.relayd, ['--identity', ...relaydArgs]);
  if (ran.code !== 0) throw new Error(`capstan-relayd --identity exited with ${ran.code}: ${ran.stderr}`);
  const id = JSON.parse(ran.stdout) as { node_id: string; certificate: string };
  const res = await api('POST', '/api/1/nodes', { id: id.node_id, hostname: `${id.node_id}.relay.test`, certificate: id.certificate, relay: true, ...extra });
  if (res.status !== 201) throw new Error(`registering relay ${id.node_id}: ${res.status} ${JSON.stringify(res.json)}`);
  return id;
}

interface Teardown { teardown(fn: () => unknown): void }

/**
 * `capstan-server serve` on loopback with `dataDir` (its `--config`, `--log-level`, default
 * warn, and any further arguments), stopped at the end of the test; the admin token and a client with it.
 */
export async function startServer(t: Teardown, dataDir: string, opts: { config?: string; logLevel?: string; args?: string[]; timeoutMs?: number } = {}) {
  const server = await startProgram(BIN.server, ['serve', ...(opts.config ? ['--config', opts.config] : []), '--listen', '127.0.0.1:0', '--data-dir', dataDir, '--log-level', opts.logLevel ?? 'warn', ...(opts.args ?? [])], opts.timeoutMs);
  t.teardown(() => server.stop());
  const token = (await readFile(join(dataDir, 'admin.token'), 'utf8')).trim();
  return { server, token, api: adminClient(server.url, token) };
}

/**
 * A server and one relay in front of it, on loopback in `dir` (server/ and relay/), stopped at
 * the end of the test; the admin token and a client with it.
 */
export async function serverAndRelay(t: Teardown, dir: string, opts: { config?: string; logLevel?: string; serverArgs?: string[]; relayArgs?: string[] } = {}) {
  const logLevel = opts.logLevel ?? 'warn';
  const { server, token, api } = await startServer(t, join(dir, 'server'), { config: opts.config, logLevel, args: opts.serverArgs });
  const relay = await startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', logLevel, ...(opts.relayArgs ?? [])]);
  t.teardown(() => relay.stop());
  return { server, relay, token, api };
}
