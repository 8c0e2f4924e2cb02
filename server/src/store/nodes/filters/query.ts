/**
 * The node filters of list queries, which both backends must build identically so that one test
 * suite can hold them to the same answers: checked once here, then turned into one WHERE clause
 * with the dialect's placeholders (sqlite.ts, postgres.ts), and the sort order. The filters come
 * checked by the domain's rules (server/src/registry/filters.ts).
 */
import { COMPLIANT_STATES, RUN_STATES } from '@capstan/shared/compliance/compute';
import { capstanError } from '@capstan/shared/errors';
import { parseFilter } from '@capstan/shared/filter/parse';
import { compileFilter } from './sql.js';
import { SORT_FIELDS, type CheckedFilter, type NodeFilter, type NodeRecord, type SortField } from '../../store.js';

export type { CheckedFilter };
import type { FilterRules } from '../../rules.js';
import { toUtcIso } from '../../time.js';

/** The escape character used in every LIKE pattern we build (`ESCAPE '\'`). */
export const LIKE_ESCAPE = '\\';

const likeEscape = (text: string) => text.replace(/[\\%_]/g, (c) => LIKE_ESCAPE + c);

/**
 * Turn a hostname prefix filter into a LIKE pattern. The value is the user's text, not a
 * pattern: `%` and `_` (and the escape character itself) must match literally, or `web_1`
 * would also list `webX1`. A trailing `*` is the documented spelling of "prefix" and is dropped.
 */
export function hostnamePrefixPattern(prefix: string): string {
  const bare = prefix.endsWith('*') ? prefix.slice(0, -1) : prefix;
  return likeEscape(bare) + '%';
}

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
}

/** `<from>..<to>`, either end may be empty; the ends become ISO UTC (from inclusive, to exclusive). */
/** (Parsed here, where the range is compiled; the domain's checks use it too.) */
export function parseRange(value: string): { from: string | null; to: string | null } {
  const i = value.indexOf('..');
  if (i < 0) bad(`last_run must be a range <from>..<to> (either end may be empty), got "${value}"`);
  const [from, to] = [value.slice(0, i), value.slice(i + 2)];
  const end = (s: string, name: string) => (s === '' ? null : toUtcIso(s, `last_run ${name}`));
  const range = { from: end(from, 'start'), to: end(to, 'end') };
  if (range.from === null && range.to === null) bad('last_run range needs at least one end');
  return range;
}

/** How a backend spells what differs: placeholders, case-insensitive LIKE, byte-order collation. */
export interface Dialect {
  param(value: unknown): string;
  /**
   * Case-insensitive LIKE, ASCII letters only in both backends (SQLite's LIKE folds ASCII only;
   * Postgres, on COLLATE "C" columns, too). Postgres compares `lower(column)` with a lower-cased
   * pattern, so that an index on lower(column) serves prefixes.
   */
  like: 'LIKE' | 'lower';
  /** Appended to text columns in ORDER BY so both backends sort in byte order. */
  collate: string;
  /** The instant filter ages (`last_run.age > 2h`) are measured from; default the clock's. */
  now?: () => Date;
  /** Policy groups by id, so that a `group` filter also means them (loadPolicyGroups). */
  groups?: ReadonlyMap<string, PolicyGroupDef>;
  /** How many policy groups deep this condition is (a group's filter naming a group). */
  depth?: number;
  /**
   * Mutes limited to groups (vuln_mutes rows with groups), read before the statement when an
   * expression has vulnerability terms, so that those terms honour them (vulns.ts). Left out of
   * the filters of policy groups: there the terms see fleet-wide mutes only.
   */
  groupMutes?: readonly GroupMute[];
  /**
   * Postgres: the package-version ids of each package comparison, looked up before the query
   * (packageAtomKey), so that the planner sees the array and estimates its matches.
   */
  packageIds?: ReadonlyMap<string, number[]>;
  /**
   * SQLite: `column` as an expression no index serves (a unary `+`). Without statistics its
   * planner takes an equality on an index's first column for a narrow range, so `accepted =
   * 'accepted' AND id IN (…100 ids)` read every accepted node through that index; the conditions
   * beside an `id` filter are written with it, and the ids' rows are found by key.
   */
  unindexed?: (column: string) => string;
  /** Set by filterConditions beside an `id` filter: the condition is checked on the ids' rows. */
  byIds?: boolean;
}

