/**
 * Realistic run logs for simulated nodes, in the shapes of RUDDER's fixture run logs
 * (files/runlogs/*.log): control start/end around per-directive results, mostly result_success,
 * some result_repaired with their log_info lines, now and then a result_error, written with the
 * agent's own RunLogWriter so every line is what a real agent writes. Then signed with the node's
 * key and zstd-compressed, exactly as `capstan-agent run` sends them.
 *
 * A node's directives are fixed (its policy does not change between runs); which ones repair or
 * fail varies per run, from a PRNG seeded by node and run, so a run is reproducible.
 */
import { createHash } from 'node:crypto';
import { compressSync } from '@capstan/shared/envelope/codec';
import { CAPSTAN_VERSION } from '@capstan/shared/protocol';
import { inventoryFileName, runLogFileName } from '@capstan/shared/runlog/name';
import { signSmime } from '@capstan/shared/smime/sign';
import { RunLogWriter } from '@capstan/agent/runlog/write';
import type { SimIdentity } from './identities.js';

export interface ReportMix {
  /** Chance a directive repairs in a run (result_repaired, preceded by a log_info). */
  repaired: number;
  /** Chance a directive fails in a run (result_error). */
  error: number;
  /** Share of directives that also log an informational report each run. */
  info: number;
}

/** Close to the 2018 fixture: 35 successes, a repair and a handful of informational lines per ~70 reports. */
export const DEFAULT_MIX: ReportMix = Object.freeze({ repaired: 0.03, error: 0.01, info: 0.2 });

/** Components and messages in RUDDER's style (technique name, key, message). */
const COMPONENTS: ReadonlyArray<readonly [string, string, string]> = [
  ['ncf Initialization', 'None', 'Configuration library initialization'],
  ['Security parameters', 'None', 'Internal environment security'],
  ['CRON Daemon', 'cron', 'Cron daemon status'],
  ['Log system for reports', 'None', 'Logging system for report centralization'],
  ['Binaries update', 'None', 'Agent binaries in /opt/capstan/bin'],
  ['File content', '/etc/motd', 'Insert content into /etc/motd'],
  ['Package present', 'openssh-server', 'Presence of package openssh-server in any version'],
  ['Service running', 'sshd', 'Ensure that service sshd is running'],
  ['Service enabled at boot', 'chronyd', 'Ensure that service chronyd is enabled at boot'],
  ['Sysctl value', 'vm.swappiness', 'Sysctl vm.swappiness set to 10'],
  ['File permissions', '/etc/ssh/sshd_config', 'Permissions 0600 root:root on /etc/ssh/sshd_config'],
  ['Directory present', '/var/lib/app', 'Directory /var/lib/app exists'],
  ['Command check', 'systemctl is-system-running', 'Command systemctl is-system-running'],
  ['File line present', '/etc/hosts', 'Line present in /etc/hosts'],
];

