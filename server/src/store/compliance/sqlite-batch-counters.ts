/**
 * The kept counters of a batch writer's nodes on SQLite, moved by the writer itself (migration
 * 38) instead of by the row triggers, one row at a time: the directive counters (kept_directives,
 * kept_rules) of a generation's policies, and the group counters (kept_groups) of its memberships.
 *
 * The writer names its nodes in kept_counters_deferred before it writes any of their rows; the
 * triggers then leave those nodes' directive rows and rules alone. It knows each node's rows
 * before (it read them to compare) and after (it wrote them), and reads each node's kept class and
 * mode before and after its writes: the counters move by what the rows counted under the old
 * class and mode (taken) and what they count under the new ones (added), summed by key, in one
 * statement per counter table, in the same transaction. That is what the triggers would have
 * moved, row by row: migration 23's counters count a node's rows under its kept class and mode,
 * and a rule once per node with a row under it.
 */
import type { SqliteDb } from '../sqlite/db.js';
import { sClassRow } from '../migrations/0023_kept_compliance.js';
import { COUNT_COLUMNS, type DirectiveRow } from './rows.js';

const DEFER = 'INSERT INTO kept_counters_deferred (node_id) SELECT value FROM json_each(?) WHERE true ON CONFLICT DO NOTHING';
const UNDEFER = 'DELETE FROM kept_counters_deferred';
const KEPT_OF = 'SELECT node_id, class, mode FROM kept_nodes WHERE node_id IN (SELECT value FROM json_each(?))';
const ADD_DIRECTIVES = `INSERT INTO kept_directives (rule_id, directive_id, class, mode, nodes, ${COUNT_COLUMNS.join(', ')})
  SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, value ->> 4, ${COUNT_COLUMNS.map((_, i) => `value ->> ${i + 5}`).join(', ')}
  FROM json_each(?) WHERE true
  ON CONFLICT (rule_id, directive_id, class, mode) DO UPDATE SET nodes = nodes + excluded.nodes, ${COUNT_COLUMNS.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')}`;
const ADD_RULES = `INSERT INTO kept_rules (rule_id, class, nodes) SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?) WHERE true
  ON CONFLICT (rule_id, class) DO UPDATE SET nodes = nodes + excluded.nodes`;

/**
 * Every row of the nodes named (a JSON array of ids) counted (`sign` 1) or taken (-1) under its
 * node's kept class and mode as they are, summed by key in SQL: for nodes whose rows the writer
 * does not hold, read before any write and again after the last.
 */
const MOVE_DIRECTIVES = (sign: 1 | -1) => `INSERT INTO kept_directives (rule_id, directive_id, class, mode, nodes, ${COUNT_COLUMNS.join(', ')})
  SELECT d.rule_id, d.directive_id, k.class, k.mode, ${sign} * count(*), ${COUNT_COLUMNS.map((c) => `${sign} * sum(d.${c})`).join(', ')}
  FROM json_each(?) j CROSS JOIN node_compliance_directives d ON d.node_id = j.value JOIN kept_nodes k ON k.node_id = d.node_id
  WHERE true GROUP BY d.rule_id, d.directive_id, k.class, k.mode
  ON CONFLICT (rule_id, directive_id, class, mode) DO UPDATE SET nodes = nodes + excluded.nodes, ${COUNT_COLUMNS.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')}`;
const MOVE_RULES = (sign: 1 | -1) => `INSERT INTO kept_rules (rule_id, class, nodes)
  SELECT d.rule_id, k.class, ${sign} * count(DISTINCT d.node_id)
  FROM json_each(?) j CROSS JOIN node_compliance_directives d ON d.node_id = j.value JOIN kept_nodes k ON k.node_id = d.node_id
  WHERE true GROUP BY d.rule_id, k.class
  ON CONFLICT (rule_id, class) DO UPDATE SET nodes = nodes + excluded.nodes`;

type Kept = Map<string, { class: string; mode: number }>;

/** Counter moves summed by key: per key, its columns, then the node count and the counts. */
class Sums {
  private readonly rows = new Map<string, { key: Array<string | number>; sums: number[] }>();

  constructor(private readonly counts: boolean) {}

  /** A node counted (`sign` 1) or taken (-1) under `key`, with its counts when the counter has them. */
  add(key: Array<string | number>, sign: number, counts?: (i: number) => number): void {
    const k = key.join('\u0000');
    let row = this.rows.get(k);
    if (!row) this.rows.set(k, (row = { key, sums: new Array<number>(this.counts ? COUNT_COLUMNS.length + 1 : 1).fill(0) }));
    row.sums[0]! += sign;
    if (counts && this.counts) for (let i = 0; i < COUNT_COLUMNS.length; i++) row.sums[i + 1]! += sign * counts(i);
  }

  /**
   * The moves as JSON rows for a statement, or null when none moves: a key taken and added back
   * alike moves nothing (its counter row is there, and stays as it is).
   */
  json(): string | null {
    const rows = [...this.rows.values()].filter((r) => r.sums.some((v) => v !== 0)).map((r) => [...r.key, ...r.sums]);
    return rows.length ? JSON.stringify(rows) : null;
  }
}

/** A node's rows before the writes (as read: rule, directive, then the counts in COUNT_COLUMNS' order) and after them. */
export interface NodeRows {
  nodeId: string;
  before: readonly unknown[][];
  after: readonly DirectiveRow[];
}

