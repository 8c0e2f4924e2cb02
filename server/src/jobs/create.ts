/**
 * POST /api/1/jobs: the body checked at the door, and the job's targets resolved.
 *
 * Targets = the static `nodes` plus, per selector, the nodes the manager holds that match the
 * selector's filters (`managed_by` = manager_id, ANDed with them), deduplicated. Then:
 * - none at all → 400 ERR_JOB_NO_TARGETS (nothing would be recorded, the admin wants to know);
 * - a static node id the registry does not know → 400 ERR_JOB_UNKNOWN_NODES (a typo, most likely);
 * - a static node that is a relay → 400 ERR_JOB_RELAY_NODES: a relay runs no remote-run agent (an
 *   agent on its host is a node of its own), so the admin most likely meant that node;
 * - a node that cannot run (pending or refused, terminated, no agent known — a relay a selector
 *   matched included) gets its task failed at once with that reason, so the job shows why it was
 *   not run instead of hiding it.
 */
import { randomUUID } from 'node:crypto';
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { checkFilters, isFilterKey } from '../registry/filters.js';
import { hasAgent } from '../store/nodes/filters/query.js';
import type { UpgradeRequest } from '@capstan/shared/upgrade';
import type { BootstrapSpec, FilterKey, JobInsert, JobRecord, JobType, NodeFilter, NodeRecord, NodeSelector, Store } from '../store/store.js';

const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,254}$/;
/** As relays and agents check them (relayd api/routes/remote-run.ts). */
export const CONDITION_RE = /^[a-zA-Z0-9][a-zA-Z0-9_]*$/;
const MAX_TIMEOUT_MS = 7 * 24 * 3600 * 1000;
const MAX_SELECTORS = 100;
const MAX_CONDITIONS = 100;

export interface JobLimits {
  defaultTimeoutMs: number;
  maxTargets: number;
  /** Bootstrap jobs: the relay URL a job that names none gets ([bootstrap] relay_url; '' none). */
  bootstrapRelayUrl?: string;
  /** `[bootstrap] allowed_relay_urls`: more URLs an operator may name (bootstrap/relay-url.ts). */
  bootstrapAllowedRelayUrls?: readonly string[];
  /** Bootstrap jobs are refused (ERR_BOOTSTRAP_DISABLED) when false. */
  bootstrapEnabled?: boolean;
}

export interface JobRequest {
  name: string;
  type: JobType;
  nodes: string[];
  node_selectors: NodeSelector[];
  /** Any node filters (as in GET nodes: group, tag:<key>, …), ANDed; none: not used. */
  filters: NodeFilter[];
  conditions: string[];
  keep_output: boolean;
  timeout_ms: number;
  bootstrap?: BootstrapSpec;
  /** Upgrade jobs (made by patch campaigns, never from the jobs API): the request and the campaign. */
  upgrade?: UpgradeRequest;
  campaign_id?: string;
}

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
}

function stringList(v: unknown, name: string, max: number, check: (s: string) => boolean, what: string): string[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) bad(`${name} must be an array of strings`);
  if (v.length > max) bad(`${name} has more than ${max} entries`);
  for (const s of v) if (typeof s !== 'string' || !check(s)) bad(`${name}: ${JSON.stringify(s)} is not ${what}`);
  return v as string[];
}

/** A list of node filters as GET nodes takes them, checked. */
export function filterList(v: unknown, name: string): NodeFilter[] {
  if (v === undefined) return [];
  if (!Array.isArray(v)) bad(`${name} must be an array of {key, values, exclude?}`);
  const list = v as NodeFilter[];
  for (const f of list) {
    if (!f || typeof f !== 'object' || typeof f.key !== 'string' || !isFilterKey(f.key)) bad(`${name}: unknown filter key ${JSON.stringify((f as { key?: unknown })?.key)}`);
    const { key: _k, values: _v, exclude: _e, ...extra } = f as unknown as Record<string, unknown>;
    if (Object.keys(extra).length) bad(`${name}: a filter has unknown fields: ${Object.keys(extra).join(', ')}`);
  }
  checkFilters({ filters: list });
  return list.map((f) => ({ key: f.key, values: f.values, ...(f.exclude === true && { exclude: true }) }));
}

function selector(v: unknown, i: number): NodeSelector {
  if (!v || typeof v !== 'object' || Array.isArray(v)) bad(`node_selectors[${i}] must be an object {manager_id, filters?}`);
  const { manager_id, filters, ...rest } = v as Record<string, unknown>;
  if (Object.keys(rest).length) bad(`node_selectors[${i}] has unknown fields: ${Object.keys(rest).join(', ')}`);
  if (typeof manager_id !== 'string' || manager_id.length === 0 || manager_id.length > 255) bad(`node_selectors[${i}].manager_id must be a non-empty string`);
  if (filters !== undefined && !Array.isArray(filters)) bad(`node_selectors[${i}].filters must be an array of {key, values, exclude?}`);
  const list = (filters ?? []) as NodeFilter[];
  for (const f of list) {
    if (!f || typeof f !== 'object' || typeof f.key !== 'string' || !isFilterKey(f.key)) bad(`node_selectors[${i}]: unknown filter key ${JSON.stringify((f as { key?: unknown })?.key)}`);
    const { key: _k, values: _v, exclude: _e, ...extra } = f as unknown as Record<string, unknown>;
    if (Object.keys(extra).length) bad(`node_selectors[${i}]: a filter has unknown fields: ${Object.keys(extra).join(', ')}`);
  }
  checkFilters({ filters: list });
  return { manager_id, filters: list.map((f) => ({ key: f.key, values: f.values, ...(f.exclude === true && { exclude: true }) })) };
}

