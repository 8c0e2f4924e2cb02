/**
 * The agent's part of a patch campaign (docs/campaigns.md): an `upgrade` job's request, run on
 * this host with its own package manager — apt-get on dpkg hosts, dnf on rpm hosts:
 *
 *   pre commands → refresh (apt-get update) → upgrade → versions read again → post commands
 *   → reboot check (/run/reboot-required; `needs-restarting -r`) → result line
 *
 * What moved is read from the package database before and after (dpkg-query, rpm -qa), so the
 * answer says from→to for every package, dependencies pulled in included. The last output line
 * is `upgrade-result <json>` (shared/upgrade.ts), which the server reads into the campaign's
 * report. Nothing here reboots when CAPSTAN_UPGRADE_NO_REBOOT=1 (tests, hosts an admin reboots).
 */
import { existsSync } from 'node:fs';
import { capstanError } from '@capstan/shared/errors';
import type { UpgradedPackage, UpgradeRequest, UpgradeResult, UpgradeStep } from '@capstan/shared/upgrade';
import { UPGRADE_RESULT_PREFIX } from '@capstan/shared/upgrade';
import { onPath } from '../methods/tool.js';
import { run } from '../methods/types.js';

export interface UpgradeOptions {
  env: NodeJS.ProcessEnv;
  /** Longest one command (apt-get, a pre or post command) may take. */
  commandTimeoutMs: number;
  /** Each output line, as it is made. */
  line: (text: string) => void;
  /** Where Debian says a reboot is needed (tests: another path). */
  rebootFlag?: string;
}

type Family = 'dpkg' | 'rpm';
/** Output lines kept per command (its last ones). */
const TAIL_LINES = 40;
const APT = ['-y', '-q', '-o', 'Dpkg::Options::=--force-confdef', '-o', 'Dpkg::Options::=--force-confold'];

async function family(env: NodeJS.ProcessEnv): Promise<Family> {
  if (await onPath('dpkg-query', env) && await onPath('apt-get', env)) return 'dpkg';
  if (await onPath('rpm', env) && await onPath('dnf', env)) return 'rpm';
  throw capstanError('ERR_METHOD_TOOL', 'no package manager to upgrade with (apt-get or dnf)');
}

/** Installed packages: name → version. */
async function snapshot(fam: Family, o: UpgradeOptions): Promise<Map<string, string>> {
  const ctx = { env: o.env, commandTimeoutMs: o.commandTimeoutMs };
  const r = fam === 'dpkg'
    ? await run('dpkg-query', ['-W', '-f', '${Package}\t${Version}\t${db:Status-Status}\n'], ctx)
    : await run('rpm', ['-qa', '--qf', '%{NAME}\t%|EPOCH?{%{EPOCH}:}:{}|%{VERSION}-%{RELEASE}\tinstalled\n'], ctx);
  if (r.code !== 0) throw capstanError('ERR_METHOD_TOOL', `cannot list the installed packages: ${r.stderr.trim().split('\n').pop() ?? ''}`);
  const out = new Map<string, string>();
  for (const l of r.stdout.split('\n')) {
    const [name, version, status] = l.split('\t');
    if (name && version && status === 'installed' && !out.has(name)) out.set(name, version);
  }
  return out;
}

/** a >= b in the package manager's own order. */
async function atLeast(fam: Family, a: string, b: string, o: UpgradeOptions): Promise<boolean> {
  const ctx = { env: o.env, commandTimeoutMs: o.commandTimeoutMs };
  if (fam === 'dpkg') return (await run('dpkg', ['--compare-versions', a, 'ge', b], ctx)).code === 0;
  const r = await run('rpm', ['--eval', `%{lua: print(rpm.vercmp(${JSON.stringify(a)}, ${JSON.stringify(b)}))}`], ctx);
  return Number(r.stdout.trim()) >= 0;
}

/**
 * Packages whose upgrade candidate comes from a security origin, from apt-get's simulation:
 * `Inst name [have] (candidate Debian-Security:12/stable-security [amd64])`.
 */
export function securityCandidates(simulation: string): string[] {
  const names: string[] = [];
  for (const l of simulation.split('\n')) {
    const m = /^Inst (\S+) (?:\[[^\]]*\] )?\((\S+) ([^[)]*)/.exec(l);
    if (m && /(^|[\s,/:-])[^\s,]*-security\b|Security/i.test(m[3]!)) names.push(m[1]!);
  }
  return names;
}

export function changes(before: Map<string, string>, after: Map<string, string>): UpgradedPackage[] {
  const out: UpgradedPackage[] = [];
  for (const [name, to] of after) {
    const from = before.get(name) ?? null;
    if (from !== to) out.push({ name, from, to });
  }
  return out.sort((a, b) => a.name.localeCompare(b.name));
}

