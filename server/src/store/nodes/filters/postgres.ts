/**
 * Node filters on PostgreSQL: `$n` placeholders, `lower()` for case-insensitive prefixes (so an
 * index on lower(column) serves them), byte order with COLLATE "C"; what the filters need is
 * looked up before the statement is built.
 */
import { parseFilter, type FilterExpr } from '@capstan/shared/filter/parse';
import { versionKey } from '@capstan/shared/filter/version';
import type { PostgresDb } from '../../postgres/db.js';
import type { FilterRules } from '../../rules.js';
import { groupMutesFrom, needsGroups, needsVulnMutes, packageAtomKey, policyGroupMap, type CheckedFilter, type Dialect, type GroupMute, type PolicyGroupDef } from './query.js';

/**
 * The dialect for one statement over `filters`: each value given to `param` is pushed onto
 * `values`. Policy groups are read when `filters` name a group (their filters checked with `check`);
 * the mutes limited to groups when they hold vulnerability terms, or `vulnMutes` asks.
 */
export async function postgresDialect(db: PostgresDb, values: unknown[], filters: readonly CheckedFilter[] = [], check?: FilterRules['check'], vulnMutes = false): Promise<Dialect> {
  const prepared = await prepare(db, filters, check, vulnMutes);
  return { param: (v) => `$${values.push(v)}`, like: 'lower', collate: ' COLLATE "C"', now: db.now, ...prepared };
}

/**
 * What the filters' SQL needs looked up first: the policy groups when a filter names a group,
 * and the package-version ids of each package comparison in an expression (a bound array the
 * planner can estimate, where a subquery's array would be guessed at 200 rows and joined by a
 * nested loop even when a third of the fleet matches), and the mutes limited to groups when an
 * expression has vulnerability terms.
 */
async function prepare(db: PostgresDb, filters: readonly CheckedFilter[], check?: FilterRules['check'], vulnMutes = false): Promise<{ groups?: Map<string, PolicyGroupDef>; groupMutes?: GroupMute[]; packageIds?: Map<string, number[]> }> {
  let groupMutes: GroupMute[] | undefined;
  if (vulnMutes || needsVulnMutes(filters)) {
    const { rows } = await db.query('groupMutes', db.pool, { name: 'group_mutes', text: 'SELECT target, mute_groups, expires FROM vuln_mutes WHERE mute_groups IS NOT NULL ORDER BY id', values: [] });
    const found = groupMutesFrom(rows as Array<{ target: unknown; mute_groups: unknown; expires: unknown }>);
    if (found.length > 0) groupMutes = found;
  }
  const groups = check ? await groupsFor(db, filters, check, groupMutes !== undefined) : undefined;
  const atoms = new Map<string, { name: string; op: string | null; key: string | null }>();
  const walk = (e: FilterExpr): void => {
    if (e.kind === 'and' || e.kind === 'or') {
      e.items.forEach(walk);
    } else if (e.kind === 'not') {
      walk(e.expr);
    } else if ((e.kind === 'has' || e.kind === 'compare') && e.field === 'package') {
      const op = e.kind === 'compare' ? e.op : null;
      const key = e.kind === 'compare' ? versionKey(e.value.text) : null;
      atoms.set(packageAtomKey(e.key!, op, key), { name: e.key!, op, key });
    }
  };
  for (const f of filters) if (f.key === 'q') f.values.forEach((v) => walk(parseFilter(v)));
  if (atoms.size === 0) return { ...(groups && { groups }), ...(groupMutes && { groupMutes }) };
  const packageIds = new Map<string, number[]>();
  for (const [k, a] of atoms) {
    const sqlOp = a.op === null ? null : a.op === '!=' ? '<>' : a.op;
    const { rows } = await db.query('packageIds', db.pool, {
      text: `SELECT coalesce(array_agg(id ORDER BY id), '{}') AS ids FROM package_versions WHERE name = $1${sqlOp ? ` AND version_key ${sqlOp} $2` : ''}`,
      values: sqlOp ? [a.name, a.key] : [a.name],
    });
    packageIds.set(k, (rows[0] as { ids: number[] }).ids);
  }
  return { ...(groups && { groups }), ...(groupMutes && { groupMutes }), packageIds };
}

/** The policy groups, when these filters name a group or group-limited mutes do (see query.ts groupCondition). */
async function groupsFor(db: PostgresDb, filters: readonly CheckedFilter[], check: FilterRules['check'], forMutes = false): Promise<Map<string, PolicyGroupDef> | undefined> {
  if (!forMutes && !needsGroups(filters)) return undefined;
  const { rows } = await db.query('policyGroups', db.pool, { name: 'policy_groups', text: "SELECT id, body FROM policy_objects WHERE kind = 'group'", values: [] });
  return policyGroupMap((rows as Array<{ id: string; body: unknown }>).map((r) => ({ id: r.id, body: (typeof r.body === 'string' ? JSON.parse(r.body) : r.body) as Record<string, unknown> })), check);
}
