/**
 * A campaign request checked at the door (POST /api/1/campaigns), and its targets split into
 * waves: the canary (a count or a percentage of the targets, at least one node) first, then the
 * rest. Nodes are ordered by id, so the same request on the same fleet picks the same canary.
 */
import { capstanError } from '@capstan/shared/errors';
import { parseUpgradeRequest } from '@capstan/shared/upgrade';
import { filterList } from '../jobs/create.js';
import type { CampaignSpec, GroupWindow, NodeFilter } from '../store/store.js';
import { parseWindow } from './window.js';

const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;
/** A registry group (free text) or a policy group id: what `group = <id>` takes. */
const GROUP_ID = /^[^\u0000-\u001f\u007f]{1,255}$/;
/** CVE-2024-1234, GHSA-…, DSA-…: what a vulnerability id looks like. */
const VULN_ID = /^[A-Za-z][A-Za-z0-9._:-]{1,127}$/;

export interface CampaignLimits {
  /** Most nodes one campaign may target (jobs.max_targets). */
  maxTargets: number;
  /** Attempts per node when the request says none (campaigns.max_attempts). */
  defaultMaxAttempts: number;
}

export interface CampaignRequest {
  name: string;
  spec: CampaignSpec;
}

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
}

/** "10%" or 10 (percent) → 10; null when it is neither. */
function percent(v: unknown): number | null {
  const n = typeof v === 'number' ? v : typeof v === 'string' && /^\d+(\.\d+)?%$/.test(v) ? Number(v.slice(0, -1)) : null;
  return n !== null && Number.isFinite(n) && n >= 0 && n <= 100 ? n : null;
}

export function parseCampaignRequest(raw: unknown, limits: CampaignLimits): CampaignRequest {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) bad('the body must be a JSON object');
  const {
    name, nodes, q, filters, upgrade, packages, pre, post, reboot, window, windows, canary, failure_threshold, max_attempts, vulnerability, ...rest
  } = raw as Record<string, unknown>;
  if (Object.keys(rest).length) bad(`unknown fields: ${Object.keys(rest).join(', ')}`);
  if (typeof name !== 'string' || name.trim() === '' || name.length > 200) bad('name must be a non-empty string of at most 200 characters');
  if (nodes !== undefined && (!Array.isArray(nodes) || nodes.length > limits.maxTargets || nodes.some((n) => typeof n !== 'string' || !NODE_ID.test(n)))) {
    bad(`nodes must be a list of at most ${limits.maxTargets} node ids`);
  }
  if (q !== undefined && (typeof q !== 'string' || q.trim() === '' || q.length > 4096)) bad('q must be a filter expression (docs/filters.md)');
  // The same checks as a job's filters (keys known, an expression that parses).
  const list: NodeFilter[] = filterList([...(q !== undefined ? [{ key: 'q', values: [q] }] : []), ...(filters === undefined ? [] : Array.isArray(filters) ? filters : [null])], 'filters');
  if (vulnerability !== undefined && (typeof vulnerability !== 'string' || !VULN_ID.test(vulnerability))) bad('vulnerability must be an id like CVE-2024-3094');
  const mode = upgrade ?? (packages !== undefined || vulnerability !== undefined ? 'packages' : undefined);
  if (mode !== 'packages' && mode !== 'security' && mode !== 'all') bad('say what to upgrade: packages (a list), or upgrade "security" or "all"');
  // A vulnerability's fixing packages are filled in by the service (its resolver) before the upgrade is checked.
  const named = (packages ?? (vulnerability !== undefined ? [] : undefined)) as unknown;
  let canarySpec: CampaignSpec['canary'] = null;
  if (canary !== undefined && canary !== null) {
    if (typeof canary === 'number' && Number.isInteger(canary) && canary >= 1 && canary <= limits.maxTargets) canarySpec = { count: canary };
    else if (typeof canary === 'string' && percent(canary) !== null && percent(canary)! > 0) canarySpec = { percent: percent(canary)! };
    else bad('canary must be a node count (1 or more) or a percentage like "10%"');
  }
  const threshold = failure_threshold === undefined ? 0 : percent(failure_threshold);
  if (threshold === null) bad('failure_threshold must be a percentage from 0 to 100, like "20%" (0: stop at the first failure)');
  const attempts = max_attempts === undefined ? limits.defaultMaxAttempts : max_attempts;
  if (typeof attempts !== 'number' || !Number.isInteger(attempts) || attempts < 1 || attempts > 100) bad('max_attempts must be an integer from 1 to 100');
  const extra = { ...(pre !== undefined && { pre }), ...(post !== undefined && { post }), ...(reboot !== undefined && { reboot }) };
  const upgradeReq = vulnerability !== undefined && (named as unknown[]).length === 0
    // The fixing packages come from the vulnerability resolver (service.ts); the rest is checked now.
    ? { ...parseUpgradeRequest({ mode: 'all', ...extra }), mode: 'packages' as const }
    : parseUpgradeRequest({ mode, ...(named !== undefined && { packages: named }), ...extra });
  return {
    name: name.trim(),
    spec: {
      nodes: [...new Set((nodes ?? []) as string[])],
      filters: list,
      upgrade: upgradeReq,
      window: window === undefined || window === null ? null : parseWindow(window),
      ...(windows !== undefined && windows !== null && { windows: parseGroupWindows(windows) }),
      canary: canarySpec,
      failure_threshold: threshold,
      max_attempts: attempts,
      ...(vulnerability !== undefined && { vulnerability: vulnerability as string }),
    },
  };
}

/** Most windows per group one campaign may have. */
export const MAX_GROUP_WINDOWS = 50;

/** `windows`: [{group, days, start, duration, tz}, …] in priority order, each group once. */
export function parseGroupWindows(raw: unknown): GroupWindow[] {
  if (!Array.isArray(raw) || raw.length > MAX_GROUP_WINDOWS) bad(`windows must be a list of at most ${MAX_GROUP_WINDOWS} {group, days, start, duration, tz} objects`);
  const seen = new Set<string>();
  return raw.map((entry: unknown, i) => {
    if (!entry || typeof entry !== 'object' || Array.isArray(entry)) bad(`windows[${i}] must be an object {group, days, start, duration, tz}`);
    const { group, ...rest } = entry as Record<string, unknown>;
    if (typeof group !== 'string' || !GROUP_ID.test(group)) bad(`windows[${i}].group must be a group id (1 to 255 characters, no control characters)`);
    if (seen.has(group)) bad(`windows[${i}]: group ${group} has a window already (one per group)`);
    seen.add(group);
    return { group, window: parseWindow(rest, `windows[${i}]`) };
  });
}

/** The waves of `nodes`: [canary, rest] (one wave without a canary, or when it takes them all). */
export function splitWaves(nodes: readonly string[], canary: CampaignSpec['canary']): string[][] {
  const sorted = [...new Set(nodes)].sort();
  if (sorted.length === 0) return [];
  if (!canary) return [sorted];
  const n = 'count' in canary ? canary.count : Math.max(1, Math.ceil((sorted.length * canary.percent) / 100));
  if (n >= sorted.length) return [sorted];
  return [sorted.slice(0, n), sorted.slice(n)];
}

/** Whether `failed` of `total` passes the threshold (percent; 0: any failure). */
export function overThreshold(failed: number, total: number, thresholdPercent: number): boolean {
  return total > 0 && failed > 0 && (failed * 100) / total > thresholdPercent;
}