export async function applyUpgrade(req: UpgradeRequest, o: UpgradeOptions): Promise<UpgradeResult> {
  const steps: UpgradeStep[] = [];
  const ctx = { env: { ...o.env, DEBIAN_FRONTEND: 'noninteractive' }, commandTimeoutMs: o.commandTimeoutMs };
  const step = async (kind: UpgradeStep['step'], cmd: string, args: string[]): Promise<number> => {
    const shown = kind === 'pre' || kind === 'post' ? args[1]! : [cmd, ...args].join(' ');
    o.line(`$ ${shown}`);
    const r = await run(cmd, args, ctx);
    for (const l of `${r.stdout}\n${r.stderr}`.split('\n').filter((x) => x.trim() !== '').slice(-TAIL_LINES)) o.line(`  ${l}`);
    o.line(`exit ${r.code}`);
    steps.push({ step: kind, command: shown, code: r.code });
    return r.code;
  };
  const result = (exit: number, extra: Partial<UpgradeResult> = {}): UpgradeResult => {
    const res: UpgradeResult = { upgraded: [], unmet: [], steps, reboot_required: false, rebooted: false, exit_code: exit, ...extra };
    o.line(`${UPGRADE_RESULT_PREFIX}${JSON.stringify(res)}`);
    return res;
  };
  for (const c of req.pre) {
    const code = await step('pre', '/bin/sh', ['-c', c]);
    if (code !== 0) return result(code);
  }
  const fam = await family(o.env);
  const before = await snapshot(fam, o);
  let code = 0;
  if (fam === 'dpkg') {
    code = await step('refresh', 'apt-get', ['update', '-q']);
    if (code === 0) {
      let names: string[] | null = null;
      if (req.mode === 'packages') names = req.packages.map((p) => p.name).filter((n) => before.has(n));
      if (req.mode === 'security') {
        const sim = await run('apt-get', ['-s', '-q', 'upgrade'], ctx);
        if (sim.code !== 0) code = await step('upgrade', 'apt-get', ['-s', '-q', 'upgrade']);
        else names = securityCandidates(sim.stdout);
        if (names) o.line(`security updates: ${names.length === 0 ? 'none' : names.join(' ')}`);
      }
      if (code === 0) {
        if (names === null) code = await step('upgrade', 'apt-get', ['upgrade', ...APT]);
        else if (names.length > 0) code = await step('upgrade', 'apt-get', ['install', ...APT, '--only-upgrade', '--', ...names]);
        else o.line('nothing to upgrade');
      }
    }
  } else {
    const names = req.mode === 'packages' ? req.packages.map((p) => p.name).filter((n) => before.has(n)) : [];
    if (req.mode === 'packages' && names.length === 0) o.line('nothing to upgrade');
    // dnf exits 0 when there is nothing to do.
    else code = await step('upgrade', 'dnf', ['upgrade', '-y', '-q', ...(req.mode === 'security' ? ['--security'] : []), ...names]);
  }
  const after = await snapshot(fam, o);
  const upgraded = changes(before, after);
  for (const u of upgraded) o.line(`upgraded ${u.name} ${u.from ?? '(new)'} -> ${u.to}`);
  if (code !== 0) return result(code, { upgraded });
  const unmet: string[] = [];
  for (const p of req.packages) {
    const have = after.get(p.name);
    if (have !== undefined && p.min_version !== undefined && !(await atLeast(fam, have, p.min_version, o))) unmet.push(p.name);
  }
  if (unmet.length > 0) {
    o.line(`below their minimum version: ${unmet.join(', ')}`);
    return result(3, { upgraded, unmet });
  }
  for (const c of req.post) {
    const pc = await step('post', '/bin/sh', ['-c', c]);
    if (pc !== 0) return result(pc, { upgraded });
  }
  let required = false;
  if (fam === 'dpkg') required = existsSync(o.rebootFlag ?? '/run/reboot-required');
  else if (await onPath('needs-restarting', o.env)) required = (await step('check', 'needs-restarting', ['-r'])) === 1;
  if (required) o.line('reboot required');
  let rebooted = false;
  if (required && req.reboot === 'if-needed') {
    if (o.env.CAPSTAN_UPGRADE_NO_REBOOT === '1') o.line('reboot left to the admin (CAPSTAN_UPGRADE_NO_REBOOT=1)');
    // In a minute: the answer and the inventory go out first.
    else rebooted = (await step('reboot', 'shutdown', ['-r', '+1', 'capstan: reboot after a patch campaign'])) === 0;
  }
  return result(0, { upgraded, reboot_required: required, rebooted });
}
