/**
 * What an `upgrade` job asks of a node (patch campaigns, docs/campaigns.md) and what the node
 * answers. The server builds the request, the relays pass it on untouched, and the agent checks
 * it again before acting on it: a relay is not trusted to shape the node's command lines.
 */
import { capstanError } from './errors.js';

export type UpgradeMode = 'packages' | 'security' | 'all';

export interface UpgradePackage {
  name: string;
  /** The node must have at least this version afterwards (the package manager's own order). */
  min_version?: string;
}

export interface UpgradeRequest {
  mode: UpgradeMode;
  /** mode packages: what to upgrade (only packages already installed are touched). */
  packages: UpgradePackage[];
  /** Shell commands run before (drain) and after (health check); a failing one stops the upgrade. */
  pre: string[];
  post: string[];
  /** if-needed: report (and unless the agent is told not to, do) a reboot the upgrade needs. */
  reboot: 'never' | 'if-needed';
}

/** One package the upgrade moved: `from` null when it was newly installed as a dependency. */
export interface UpgradedPackage {
  name: string;
  from: string | null;
  to: string;
}

export interface UpgradeStep {
  step: 'pre' | 'refresh' | 'upgrade' | 'post' | 'check' | 'reboot';
  command: string;
  code: number;
}

/** The agent's answer, on one output line `upgrade-result <json>` (UPGRADE_RESULT_PREFIX). */
export interface UpgradeResult {
  upgraded: UpgradedPackage[];
  /** Named packages installed but still below their min_version afterwards. */
  unmet: string[];
  steps: UpgradeStep[];
  reboot_required: boolean;
  rebooted: boolean;
  /** The agent's code: 0 upgraded (or nothing to do); non-zero: the failed step's. */
  exit_code: number;
}

export const UPGRADE_RESULT_PREFIX = 'upgrade-result ';

/** Bounds of a request (each checked at the server and again at the agent). */
export const UPGRADE_LIMITS = { packages: 500, commands: 20, commandBytes: 4096, nameBytes: 255, versionBytes: 255 } as const;
/**
 * The request as JSON, at most: it rides in a run event beside up to 32 KiB of node ids, and
 * relays and agents drop event lines over 64 KiB (remote-run/protocol.ts MAX_LINE).
 */
export const MAX_UPGRADE_BYTES = 24 * 1024;

/** Debian and RPM package names (the characters both allow, no option-looking leading dash). */
export const PACKAGE_NAME = /^[A-Za-z0-9][A-Za-z0-9.+_~-]*$/;
/** Versions as dpkg and rpm write them: epoch, upstream, revision. */
export const PACKAGE_VERSION = /^[A-Za-z0-9][A-Za-z0-9.+_~:-]*$/;

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
}

function commands(v: unknown, name: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.length > UPGRADE_LIMITS.commands) bad(`${name} must be an array of at most ${UPGRADE_LIMITS.commands} commands`);
  for (const c of v) {
    if (typeof c !== 'string' || c.trim() === '' || Buffer.byteLength(c) > UPGRADE_LIMITS.commandBytes || c.includes('\u0000')) {
      bad(`${name}: each command is a non-empty string of at most ${UPGRADE_LIMITS.commandBytes} bytes`);
    }
  }
  return v as string[];
}

/** A package list entry: "name", "name>=version" or {name, min_version}. */
export function parseUpgradePackage(v: unknown, i: number): UpgradePackage {
  let name: unknown;
  let min: unknown;
  if (typeof v === 'string') {
    const m = /^([^>=\s]+)\s*(?:>=\s*(\S+))?$/.exec(v);
    if (!m) bad(`packages[${i}] must be "name" or "name>=version"`);
    [name, min] = [m[1], m[2]];
  } else if (v && typeof v === 'object' && !Array.isArray(v)) {
    const { name: n, min_version: mv, ...rest } = v as Record<string, unknown>;
    if (Object.keys(rest).length) bad(`packages[${i}] has unknown fields: ${Object.keys(rest).join(', ')}`);
    [name, min] = [n, mv];
  } else bad(`packages[${i}] must be a string or {name, min_version?}`);
  if (typeof name !== 'string' || name.length > UPGRADE_LIMITS.nameBytes || !PACKAGE_NAME.test(name)) bad(`packages[${i}]: ${JSON.stringify(name)} is not a package name`);
  if (min !== undefined && (typeof min !== 'string' || min.length > UPGRADE_LIMITS.versionBytes || !PACKAGE_VERSION.test(min))) bad(`packages[${i}]: ${JSON.stringify(min)} is not a version`);
  return { name, ...(min !== undefined && { min_version: min as string }) };
}

/** A request as it came over the network (server API body, or a run event at the agent), checked. */
export function parseUpgradeRequest(raw: unknown): UpgradeRequest {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) bad('the upgrade must be an object');
  const { mode, packages, pre, post, reboot, ...rest } = raw as Record<string, unknown>;
  if (Object.keys(rest).length) bad(`the upgrade has unknown fields: ${Object.keys(rest).join(', ')}`);
  if (mode !== 'packages' && mode !== 'security' && mode !== 'all') bad('upgrade mode must be "packages", "security" or "all"');
  if (packages !== undefined && (!Array.isArray(packages) || packages.length > UPGRADE_LIMITS.packages)) bad(`packages must be an array of at most ${UPGRADE_LIMITS.packages} entries`);
  const list = ((packages ?? []) as unknown[]).map(parseUpgradePackage);
  if (mode === 'packages' && list.length === 0) bad('an upgrade of named packages needs at least one package');
  if (mode !== 'packages' && list.length > 0) bad(`packages are for mode "packages", not "${mode}"`);
  if (reboot !== undefined && reboot !== 'never' && reboot !== 'if-needed') bad('reboot must be "never" or "if-needed"');
  const req: UpgradeRequest = { mode, packages: list, pre: commands(pre, 'pre'), post: commands(post, 'post'), reboot: (reboot as UpgradeRequest['reboot'] | undefined) ?? 'never' };
  if (Buffer.byteLength(JSON.stringify(req)) > MAX_UPGRADE_BYTES) bad(`the upgrade (packages and commands) is over ${MAX_UPGRADE_BYTES} bytes of JSON`);
  return req;
}

/** The result line of an output, or null when it has none (an agent too old, a run cut short). */
export function findUpgradeResult(output: string | null): UpgradeResult | null {
  if (!output) return null;
  const line = output.split('\n').reverse().find((l) => l.startsWith(UPGRADE_RESULT_PREFIX));
  if (!line) return null;
  try {
    const r = JSON.parse(line.slice(UPGRADE_RESULT_PREFIX.length)) as UpgradeResult;
    return r && typeof r === 'object' && Array.isArray(r.upgraded) ? r : null;
  } catch {
    return null;
  }
}