/**
 * Started (inside the writer's transaction) before any of the nodes' rows is written; `finish`
 * after the last. The writer gives `finish` the rows before and after of each node it named,
 * except those of `whole` (among them): a node whose rows the writer holds only in part (a list
 * that only adds reads only the rows that gain components) has all its rows moved in SQL, taken
 * here and counted again in `finish`.
 */
export class BatchCounters {
  private readonly before: Kept;
  private readonly ids: string;
  private readonly whole: string | null;

  constructor(private readonly db: SqliteDb, nodeIds: Iterable<string>, whole: readonly string[] = []) {
    this.ids = JSON.stringify([...nodeIds]);
    this.db.stmt(DEFER).run(this.ids);
    this.before = this.kept();
    this.whole = whole.length ? JSON.stringify(whole) : null;
    if (this.whole) this.moveWhole(-1);
  }

  /** The counters moved for `nodes` (the nodes named at the start, each once, but those moved whole), and the names dropped. */
  finish(nodes: Iterable<NodeRows>): void {
    const after = this.kept();
    const directives = new Sums(true);
    const rules = new Sums(false);
    for (const node of nodes) {
      const b = this.before.get(node.nodeId);
      if (b) {
        for (const r of node.before) directives.add([r[0] as string, r[1] as string, b.class, b.mode], -1, (i) => Number(r[i + 2]));
        for (const rule of new Set(node.before.map((r) => r[0] as string))) rules.add([rule, b.class], -1);
      }
      const a = after.get(node.nodeId);
      if (a) {
        for (const d of node.after) directives.add([d.rule_id, d.directive_id, a.class, a.mode], 1, (i) => d.counts[COUNT_COLUMNS[i]!]);
        for (const rule of new Set(node.after.map((d) => d.rule_id))) rules.add([rule, a.class], 1);
      }
    }
    const moved = directives.json();
    if (moved) this.db.stmt(ADD_DIRECTIVES).run(moved);
    const ruled = rules.json();
    if (ruled) this.db.stmt(ADD_RULES).run(ruled);
    if (this.whole) this.moveWhole(1);
    this.db.stmt(UNDEFER).run();
  }

  private moveWhole(sign: 1 | -1): void {
    this.db.stmt(MOVE_DIRECTIVES(sign)).run(this.whole);
    this.db.stmt(MOVE_RULES(sign)).run(this.whole);
  }

  private kept(): Kept {
    const out: Kept = new Map();
    for (const r of this.db.stmt(KEPT_OF).all(this.ids) as Array<{ node_id: string; class: string; mode: number }>) out.set(r.node_id, { class: r.class, mode: r.mode });
    return out;
  }
}

/** The nodes (a JSON array of ids) with what a membership of each counts: the node's class, and its kept class, mode and compliance counts if kept. */
const MEMBER_NODES = `SELECT n.id AS node_id, ${sClassRow('n')} AS node_class, k.class, k.mode, t.node_id IS NOT NULL AS counted, ${COUNT_COLUMNS.map((c) => `t.${c}`).join(', ')}
  FROM json_each(?) j JOIN nodes n ON n.id = j.value LEFT JOIN kept_nodes k ON k.node_id = n.id LEFT JOIN node_compliance t ON t.node_id = k.node_id`;
const ADD_GROUPS = `INSERT INTO kept_groups (group_id, class, mode, nodes, ${COUNT_COLUMNS.join(', ')})
  SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3, ${COUNT_COLUMNS.map((_, i) => `value ->> ${i + 4}`).join(', ')}
  FROM json_each(?) WHERE true
  ON CONFLICT (group_id, class, mode) DO UPDATE SET nodes = nodes + excluded.nodes, ${COUNT_COLUMNS.map((c) => `${c} = ${c} + excluded.${c}`).join(', ')}`;

/**
 * `write` (inside the writer's transaction) taking the memberships `removed` and adding `added`
 * ([group, node] pairs), with the group counters moved once per key for all of them, as migration
 * 25's triggers count each membership: the node's class at mode -1, and its compliance row under
 * its kept class and mode. Each node is read once, after the writes (a membership moves none of
 * what it counts); a pair whose node is gone counts nothing (its insert wrote nothing).
 */
export function withMembersCounted(db: SqliteDb, removed: ReadonlyArray<readonly [string, string]>, added: ReadonlyArray<readonly [string, string]>, write: () => void): void {
  const ids = JSON.stringify([...new Set([...removed, ...added].map(([, node]) => node))]);
  db.stmt(DEFER).run(ids);
  write();
  type Node = { node_id: string; node_class: string; class: string | null; mode: number | null; counted: number; [count: string]: unknown };
  const nodes = new Map((db.stmt(MEMBER_NODES).all(ids) as Node[]).map((r) => [r.node_id, r]));
  const groups = new Sums(true);
  for (const [pairs, sign] of [[removed, -1], [added, 1]] as const) {
    for (const [group, id] of pairs) {
      const node = nodes.get(id);
      if (!node) continue;
      groups.add([group, node.node_class, -1], sign);
      if (node.class !== null && node.mode !== null && node.counted) groups.add([group, node.class, node.mode], sign, (i) => Number(node[COUNT_COLUMNS[i]!]));
    }
  }
  const moved = groups.json();
  if (moved) db.stmt(ADD_GROUPS).run(moved);
  db.stmt(UNDEFER).run();
}