/** A mute limited to groups, as the vulnerability terms read it. */
export interface GroupMute {
  target: string;
  groups: string[];
  /** ISO instant; null: until removed. */
  expires: string | null;
}

/** Whether these filters hold an expression with vulnerability terms (and so need the group-limited mutes). */
export function needsVulnMutes(filters: readonly CheckedFilter[]): boolean {
  return filters.some((f) => f.key === 'q' && f.values.some((v) => /vuln/i.test(v)));
}

/** vuln_mutes rows (target, mute_groups as JSON text or jsonb, expires) → the group-limited ones. */
export function groupMutesFrom(rows: ReadonlyArray<{ target: unknown; mute_groups: unknown; expires: unknown }>): GroupMute[] {
  const out: GroupMute[] = [];
  for (const r of rows) {
    const groups = (typeof r.mute_groups === 'string' ? JSON.parse(r.mute_groups) : r.mute_groups) as unknown;
    if (!Array.isArray(groups) || groups.length === 0) continue;
    out.push({ target: String(r.target), groups: groups.map(String), expires: typeof r.expires === 'string' ? r.expires : r.expires instanceof Date ? r.expires.toISOString() : null });
  }
  return out;
}

/** The key of a package comparison in Dialect.packageIds: name, operator and version key. */
export function packageAtomKey(name: string, op: string | null, key: string | null): string {
  return `${name}\u0000${op ?? ''}\u0000${key ?? ''}`;
}

/** What a `group` filter needs of a policy group: its static nodes, its filter as checked. */
export interface PolicyGroupDef {
  nodes?: string[];
  filter?: CheckedFilter[];
}

/** A policy group's filter naming a group naming a group…: followed this deep, no further. */
export const MAX_GROUP_DEPTH = 3;

/** Whether these filters name a group, and so need the policy groups loaded. */
export function needsGroups(filters: readonly CheckedFilter[]): boolean {
  return filters.some((f) => f.key === 'group' || (f.key === 'q' && f.values.some((v) => /group/i.test(v))));
}

/**
 * Policy group bodies (as stored) → what a `group` filter needs, their filters checked by the
 * domain's rule; a malformed one is left out.
 */
export function policyGroupMap(bodies: Array<{ id: string; body: Record<string, unknown> }>, check: FilterRules['check']): Map<string, PolicyGroupDef> {
  const out = new Map<string, PolicyGroupDef>();
  for (const { id, body } of bodies) {
    const nodes = Array.isArray(body.nodes) ? (body.nodes as string[]) : undefined;
    let filter: CheckedFilter[] | undefined;
    try {
      filter = Array.isArray(body.filter) ? check({ filters: body.filter as NodeFilter[] }) : undefined;
    } catch {
      continue;
    }
    out.set(id, { ...(nodes && { nodes }), ...(filter && { filter }) });
  }
  return out;
}

/**
 * Membership of a group, as one condition: the registry's groups (`groups` on the node) or the
 * policy group of that id (its static nodes or its filter, accepted nodes only, as the policy
 * generator counts members). "group" means the same thing in every filter.
 */
export function groupCondition(groupId: string, d: Dialect): string {
  // IN (subquery), not a correlated EXISTS: a group is a small part of the fleet, and its ids
  // come from one index range instead of one probe per node (measured: 104 → 11 ms at 100,000).
  const registry = `n.id IN (SELECT g.node_id FROM node_groups g WHERE g.group_id = ${d.param(groupId)})`;
  const def = d.groups?.get(groupId);
  const depth = d.depth ?? 0;
  if (!def || depth >= MAX_GROUP_DEPTH) return registry;
  const parts: string[] = [];
  if (def.nodes?.length) parts.push(`n.id IN (${def.nodes.map((id) => d.param(id)).join(', ')})`);
  if (def.filter) {
    // A group's own filter sees fleet-wide mutes only: a group defined by its exposure would
    // otherwise depend on itself through a mute limited to it.
    const { groupMutes: _, ...outer } = d;
    const conds = filterConditions(def.filter, { ...outer, depth: depth + 1 });
    parts.push(conds.length ? `(${conds.join(' AND ')}) IS TRUE` : '1 = 1');
  }
  if (parts.length === 0) return registry;
  return `(${registry} OR (n.accepted = 'accepted' AND (${parts.join(' OR ')})))`;
}

const asciiLower = (s: string) => s.replace(/[A-Z]/g, (c) => c.toLowerCase());

