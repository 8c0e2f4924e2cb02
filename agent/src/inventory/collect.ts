/**
 * Inventory collection: facts read from the host itself. Each collector is independent; one that
 * fails records its error under `errors` and the rest of the inventory is still sent.
 */
import { execFile } from 'node:child_process';
import { readFile, statfs } from 'node:fs/promises';
import os from 'node:os';
import { CAPSTAN_VERSION } from '@capstan/shared/protocol';
import { readFacts, type FactsOptions } from './facts.js';

export interface InventoryContext {
  nodeId: string;
  certPem: string;
  policyServer: string;
  /** cloud-init's instance data (default CLOUD_INIT_INSTANCE_DATA); absent on hosts without cloud-init. */
  cloudInstanceData?: string;
  /** The facts directory and its limits ([inventory] facts_*); absent: no custom facts. */
  facts?: FactsOptions;
}

function run(cmd: string, args: string[], timeoutMs = 10_000): Promise<string> {
  return new Promise((resolve, reject) => {
    execFile(cmd, args, { timeout: timeoutMs, maxBuffer: 64 * 1024 * 1024, env: { ...process.env, LC_ALL: 'C' } }, (err, stdout) =>
      err ? reject(err) : resolve(stdout),
    );
  });
}

/** os-release(5): KEY=value lines, values optionally quoted. */
export function parseOsRelease(text: string): Record<string, string> {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    const m = /^([A-Z0-9_]+)=(.*)$/.exec(line.trim());
    if (!m) continue;
    let v = m[2]!;
    if (/^(["']).*\1$/.test(v)) v = v.slice(1, -1).replace(/\\(["\\$`])/g, '$1');
    out[m[1]!] = v;
  }
  return out;
}

async function osInfo() {
  const text = await readFile('/etc/os-release', 'utf8').catch(() => readFile('/usr/lib/os-release', 'utf8'));
  const rel = parseOsRelease(text);
  return {
    name: rel.ID ?? os.type().toLowerCase(),
    version: rel.VERSION_ID ?? '',
    pretty_name: rel.PRETTY_NAME ?? '',
    kernel: os.release(),
    arch: os.machine(),
  };
}

async function fqdn(): Promise<string> {
  const out = (await run('hostname', ['-f'], 3000)).trim();
  return out || os.hostname();
}

async function memory() {
  const info = await readFile('/proc/meminfo', 'utf8');
  const kb = (k: string) => Number(new RegExp(`^${k}:\\s+(\\d+) kB`, 'm').exec(info)?.[1] ?? 0) * 1024;
  return { total: kb('MemTotal'), available: kb('MemAvailable'), swap_total: kb('SwapTotal'), swap_free: kb('SwapFree') };
}

// File systems that hold no data of the host's own: kernel interfaces and memory-backed mounts.
const PSEUDO_FS = new Set(['proc', 'sysfs', 'devpts', 'cgroup', 'cgroup2', 'securityfs', 'debugfs', 'tracefs', 'pstore',
  'bpf', 'mqueue', 'hugetlbfs', 'configfs', 'fusectl', 'autofs', 'binfmt_misc', 'nsfs', 'rpc_pipefs', 'devtmpfs',
  'tmpfs', 'ramfs', 'efivarfs', 'selinuxfs', 'nfsd', 'fuse.gvfsd-fuse', 'fuse.portal', 'squashfs']);

/**
 * The mounts of /proc/mounts that are real file systems: memory-backed and kernel file systems
 * left out, and a mount point listed twice (mounted over, or bind-mounted again) kept once, as
 * its last (visible) mount.
 */
export function realMounts(text: string): Array<{ device: string; mount: string; fstype: string }> {
  const byMount = new Map<string, { device: string; mount: string; fstype: string }>();
  for (const line of text.split('\n')) {
    const [device, mount, fstype] = line.split(' ');
    if (!device || !mount || !fstype) continue;
    const m = mount.replace(/\\040/g, ' ');
    if (PSEUDO_FS.has(fstype)) {
      byMount.delete(m); // mounted over by a pseudo file system: what was there is hidden
      continue;
    }
    byMount.delete(m);
    byMount.set(m, { device, mount: m, fstype });
  }
  return [...byMount.values()];
}

async function disks() {
  const out: Array<{ device: string; mount: string; fstype: string; size: number; free: number }> = [];
  for (const { device, mount, fstype } of realMounts(await readFile('/proc/mounts', 'utf8'))) {
    const s = await statfs(mount).catch(() => null);
    if (!s || s.blocks === 0) continue;
    out.push({ device, mount, fstype, size: s.blocks * s.bsize, free: s.bavail * s.bsize });
  }
  return out;
}

function interfaces() {
  return Object.entries(os.networkInterfaces()).map(([name, addrs]) => ({
    name,
    mac: addrs?.[0]?.mac ?? null,
    addresses: (addrs ?? []).map((a) => ({ family: a.family, address: a.address, cidr: a.cidr })),
  }));
}

/** The default IPv4 route from /proc/net/route (gateway in little-endian hex). */
export function parseDefaultRoute(text: string): { interface: string; gateway: string } | null {
  for (const line of text.split('\n').slice(1)) {
    const f = line.trim().split(/\s+/);
    if (f.length < 3 || f[1] !== '00000000') continue;
    const g = Number.parseInt(f[2]!, 16);
    const gateway = [g & 255, (g >>> 8) & 255, (g >>> 16) & 255, (g >>> 24) & 255].join('.');
    return { interface: f[0]!, gateway };
  }
  return null;
}

export interface InstalledPackage {
  name: string;
  version: string;
  /** The source package (deb: dpkg's source:Package; rpm: the source RPM's name), when not `name`. */
  source?: string;
  /** deb: the source version, when not `version` (binNMUs, binaries with their own epoch or version). */
  source_version?: string;
  /** rpm: the epoch, '0' when the package has none (its `version` is version-release without it). */
  epoch?: string;
}

/**
 * Vulnerability feeds name source packages at source versions (Debian's and Ubuntu's), and RPM
 * feeds compare epoch:version-release: what the inventory needs besides the binary's name and
 * version (docs/vulnerabilities.md, *Package names*). Measured on a Debian 12 host: 637 of 789
 * installed packages are named otherwise than their source (libssl3 from openssl), 66 have
 * another version than it, 9 of them an epoch the source has not (bsdutils 1:2.38.1-5+deb12u3
 * from util-linux 2.38.1-5+deb12u3).
 */
export const DPKG_FORMAT = '${Package}\t${Version}\t${db:Status-Status}\t${source:Package}\t${source:Version}\n';
export const RPM_FORMAT = '%{NAME}\t%{VERSION}-%{RELEASE}\t%|EPOCH?{%{EPOCH}}:{0}|\t%{SOURCERPM}\n';

export function parseDpkgLine(l: string): InstalledPackage | null {
  const [name, version, status, source, sourceVersion] = l.split('\t');
  if (!name || !version || status !== 'installed') return null;
  const p: InstalledPackage = { name, version };
  if (source && source !== name) p.source = source;
  if (sourceVersion && sourceVersion !== version) p.source_version = sourceVersion;
  return p;
}

export function parseRpmLine(l: string): InstalledPackage | null {
  const [name, version, epoch, sourceRpm] = l.split('\t');
  if (!name || !version) return null;
  const p: InstalledPackage = { name, version };
  if (epoch !== undefined && /^\d+$/.test(epoch)) p.epoch = epoch;
  // openssl-3.0.7-27.el9.src.rpm → openssl (gpg-pubkey and the like have none: "(none)").
  const m = /^(.+)-[^-]+-[^-]+\.(?:no)?src\.rpm$/.exec(sourceRpm ?? '');
  if (m && m[1] !== name) p.source = m[1]!;
  return p;
}

export function parseApkLine(l: string): InstalledPackage | null {
  const m = /^(.+)-([^-]+-r\d+)$/.exec(l);
  return m ? { name: m[1]!, version: m[2]! } : null;
}

/** Installed packages from whichever package manager the host has. */
async function packages(): Promise<InstalledPackage[]> {
  const tries: Array<[string, string[], (line: string) => InstalledPackage | null]> = [
    ['dpkg-query', ['-W', '-f', DPKG_FORMAT], parseDpkgLine],
    ['rpm', ['-qa', '--qf', RPM_FORMAT], parseRpmLine],
    ['apk', ['info', '-v'], parseApkLine],
  ];
  let lastErr: unknown = null;
  for (const [cmd, args, parse] of tries) {
    try {
      const out = await run(cmd, args, 30_000);
      return out.split('\n').map(parse).filter((p): p is InstalledPackage => p !== null);
    } catch (err) {
      lastErr = err;
    }
  }
  throw lastErr ?? new Error('no package manager found');
}

/** cloud-init's copy of the instance metadata: a local file, so no metadata-service call per run. */
export const CLOUD_INIT_INSTANCE_DATA = '/run/cloud-init/instance-data.json';

export interface CloudIdentity {
  provider: 'aws' | 'azure' | 'gcp';
  instance_id: string;
  region: string;
  account_id: string;
}

const at = (o: unknown, ...path: string[]): unknown =>
  path.reduce<unknown>((v, k) => (v && typeof v === 'object' ? (v as Record<string, unknown>)[k] : undefined), o);
const nonEmpty = (v: unknown): v is string => typeof v === 'string' && v.length > 0;

/**
 * The instance's cloud identity from cloud-init's instance data, in the terms the providers
 * discover it by (server/src/store/discovery-rules.ts): AWS instance id, region and account;
 * Azure VM id, location and subscription; GCE instance id, zone and project. Null elsewhere.
 */
export function cloudFromInstanceData(doc: unknown): CloudIdentity | null {
  const cloud = at(doc, 'v1', 'cloud_name');
  const id = at(doc, 'v1', 'instance_id');
  let out: CloudIdentity | null = null;
  if (cloud === 'aws') {
    out = { provider: 'aws', instance_id: id as string, region: at(doc, 'v1', 'region') as string, account_id: at(doc, 'ds', 'dynamic', 'instance-identity', 'document', 'accountId') as string };
  } else if (cloud === 'azure') {
    const compute = at(doc, 'ds', 'meta_data', 'imds', 'compute');
    out = { provider: 'azure', instance_id: (at(compute, 'vmId') ?? id) as string, region: (at(compute, 'location') ?? at(doc, 'v1', 'region')) as string, account_id: at(compute, 'subscriptionId') as string };
  } else if (cloud === 'gce') {
    out = { provider: 'gcp', instance_id: String(id ?? ''), region: at(doc, 'v1', 'availability_zone') as string, account_id: at(doc, 'ds', 'meta_data', 'project', 'projectId') as string };
  }
  return out && nonEmpty(out.instance_id) && nonEmpty(out.region) && nonEmpty(out.account_id) ? out : null;
}

async function cloudIdentity(path = CLOUD_INIT_INSTANCE_DATA): Promise<CloudIdentity | null> {
  let text: string;
  try {
    text = await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
  return cloudFromInstanceData(JSON.parse(text));
}

export async function collectInventory(ctx: InventoryContext): Promise<Record<string, unknown>> {
  const errors: Record<string, string> = {};
  const attempt = async <T>(name: string, fn: () => Promise<T>, fallback: T): Promise<T> => {
    try {
      return await fn();
    } catch (err) {
      errors[name] = (err as Error).message.split('\n')[0] ?? 'failed';
      return fallback;
    }
  };
  const cpus = os.cpus();
  const inv: Record<string, unknown> = {
    node_id: ctx.nodeId,
    hostname: os.hostname(),
    certificate: ctx.certPem,
    agent_version: CAPSTAN_VERSION,
    policy_server: ctx.policyServer,
    os: await attempt('os', osInfo, { name: os.type().toLowerCase(), version: '', pretty_name: '', kernel: os.release(), arch: os.machine() }),
    fqdn: await attempt('fqdn', fqdn, os.hostname()),
    machine_id: await attempt('machine_id', async () => (await readFile('/etc/machine-id', 'utf8')).trim(), null),
    cpus: { count: cpus.length, model: cpus[0]?.model ?? null },
    memory: await attempt('memory', memory, null),
    disks: await attempt('disks', disks, []),
    interfaces: await attempt('interfaces', async () => interfaces(), []),
    default_route: await attempt('default_route', async () => parseDefaultRoute(await readFile('/proc/net/route', 'utf8')), null),
    packages: await attempt('packages', packages, []),
    uptime: Math.round(os.uptime()),
    // Lets the server join a row a cloud manager discovered instead of making a second node.
    cloud: await attempt('cloud', () => cloudIdentity(ctx.cloudInstanceData), null),
    facts: {},
  };
  if (ctx.facts) {
    const own = await readFacts(ctx.facts);
    inv.facts = own.facts;
    // A failing fact source is reported, not fatal: the rest of the inventory is still sent.
    if (Object.keys(own.errors).length > 0) inv.facts_errors = own.errors;
  }
  if (Object.keys(errors).length > 0) inv.errors = errors;
  return inv;
}
