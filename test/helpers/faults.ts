/**
 * What the fault tests share: a fleet of nodes with signed run logs, uploads that record what was
 * acknowledged, the server's stored runs read back through the API, a loopback TCP proxy that can
 * black-hole traffic, and programs started inside a private mount namespace (a small file system
 * of their own mounted there, gone with them).
 */
import { spawnSync } from 'node:child_process';
import { copyFile } from 'node:fs/promises';
import { connect, createServer, type Server, type Socket } from 'node:net';
import {
  compressSync, createNodeIdentity, formatReport, runLogFileName, signSmime, type NodeIdentity,
} from '@capstan/shared';
import { adminClient, startProgram, type Running } from './programs.js';

export interface RunFile { node: string; name: string; body: Buffer }
export interface Fleet { ids: string[]; identities: NodeIdentity[]; files: RunFile[] }

/** `nodes` nodes with `runs` signed run logs each, dated one minute apart in the last day. */
export function makeFleet(tag: string, nodes: number, runs: number): Fleet {
  const ids = Array.from({ length: nodes }, (_, i) => `fa017${tag.padStart(3, '0').slice(0, 3)}-0000-4000-8000-${String(i).padStart(12, '0')}`);
  const identities = ids.map((id) => createNodeIdentity(id, { bits: 1024 }));
  const base = Math.floor(Date.now() / 60_000) * 60_000 - 20 * 3600_000;
  const files = ids.flatMap((id, n) => Array.from({ length: runs }, (_, r) => {
    const at = new Date(base + r * 60_000);
    const stamp = `${at.toISOString().slice(0, 19)}+00:00`;
    const line = (type: string, component: string, key = 'k') => formatReport({
      policy: 'p', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: key, msg: 'm',
      node_id: id, start_datetime: stamp, execution_datetime: stamp,
    });
    const text = [line('control', 'start', 'cfg'), line('result_success', 'File'), line('result_repaired', 'Service'), line('control', 'end', 'cfg')].join('\n') + '\n';
    return { node: id, name: runLogFileName(id, at, 'zstd'), body: compressSync(signSmime(Buffer.from(text), identities[n]!), 'zstd') };
  }));
  return { ids, identities, files };
}

type Api = ReturnType<typeof adminClient>;

export async function registerFleet(api: Api, fleet: Fleet): Promise<void> {
  for (const [i, id] of fleet.ids.entries()) {
    const r = await api('POST', '/api/1/nodes', { id, hostname: `n${i}.faults.test`, certificate: fleet.identities[i]!.certPem });
    if (r.status !== 201) throw new Error(`registering ${id}: ${r.status} ${JSON.stringify(r.json)}`);
  }
}

/** Every run the server holds for the fleet: file name → how many rows carry it. */
export async function storedRuns(api: Api, fleet: Fleet): Promise<Map<string, number>> {
  const counts = new Map<string, number>();
  for (const id of fleet.ids) {
    for (let page = 1; ; page++) {
      const r = await api('GET', `/api/1/nodes/${id}/runs?per_page=1000&page=${page}`);
      if (r.status !== 200) throw new Error(`runs of ${id}: ${r.status} ${JSON.stringify(r.json)}`);
      const rows = r.json.data as Array<{ file_name: string }>;
      for (const row of rows) counts.set(row.file_name, (counts.get(row.file_name) ?? 0) + 1);
      if (rows.length < 1000) break;
    }
  }
  return counts;
}

/** How many runs the server holds for the fleet, from the lists' totals (cheap enough to poll). */
export async function storedTotal(api: Api, fleet: Fleet): Promise<number> {
  let sum = 0;
  for (const id of fleet.ids) sum += (await api('GET', `/api/1/nodes/${id}/runs?per_page=1`)).json?.total ?? 0;
  return sum;
}

/** What `stored` lacks or holds twice of `acked`, and what it holds that was never sent. */
export function compareStored(stored: Map<string, number>, acked: Iterable<string>, sent: Fleet): { missing: string[]; twice: string[]; unknown: string[] } {
  const names = new Set(sent.files.map((f) => f.name));
  const missing = [...acked].filter((n) => !stored.has(n));
  const twice = [...stored].filter(([, c]) => c > 1).map(([n]) => n);
  const unknown = [...stored.keys()].filter((n) => !names.has(n));
  return { missing, twice, unknown };
}

export interface Sent { acked: string[]; refused: Array<{ name: string; status: number; code?: string }>; errors: number }

/** PUT each file to `url`, `inFlight` at a time; what was acknowledged (2xx) and what was refused, with its code. */
export async function putAll(url: string, files: RunFile[], inFlight = 8): Promise<Sent> {
  const out: Sent = { acked: [], refused: [], errors: 0 };
  let next = 0;
  await Promise.all(Array.from({ length: inFlight }, async () => {
    while (next < files.length) {
      const f = files[next++]!;
      try {
        const res = await fetch(`${url}/reports/${encodeURIComponent(f.name)}`, { method: 'PUT', body: f.body });
        const text = await res.text();
        if (res.status >= 200 && res.status < 300) out.acked.push(f.name);
        else out.refused.push({ name: f.name, status: res.status, code: (JSON.parse(text || '{}') as any).error?.code });
      } catch {
        out.errors++;
      }
    }
  }));
  return out;
}