function ciLike(column: string, pattern: string, d: Dialect): string {
  return d.like === 'LIKE'
    ? `${column} LIKE ${d.param(pattern)} ESCAPE '${LIKE_ESCAPE}'`
    : `lower(${column}) LIKE ${d.param(asciiLower(pattern))} ESCAPE '${LIKE_ESCAPE}'`;
}

const TEXT_MATCH: Record<string, string> = { name: 'n.name', hostname: 'n.hostname', region: 'n.region' };
const EQUAL: Record<string, string> = { id: 'n.id', state: 'n.state', status: 'n.status', manager: 'n.manager', accepted: 'n.accepted' };

/** One filter as SQL over `nodes n`. */
function condition(f: CheckedFilter, d: Dialect): string {
  let any: string;
  const column = TEXT_MATCH[f.key];
  if (f.key === 'q') {
    // Compiled to a condition that is never unknown, so an exclusion is a plain NOT.
    const now = d.now?.() ?? new Date();
    any = f.values.map((v) => compileFilter(parseFilter(v), d, now)).join(' OR ');
    return f.exclude ? `NOT (${any})` : `(${any})`;
  } else if (column) {
    // Case-insensitive (DNS names are); `*` at the end makes a prefix; `%` and `_` are literal.
    any = f.values.map((v) => {
      if (v === '*') return `${column} IS NOT NULL`;
      return ciLike(column, v.endsWith('*') ? hostnamePrefixPattern(v) : likeEscape(v), d);
    }).join(' OR ');
  } else if (EQUAL[f.key]) {
    const col = d.byIds && d.unindexed && f.key !== 'id' ? d.unindexed(EQUAL[f.key]!) : EQUAL[f.key]!;
    any = `${col} IN (${f.values.map((v) => d.param(v)).join(', ')})`;
  } else if (f.key === 'group') {
    any = d.groups && f.values.some((v) => d.groups!.has(v))
      ? f.values.map((v) => groupCondition(v, d)).join(' OR ')
      // IN (subquery), not a correlated EXISTS: a group is a small part of the fleet, and its ids
      // come from one index range instead of one probe per node (measured: 104 → 11 ms at 100,000).
      : `n.id IN (SELECT g.node_id FROM node_groups g WHERE g.group_id IN (${f.values.map((v) => d.param(v)).join(', ')}))`;
  } else if (f.key === 'managed_by') {
    any = `n.id IN (SELECT l.node_id FROM node_managers l WHERE l.manager_id IN (${f.values.map((v) => d.param(v)).join(', ')}))`;
  } else if (f.key === 'has_agent') {
    // Same test as hasAgent() below; both columns are only ever set by an agent's inventory
    // (or an admin registering its certificate), never by discovery. `relay` is NOT NULL, so the
    // NOT of an excluded or `false` filter is never unknown.
    any = f.values.map((v) => (v === 'true' ? HAS_AGENT_SQL : `NOT ${HAS_AGENT_SQL}`)).join(' OR ');
  } else if (f.key === 'relay') {
    any = f.values.map((v) => (v === 'true' ? 'n.relay = 1' : 'n.relay = 0')).join(' OR ');
  } else if (f.key === 'last_run') {
    any = f.values.map((v) => {
      const { from, to } = parseRange(v);
      const parts = [];
      if (from !== null) parts.push(`n.last_run_at >= ${d.param(from)}`);
      if (to !== null) parts.push(`n.last_run_at < ${d.param(to)}`);
      return `(${parts.join(' AND ')})`;
    }).join(' OR ');
  } else {
    // tag:<key>: exact, literal values (bound parameters, so a ' or % is just a character).
    const tagKey = f.key.slice(4);
    // A correlated EXISTS here: a tag value (env=prod) often matches most of the fleet, and
    // then walking the nodes in list order and probing the tag index stops after one page,
    // where IN (subquery) would fetch every match first (measured: 105 → 55 ms at 100,000).
    any = `EXISTS (SELECT 1 FROM node_tags t WHERE t.node_id = n.id AND t.key = ${d.param(tagKey)} AND t.value IN (${f.values.map((v) => d.param(v)).join(', ')}))`;
  }
  // An excluded filter keeps nodes where the condition is false *or unknown* (no region, never
  // ran). Tag and group conditions are never unknown, so they get a plain NOT, which Postgres
  // turns into an anti-join (IS NOT TRUE would make it probe once per node).
  if (!f.exclude) return `(${any})`;
  return f.key === 'group' || f.key === 'managed_by' || f.key === 'has_agent' || f.key.startsWith('tag:')
    ? `NOT (${any})` : `(${any}) IS NOT TRUE`;
}