/** The body of POST /api/1/jobs, checked. */
export function parseJobRequest(raw: unknown, limits: JobLimits): JobRequest {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) bad('the body must be a JSON object');
  const { name, type, nodes, node_selectors, filters, conditions, keep_output, timeout, credential, relay_url, ...rest } = raw as Record<string, unknown>;
  if (Object.keys(rest).length) bad(`unknown fields: ${Object.keys(rest).join(', ')}`);
  if (typeof name !== 'string' || name.trim() === '' || name.length > 200) bad('name must be a non-empty string of at most 200 characters');
  if (type !== 'run' && type !== 'inventory' && type !== 'bootstrap') bad('type must be "run", "inventory" or "bootstrap"');
  let bootstrap: BootstrapSpec | undefined;
  if (type === 'bootstrap') {
    if (limits.bootstrapEnabled === false) throw capstanError('ERR_BOOTSTRAP_DISABLED', 'bootstrap jobs are turned off on this server ([bootstrap] enabled = false)');
    if (conditions !== undefined || keep_output !== undefined) bad('conditions and keep_output are for run and inventory jobs');
    if (credential !== undefined && (typeof credential !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(credential))) bad('credential must be a credential id');
    const url = relay_url ?? limits.bootstrapRelayUrl ?? '';
    if (typeof url !== 'string' || url === '') bad('relay_url is required (the URL the agent reports to), unless [bootstrap] relay_url is set');
    let parsed: URL | null = null;
    try {
      parsed = new URL(url);
    } catch {
      parsed = null;
    }
    if (!parsed || (parsed.protocol !== 'http:' && parsed.protocol !== 'https:') || url.length > 2048 || /["\\\u0000-\u001f]/.test(url)) bad('relay_url must be an http or https URL');
    bootstrap = { credential: (credential as string | undefined) ?? null, relay_url: url };
  } else if (credential !== undefined || relay_url !== undefined) {
    bad('credential and relay_url are for bootstrap jobs');
  }
  const staticNodes = stringList(nodes, 'nodes', limits.maxTargets, (s) => NODE_ID.test(s), 'a node id');
  if (node_selectors !== undefined && !Array.isArray(node_selectors)) bad('node_selectors must be an array');
  const selectors = ((node_selectors ?? []) as unknown[]);
  if (selectors.length > MAX_SELECTORS) bad(`node_selectors has more than ${MAX_SELECTORS} entries`);
  const conds = stringList(conditions, 'conditions', MAX_CONDITIONS, (s) => s.length <= 1024 && CONDITION_RE.test(s), `a condition (${CONDITION_RE.source})`);
  if (keep_output !== undefined && typeof keep_output !== 'boolean') bad('keep_output must be true or false');
  let timeoutMs = limits.defaultTimeoutMs;
  if (timeout !== undefined) {
    // A number is seconds; a string is a duration like "90s" or "2h".
    const ms = typeof timeout === 'number' ? (Number.isInteger(timeout) ? timeout * 1000 : null) : parseDuration(timeout);
    if (ms === null || ms < 1000 || ms > MAX_TIMEOUT_MS) bad('timeout must be a duration from 1s to 7d (a number is seconds)');
    timeoutMs = ms;
  }
  return {
    name: name.trim(),
    type,
    nodes: [...new Set(staticNodes)],
    node_selectors: selectors.map(selector),
    filters: filterList(filters, 'filters'),
    conditions: [...new Set(conds)],
    keep_output: keep_output === true,
    timeout_ms: timeoutMs,
    ...(bootstrap && { bootstrap }),
  };
}

/** Why a node cannot be run, or null when it can. */
export function notRunnable(n: NodeRecord): { reason: 'not_accepted' | 'terminated' | 'no_agent'; message: string } | null {
  if (n.accepted !== 'accepted') return { reason: 'not_accepted', message: `the node is ${n.accepted}` };
  if (n.state === 'terminated') return { reason: 'terminated', message: 'the node is terminated' };
  if (n.relay) return { reason: 'no_agent', message: 'the node is a relay, which runs no remote-run agent' };
  if (!hasAgent(n)) return { reason: 'no_agent', message: 'no agent is known on the node (no inventory, no certificate)' };
  return null;
}

/** Why a node cannot be bootstrapped, or null when it can. */
export function notBootstrappable(n: NodeRecord): { reason: 'terminated' | 'has_agent' | 'no_address' | 'not_discovered'; message: string } | null {
  if (n.state === 'terminated') return { reason: 'terminated', message: 'the node is terminated' };
  if (hasAgent(n)) return { reason: 'has_agent', message: 'the node already has an agent (an inventory or a certificate)' };
  if (!n.address) return { reason: 'no_address', message: 'the node has no address to connect to' };
  if (!n.source_id || !n.region || !n.account_id) {
    return { reason: 'not_discovered', message: 'the node has no cloud identity (it was not discovered by a manager): its agent could not join its row' };
  }
  return null;
}

/** Ids named in an error message at most (the rest are counted). */
const MAX_IDS_SHOWN = 20;
const someIds = (ids: string[]) => `${ids.slice(0, MAX_IDS_SHOWN).join(', ')}${ids.length > MAX_IDS_SHOWN ? ` and ${ids.length - MAX_IDS_SHOWN} more` : ''}`;

/** Nodes read per page when checking what a selector matched. */
const PAGE = 2000;

/** Resolve the targets, create the job, and fail at once (same transaction) the tasks of nodes that cannot run. */
export async function createJob(store: Store, req: JobRequest, limits: JobLimits, now: Date): Promise<JobRecord> {
  const { targets, failed } = await resolveTargets(store, req, limits);
  return insertJob(store, req, [...targets], failed, now);
}

/** The targets of a request (see the top of this file), and why those that cannot run cannot. */
export async function resolveTargets(
  store: Store, req: Pick<JobRequest, 'type' | 'nodes' | 'node_selectors' | 'filters'>, limits: Pick<JobLimits, 'maxTargets'>,
): Promise<{ targets: Set<string>; failed: Map<string, { reason: string; message: string }> }> {
  const targets = new Set<string>();
  const failed = new Map<string, { reason: string; message: string }>();
  const consider = (n: NodeRecord) => {
    if (targets.has(n.id)) return;
    targets.add(n.id);
    const why = req.type === 'bootstrap' ? notBootstrappable(n) : notRunnable(n);
    if (why) failed.set(n.id, why);
  };
  const unknown: string[] = [];
  const relays: string[] = [];
  for (const id of req.nodes) {
    const n = await store.getNode(id);
    if (!n) unknown.push(id);
    else if (n.relay) relays.push(id);
    else consider(n);
  }
  if (unknown.length > 0) throw capstanError('ERR_JOB_UNKNOWN_NODES', `unknown nodes: ${someIds(unknown)}`);
  if (relays.length > 0) {
    throw capstanError('ERR_JOB_RELAY_NODES', `relay nodes cannot be job targets (a relay runs no remote-run agent; target the node of an agent on its host instead): ${someIds(relays)}`);
  }
  for (const s of req.node_selectors) {
    // `managed_by` is the registry's node ↔ manager link (providers); the filters narrow it.
    // Whole records, page by page: whether each node can run is decided here, not per task later.
    const filters: NodeFilter[] = [{ key: 'managed_by' as FilterKey, values: [s.manager_id] }, ...s.filters];
    for (let page = 1; ; page++) {
      const p = await store.listNodes({ filters, sort: 'id', page, per_page: PAGE });
      for (const n of p.data) consider(n);
      if (targets.size > limits.maxTargets) break;
      if (p.data.length < PAGE) break;
    }
    if (targets.size > limits.maxTargets) break;
  }
  if (req.filters.length > 0 && targets.size <= limits.maxTargets) {
    for (let page = 1; ; page++) {
      const p = await store.listNodes({ filters: req.filters, sort: 'id', page, per_page: PAGE });
      for (const n of p.data) if (!n.relay) consider(n);
      if (targets.size > limits.maxTargets || p.data.length < PAGE) break;
    }
  }
  if (targets.size === 0) throw capstanError('ERR_JOB_NO_TARGETS', 'the job has no target: no static node and no node matched its selectors or filters');
  if (targets.size > limits.maxTargets) throw capstanError('ERR_BAD_REQUEST', `the job targets more than jobs.max_targets (${limits.maxTargets}) nodes`);
  return { targets, failed };
}

/** Record a job on targets already resolved (a campaign's wave: the nodes it chose). */
export async function insertJob(store: Store, req: JobRequest, targets: string[], failed: ReadonlyMap<string, { reason: string; message: string }>, now: Date): Promise<JobRecord> {
  const insert: JobInsert = {
    id: randomUUID(),
    name: req.name,
    type: req.type,
    nodes: req.nodes,
    node_selectors: req.node_selectors,
    conditions: req.conditions,
    keep_output: req.keep_output,
    timeout_ms: req.timeout_ms,
    ...(req.filters.length > 0 && { filters: req.filters }),
    ...(req.bootstrap && { bootstrap: req.bootstrap }),
    ...(req.upgrade && { upgrade: req.upgrade }),
    ...(req.campaign_id && { campaign_id: req.campaign_id }),
    created_at: now.toISOString(),
    deadline_at: new Date(now.getTime() + req.timeout_ms).toISOString(),
  };
  return store.jobs.createJob(insert, targets, failed);
}