/** The relay's system/status data. */
export async function relayStatus(url: string): Promise<any> {
  return ((await (await fetch(`${url}/rudder/relay-api/1/system/status`)).json()) as any).data;
}

/** The relay holds nothing waiting to go up (incoming/ and pending/ empty). */
export async function relayDrained(url: string): Promise<true | undefined> {
  const s = await relayStatus(url);
  return s.spool.incoming.reports === 0 && s.spool.pending.reports === 0 ? true : undefined;
}

/**
 * A loopback TCP proxy to `target`. `partition()` plays a network that drops packets: connections
 * are still accepted (a SYN that got through), but nothing is passed on in either direction, and
 * closes are not passed on either. `heal()` delivers what was held, in order, as TCP retransmission
 * would, passes on the closes that happened meanwhile, and forwards again.
 */
export class BlackHoleProxy {
  private server: Server | null = null;
  private held = false;
  private refusing = false;
  private readonly queued: Array<() => void> = [];
  private readonly sockets = new Set<Socket>();
  port = 0;
  /** Bytes held back during partitions, each way. */
  heldUp = 0;
  heldDown = 0;
  connections = 0;

  constructor(private readonly targetPort: number) {}

  async start(): Promise<number> {
    this.server = createServer((client) => this.pair(client));
    await new Promise<void>((res) => this.server!.listen(0, '127.0.0.1', res));
    this.port = (this.server.address() as { port: number }).port;
    return this.port;
  }

  private pair(client: Socket): void {
    if (this.refusing) {
      client.destroy();
      return;
    }
    this.connections++;
    const up = connect(this.targetPort, '127.0.0.1');
    for (const s of [client, up]) {
      this.sockets.add(s);
      s.on('error', () => s.destroy());
      s.on('close', () => this.sockets.delete(s));
    }
    const pass = (from: Socket, to: Socket, count: (n: number) => void) => {
      from.on('data', (d: Buffer) => {
        if (this.held) {
          count(d.length);
          this.queued.push(() => to.destroyed || to.write(d));
        } else to.write(d);
      });
      from.on('close', () => {
        if (this.held) this.queued.push(() => to.end());
        else to.end();
      });
    };
    pass(client, up, (n) => (this.heldUp += n));
    pass(up, client, (n) => (this.heldDown += n));
  }

  /** Close every connection, and each new one at once (a server that is down); `heal()` ends it. */
  refuse(): void {
    this.refusing = true;
    for (const s of this.sockets) s.destroy();
  }

  partition(): void {
    this.held = true;
  }

  heal(): void {
    this.refusing = false;
    this.held = false;
    for (const f of this.queued.splice(0)) f();
  }

  async stop(): Promise<void> {
    for (const s of this.sockets) s.destroy();
    await new Promise<void>((res) => (this.server ? this.server.close(() => res()) : res()));
  }
}

/**
 * A daemon started as `startProgram` does, but inside a private mount namespace where `mountCmd`
 * (a shell command) runs first: `unshare -m` with private propagation, so the mount is seen by
 * the program alone and is gone when it exits. `sh` and `env` exec, so the pid is the program's.
 * Its files are reachable from outside through /proc/<pid>/root.
 */
export function startInMountNs(mountCmd: string, bin: string, args: string[], timeoutMs = 20_000): Promise<Running> {
  return startProgram(bin, args, timeoutMs, undefined, (cmd, argv) => ['unshare', ['-m', '--propagation', 'private', 'sh', '-c', `${mountCmd} && exec "$@"`, 'sh', cmd, ...argv]]);
}

/** A path inside a running program's mount namespace, as seen from outside it. */
export function inNs(p: Running, path: string): string {
  return `/proc/${p.proc.pid}/root${path}`;
}

/** waitFor with a slower pace, for probes that cost the server work (several API calls each). */
export async function poll<T>(fn: () => Promise<T | undefined>, what: string, timeoutMs: number, everyMs = 250): Promise<T> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const v = await fn().catch(() => undefined);
    if (v !== undefined) return v;
    if (Date.now() > until) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, everyMs));
  }
}

/** Why this machine cannot mount a test file system (not root, no unshare, no mkfs.ext4), or false. */
export function cannotMount(): false | string {
  if (process.getuid?.() !== 0) return 'mounting a test file system needs root';
  const probe = spawnSync('unshare', ['-m', '--propagation', 'private', 'sh', '-c', 'd=$(mktemp -d) && mount -t tmpfs -o size=1m tmpfs "$d" && umount "$d" && rmdir "$d"'], { encoding: 'utf8' });
  if (probe.status !== 0) return `unshare -m and a tmpfs mount fail here: ${(probe.stderr || probe.error?.message || '').trim()}`;
  if (spawnSync('mkfs.ext4', ['-V']).status !== 0) return 'mkfs.ext4 is not installed';
  return false;
}

/** A shell word. */
export const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Power loss: freeze the program (SIGSTOP, no more writes from it), copy the loop device's backing
 * image (what reached the device; dirty pages in the mounted file system's cache are not in it),
 * then SIGKILL. The copy is the disk as the power came back.
 */
export async function powerLoss(p: Running, image: string, copy: string): Promise<void> {
  p.proc.kill('SIGSTOP');
  await copyFile(image, copy);
  await p.signal('SIGKILL');
}
