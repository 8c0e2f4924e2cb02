/**
 * A PostgreSQL cluster of the test's own, for faults the shared server cannot take (power loss):
 * initdb'd into a directory on a file system mounted in a private mount namespace (`unshare -m`),
 * `postgres` run there as the postgres OS user (it refuses root) on a loopback port, no Unix
 * socket. The postmaster leads a process group of its own, so the whole cluster (its backends,
 * WAL writer, checkpointer) is frozen or killed at once. Other programs join its namespace
 * (`nsenter -m`) to see the same mount.
 */
import { spawn, spawnSync, type ChildProcess } from 'node:child_process';
import { existsSync, readdirSync } from 'node:fs';
import { join } from 'node:path';
import pg from 'pg';
import { q } from './faults.js';

/** The newest installed server's binaries (Debian's layout), or CAPSTAN_TEST_PG_BIN. */
export function pgBin(): string | null {
  if (process.env.CAPSTAN_TEST_PG_BIN) return process.env.CAPSTAN_TEST_PG_BIN;
  const root = '/usr/lib/postgresql';
  if (!existsSync(root)) return null;
  const versions = readdirSync(root).filter((v) => existsSync(join(root, v, 'bin', 'postgres'))).sort((a, b) => Number(b) - Number(a));
  return versions.length ? join(root, versions[0]!, 'bin') : null;
}

/** Why a private cluster cannot be run here, or false. */
export function cannotRunCluster(): false | string {
  const bin = pgBin();
  if (!bin) return 'no PostgreSQL server binaries (/usr/lib/postgresql/<version>/bin, or CAPSTAN_TEST_PG_BIN)';
  if (spawnSync('id', ['-u', 'postgres']).status !== 0) return 'no postgres OS user to run the cluster as';
  for (const tool of ['setpriv', 'nsenter']) if (spawnSync(tool, ['--version']).status !== 0) return `${tool} is not installed`;
  return false;
}

export interface Cluster {
  /** The postmaster's pid: its process group's id, and the mount namespace's holder. */
  pid: number;
  port: number;
  url: string;
  proc: ChildProcess;
  stderr: string[];
  exited: Promise<number | null>;
  /** SIGSTOP (or any signal) to every process of the cluster. */
  signalAll(sig: NodeJS.Signals): void;
  /** A fast shutdown (SIGINT): its exit code. */
  stop(): Promise<number | null>;
  /** A command that runs inside the cluster's mount namespace. */
  wrap(cmd: string, argv: string[]): [string, string[]];
}

/**
 * In a new mount namespace: `mountCmd`, then (with `init`) initdb into `dataDir`, then postgres
 * on `port` with `settings`; resolves once it answers. fsync is left to the configuration files
 * (on by default) so that `ALTER SYSTEM` and a reload can turn it off.
 */
export async function startCluster(mountCmd: string, dataDir: string, port: number, opts: { init: boolean; settings?: Record<string, string>; timeoutMs?: number }): Promise<Cluster> {
  const bin = pgBin()!;
  const asPostgres = 'setpriv --reuid=postgres --regid=postgres --init-groups';
  const settings = {
    listen_addresses: '127.0.0.1', port: String(port), unix_socket_directories: '', synchronous_commit: 'on', full_page_writes: 'on',
    shared_buffers: '16MB', max_connections: '40', max_wal_size: '64MB', min_wal_size: '32MB', ...opts.settings,
  };
  const init = opts.init
    ? `mkdir -p ${q(dataDir)} && chown postgres:postgres ${q(dataDir)} && chmod 700 ${q(dataDir)} && `
      + `${asPostgres} ${q(join(bin, 'initdb'))} -D ${q(dataDir)} -U postgres --auth=trust --locale=C -E UTF8 --wal-segsize=4 >/dev/null && `
    : '';
  const run = `exec ${asPostgres} ${q(join(bin, 'postgres'))} -D ${q(dataDir)} ${Object.entries(settings).map(([k, v]) => `-c ${q(`${k}=${v}`)}`).join(' ')}`;
  const proc = spawn('unshare', ['-m', '--propagation', 'private', 'sh', '-c', `${mountCmd} && ${init}${run}`], { stdio: ['ignore', 'ignore', 'pipe'], detached: true });
  const stderr: string[] = [];
  proc.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
  const pid = proc.pid!;
  const signalAll = (sig: NodeJS.Signals) => {
    try {
      process.kill(-pid, sig);
    } catch {
      // already gone
    }
  };
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const until = Date.now() + (opts.timeoutMs ?? 60_000);
  let done = false;
  void exited.then(() => (done = true));
  for (;;) {
    if (done) throw new Error(`postgres exited before answering: ${stderr.join('')}`);
    const c = new pg.Client({ connectionString: url, connectionTimeoutMillis: 1000 });
    const ok = await c.connect().then(() => c.query('SELECT 1')).then(() => true, () => false);
    await c.end().catch(() => undefined);
    if (ok) break;
    if (Date.now() > until) {
      signalAll('SIGKILL');
      throw new Error(`postgres not answering on port ${port}: ${stderr.join('')}`);
    }
    await new Promise((r) => setTimeout(r, 200));
  }
  return {
    pid, port, url, proc, stderr, exited, signalAll,
    stop: () => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGINT');
      return exited;
    },
    wrap: (cmd, argv) => ['nsenter', ['-t', String(pid), '-m', '--', cmd, ...argv]],
  };
}