/** mulberry32: small, fast and good enough to vary outcomes reproducibly. */
export function prng(seed: number): () => number {
  let a = seed >>> 0;
  return () => {
    a = (a + 0x6d2b79f5) >>> 0;
    let t = a;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

function seedOf(text: string): number {
  return createHash('sha256').update(text).digest().readUInt32BE(0);
}

function uuidFrom(text: string): string {
  const h = createHash('sha256').update(text).digest('hex');
  return `${h.slice(0, 8)}-${h.slice(8, 12)}-${h.slice(12, 16)}-${h.slice(16, 20)}-${h.slice(20, 32)}`;
}

interface SimDirective {
  ruleId: string;
  directiveId: string;
  component: string;
  key: string;
  message: string;
  info: boolean;
}

export interface NodeProfile {
  nodeId: string;
  configId: string;
  directives: SimDirective[];
}

/**
 * A node's fixed policy: enough directives that a run holds about `reports` reports with the mix's
 * informational lines (control start/end included). Rules and directives have RUDDER-style UUIDs
 * shared across the fleet, as a real policy applies the same rules to many nodes.
 */
export function nodeProfile(nodeId: string, reports: number, mix: ReportMix = DEFAULT_MIX): NodeProfile {
  if (!Number.isInteger(reports) || reports < 3 || reports > 100_000) throw new RangeError('reports must be an integer in 3..100000');
  const rnd = prng(seedOf(nodeId));
  const body = reports - 2;
  const directives: SimDirective[] = [];
  let lines = 0;
  for (let d = 0; lines < body; d++) {
    const [component, key, message] = COMPONENTS[d % COMPONENTS.length]!;
    const info = lines + 2 <= body && rnd() < mix.info;
    directives.push({
      // RUDDER's system rules have short ids (hasPolicyServer-root), user rules and directives UUIDs.
      ruleId: d < 5 ? 'hasPolicyServer-root' : uuidFrom(`rule-${Math.floor(d / 4)}`),
      directiveId: d < 5 ? 'common-root' : uuidFrom(`directive-${d}`),
      component,
      key: d < COMPONENTS.length ? key : `${key}-${Math.floor(d / COMPONENTS.length)}`,
      message,
      info,
    });
    lines += info ? 2 : 1;
  }
  const configId = createHash('sha256').update(directives.map((x) => x.directiveId).join(',')).digest('hex').slice(0, 8);
  return { nodeId, configId: `20240101-000000-${configId}`, directives };
}

/** The run log text of one run: `startedAt` is the run's start; reports follow it by a few ms each. */
export function runLogText(profile: NodeProfile, startedAt: Date, run: number, mix: ReportMix = DEFAULT_MIX): string {
  const rnd = prng(seedOf(`${profile.nodeId}/${run}`));
  let t = startedAt.getTime();
  const w = new RunLogWriter({ nodeId: profile.nodeId, configId: profile.configId, startedAt, clock: () => new Date((t += 40)) });
  w.start();
  for (const d of profile.directives) {
    const r = rnd();
    const common = { policy: 'Common', rule_id: d.ruleId, directive_id: d.directiveId, component: d.component, key_value: d.key };
    if (d.info) w.add({ ...common, event_type: 'log_info', msg: `${d.message}: checked` });
    if (r < mix.error) w.add({ ...common, event_type: 'result_error', msg: `${d.message} could not be repaired` });
    else if (r < mix.error + mix.repaired) w.add({ ...common, event_type: 'result_repaired', msg: `${d.message} was repaired` });
    else w.add({ ...common, event_type: 'result_success', msg: `${d.message} was correct` });
  }
  w.end();
  return w.text();
}

export interface SignedFile {
  name: string;
  body: Buffer;
}

/** Signed with the node's key and zstd-compressed, named as the agent names it. */
export function signedRunLog(id: SimIdentity, profile: NodeProfile, startedAt: Date, run: number, mix: ReportMix = DEFAULT_MIX): SignedFile {
  const signed = signSmime(Buffer.from(runLogText(profile, startedAt, run, mix)), id, { signingTime: startedAt });
  return { name: runLogFileName(id.nodeId, startedAt, 'zstd'), body: compressSync(signed, 'zstd') };
}

/** A minimal inventory with DESIGN.md's required fields, signed and compressed as the agent sends it. */
export function signedInventory(id: SimIdentity, policyServer: string, at: Date): SignedFile {
  const inv = {
    node_id: id.nodeId,
    hostname: id.hostname,
    fqdn: id.hostname,
    certificate: id.certPem,
    agent_version: CAPSTAN_VERSION,
    policy_server: policyServer,
    os: { name: 'Debian', version: '12', kernel: '6.1.0-sim', arch: 'x86_64' },
    cpus: 2,
    memory: { total: 4 * 1024 ** 3 },
    facts: { simulated: true },
  };
  const signed = signSmime(Buffer.from(JSON.stringify(inv)), id, { signingTime: at });
  return { name: inventoryFileName(id.nodeId, at, 'zstd'), body: compressSync(signed, 'zstd') };
}