export const HAS_AGENT_SQL = '(n.relay = 0 AND (n.last_inventory_at IS NOT NULL OR n.certificate_fingerprint IS NOT NULL))';

/**
 * Whether a node has an agent: it has sent an inventory, or a certificate is registered for it,
 * and it is not a relay. A relay node has a certificate (its own key, for its token) but no agent:
 * an agent on the relay's host is a node of its own, with its own id.
 */
export function hasAgent(n: Pick<NodeRecord, 'last_inventory_at' | 'certificate_fingerprint' | 'relay'>): boolean {
  return !n.relay && (n.last_inventory_at !== null || n.certificate_fingerprint !== null);
}

/** The conditions (over `nodes n`) of checked filters, to be ANDed. */
export function filterConditions(filters: CheckedFilter[], d: Dialect): string[] {
  // An `id` filter names at most a page of nodes: found by key, every other condition is checked on them.
  const byIds = filters.some((f) => f.key === 'id' && !f.exclude);
  return filters.map((f) => condition(f, byIds && f.key !== 'id' ? { ...d, byIds } : d));
}

/** The WHERE clause (over `nodes n`) for checked filters and extra conditions, or ''. */
export function filterWhere(filters: CheckedFilter[], d: Dialect, extra: string[] = []): string {
  const all = [...extra, ...filterConditions(filters, d)];
  return all.length ? `WHERE ${all.join(' AND ')}` : '';
}

const NULLABLE_SORT = new Set(['region', 'last_run_at', 'last_contact_at']);
const TEXT_SORT = new Set(['name', 'hostname', 'id', 'status', 'state', 'accepted', 'manager', 'region']);

/**
 * The node list's compliance sort key over `node_compliance t` (records.ts nodePage joins it):
 * the share of compliant items, 0 for a node whose items are all applying or no answer at that
 * moment (registry/compliance.ts), NULL without data. The clock's two instants are integers
 * computed by the server, written into the statement (both backends, same text).
 */
export function complianceKeySql(at: { silent_before: number; applying_after: number } | undefined): string {
  const cols = (states: readonly string[]) => states.map((c) => `t.${c}`).join(' + ');
  const total = cols(RUN_STATES);
  const good = cols(RUN_STATES.filter((c) => COMPLIANT_STATES.has(c)));
  const int = (v: number) => (Number.isSafeInteger(v) ? String(v) : bad('the compliance clock must be whole seconds'));
  const late = at === undefined ? 'FALSE' : `(t.answered_s IS NOT NULL AND t.answered_s + t.keep_last_s <= ${int(at.silent_before)})
    OR (t.applying_since_s IS NOT NULL AND t.applying_since_s > ${int(at.applying_after)})`;
  return `(CASE WHEN t.node_id IS NULL OR (${total}) = 0 THEN NULL WHEN ${late} THEN 0.0 ELSE CAST(${good} AS DOUBLE PRECISION) / (${total}) END)`;
}

/** ORDER BY for a list: the field, then the id; empty values last in both directions and backends. */
export function orderBy(sort: SortField | undefined, order: 'asc' | 'desc' | undefined, d: Dialect): string {
  const field = sort ?? 'name';
  if (!SORT_FIELDS.includes(field)) bad(`sort must be one of ${SORT_FIELDS.join(', ')}`);
  if (order !== undefined && order !== 'asc' && order !== 'desc') bad('order must be asc or desc');
  const dir = order === 'desc' ? 'DESC' : 'ASC';
  // The key nodePage selects (complianceKeySql): a bare name, so it reads the same in the inner and outer query.
  if (field === 'compliance') return `ORDER BY compliance_key ${dir} NULLS LAST, n.id${d.collate} ${dir}`;
  const col = (c: string) => `n.${c}${TEXT_SORT.has(c) ? d.collate : ''} ${dir}`;
  // Declaring NULLS LAST only where a column can be null keeps SQLite able to walk an index.
  const first = `${col(field)}${NULLABLE_SORT.has(field) ? ' NULLS LAST' : ''}`;
  return field === 'id' ? `ORDER BY ${first}` : `ORDER BY ${first}, ${col('id')}`;
}
