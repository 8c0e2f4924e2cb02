/**
 * Node filters on SQLite: `?` placeholders, LIKE (which folds ASCII case only), byte order
 * without a collation; the policy groups are read when a filter names a group, and the mutes
 * limited to groups when an expression has vulnerability terms.
 */
import type { SqliteDb } from '../../sqlite/db.js';
import type { FilterRules } from '../../rules.js';
import { groupMutesFrom, needsGroups, needsVulnMutes, policyGroupMap, type CheckedFilter, type Dialect } from './query.js';

/**
 * The dialect for one statement: each value given to `param` is pushed onto `values`. Policy
 * groups are read when `filters` name a group (their filters checked with `check`); the mutes
 * limited to groups when they hold vulnerability terms, or when `vulnMutes` says the statement
 * has its own (findingUnmuted).
 */
export function sqliteDialect(db: SqliteDb, values: unknown[], filters: readonly CheckedFilter[] = [], check?: FilterRules['check'], vulnMutes = false): Dialect {
  const d: Dialect = { param: (v) => (values.push(v), '?'), like: 'LIKE', collate: '', now: db.now, unindexed: (column) => `+${column}` };
  if (vulnMutes || needsVulnMutes(filters)) {
    const mutes = groupMutesFrom(db.stmt('SELECT target, mute_groups, expires FROM vuln_mutes WHERE mute_groups IS NOT NULL ORDER BY id').all() as Array<{ target: unknown; mute_groups: unknown; expires: unknown }>);
    if (mutes.length > 0) d.groupMutes = mutes;
  }
  if (check && (needsGroups(filters) || d.groupMutes)) {
    const rows = db.stmt("SELECT id, body FROM policy_objects WHERE kind = 'group'").all() as Array<{ id: string; body: string }>;
    d.groups = policyGroupMap(rows.map((r) => ({ id: r.id, body: JSON.parse(r.body) as Record<string, unknown> })), check);
  }
  return d;
}
