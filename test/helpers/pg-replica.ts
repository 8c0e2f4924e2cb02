/**
 * A PostgreSQL primary and streaming replica of the test's own, in a temporary directory on the
 * machine's file system (pg-cluster.ts puts one on a file system of its own instead): made with initdb, run as the `postgres` OS user (PostgreSQL refuses root) on a free loopback
 * port, its socket in the same directory; and a streaming replica of it made with pg_basebackup.
 * Nothing of the machine's own clusters or of /etc/postgresql is touched; teardown stops the
 * servers (immediate shutdown) and removes the directory.
 */
import { execFile, spawn, type ChildProcess } from 'node:child_process';
import { chown, mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { promisify } from 'node:util';
import pg from 'pg';
import { pgBin } from './pg-cluster.js';
import { freePort } from './ports.js';

const run = promisify(execFile);

export interface PgCluster {
  dir: string;
  port: number;
  url: string;
  proc: ChildProcess;
  /** Runs SQL on the cluster (its own connection). */
  sql: <R extends pg.QueryResultRow = pg.QueryResultRow>(text: string, values?: unknown[]) => Promise<R[]>;
  stop(): Promise<void>;
}

interface PgUser {
  uid: number;
  gid: number;
  bin: string;
}

/** Why private clusters cannot be made here, or null: root, a `postgres` user and the server binaries. */
export async function pgClusterUnavailable(): Promise<string | null> {
  if (process.getuid?.() !== 0) return 'not root: a private PostgreSQL cluster runs as the postgres user';
  if (!pgBin()) return 'no PostgreSQL server binaries under /usr/lib/postgresql';
  try {
    await run('id', ['-u', 'postgres']);
  } catch {
    return 'no postgres user';
  }
  return null;
}

async function pgUser(): Promise<PgUser> {
  const uid = Number((await run('id', ['-u', 'postgres'])).stdout.trim());
  const gid = Number((await run('id', ['-g', 'postgres'])).stdout.trim());
  return { uid, gid, bin: pgBin()! };
}

/** A directory the postgres user owns, removed at teardown. */
export async function pgTempDir(t: { teardown: (fn: () => unknown) => void }): Promise<string> {
  const u = await pgUser();
  const dir = await mkdtemp(join(tmpdir(), 'capstan-pg-'));
  await chown(dir, u.uid, u.gid);
  t.teardown(() => rm(dir, { recursive: true, force: true }));
  return dir;
}

async function asPostgres(cmd: string, args: string[]): Promise<void> {
  const u = await pgUser();
  await run(join(u.bin, cmd), args, { uid: u.uid, gid: u.gid, cwd: '/', env: { PATH: process.env.PATH ?? '/usr/bin:/bin', LANG: 'C.UTF-8' } });
}

async function startPostgres(t: { teardown: (fn: () => unknown) => void }, dir: string, socketDir: string, settings: string[]): Promise<PgCluster> {
  const u = await pgUser();
  const port = await freePort();
  const args = ['-D', dir, '-p', String(port), '-k', socketDir, '-c', 'listen_addresses=127.0.0.1', ...settings.flatMap((s) => ['-c', s])];
  const proc = spawn(join(u.bin, 'postgres'), args, { uid: u.uid, gid: u.gid, cwd: '/', stdio: ['ignore', 'ignore', 'pipe'], env: { LANG: 'C.UTF-8' } });
  const log: string[] = [];
  proc.stderr!.on('data', (d: Buffer) => log.push(d.toString()));
  const exited = new Promise<void>((res) => proc.once('exit', () => res()));
  let stopped = false;
  const stop = async () => {
    if (stopped) return;
    stopped = true;
    // Immediate shutdown (SIGQUIT): nothing to flush in a test's cluster.
    if (proc.exitCode === null && proc.signalCode === null) proc.kill('SIGQUIT');
    await exited;
  };
  t.teardown(stop);
  const url = `postgres://postgres@127.0.0.1:${port}/postgres`;
  const sql = async <R extends pg.QueryResultRow>(text: string, values?: unknown[]): Promise<R[]> => {
    const c = new pg.Client({ connectionString: url });
    await c.connect();
    try {
      return (await c.query<R>(text, values)).rows;
    } finally {
      await c.end();
    }
  };
  // Ready when it takes a query (a standby answers once it reached a consistent state).
  const until = Date.now() + 30_000;
  for (;;) {
    try {
      await sql('SELECT 1');
      break;
    } catch (err) {
      if (proc.exitCode !== null || Date.now() > until) throw new Error(`postgres did not start: ${(err as Error).message}\n${log.join('')}`);
      await new Promise((r) => setTimeout(r, 100));
    }
  }
  return { dir, port, url, proc, sql, stop };
}

/** A new primary: initdb (trust on loopback, replication allowed), WAL for replicas, no fsync. */
export async function startPrimary(t: { teardown: (fn: () => unknown) => void }, base: string): Promise<PgCluster> {
  const dir = join(base, 'primary');
  await asPostgres('initdb', ['-D', dir, '-A', 'trust', '-U', 'postgres', '-E', 'UTF8', '--no-sync']);
  return startPostgres(t, dir, base, ['wal_level=replica', 'max_wal_senders=4', 'fsync=off', 'synchronous_commit=off']);
}

/** A hot standby streaming from `primary`, made with pg_basebackup -R. */
export async function startReplica(t: { teardown: (fn: () => unknown) => void }, base: string, primary: PgCluster, name = 'replica'): Promise<PgCluster> {
  const dir = join(base, name);
  await asPostgres('pg_basebackup', ['-h', '127.0.0.1', '-p', String(primary.port), '-U', 'postgres', '-D', dir, '-R', '-X', 'stream', '--no-sync', '-c', 'fast']);
  return startPostgres(t, dir, base, ['hot_standby=on', 'fsync=off']);
}
