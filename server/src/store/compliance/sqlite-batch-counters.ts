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

type Kept = Map<string, { class: string; mode: number }>;

/** A node's rows before the writes (as read: rule, directive, then the counts in COUNT_COLUMNS' order) and after them. */
export interface NodeRows {
  nodeId: string;
  before: readonly unknown[][];
  after: readonly DirectiveRow[];
}

/** Started (inside the writer's transaction) before any of the nodes' rows is written; `finish` after the last. */
export class BatchCounters {
  private readonly before: Kept;
  private readonly ids: string;

  constructor(private readonly db: SqliteDb, nodeIds: Iterable<string>) {
    this.ids = JSON.stringify([...nodeIds]);
    this.db.stmt(DEFER).run(this.ids);
    this.before = this.kept();
  }

  /** The counters moved for `nodes` (the nodes named at the start, each once), and the names dropped. */
  finish(nodes: Iterable<NodeRows>): void {
    const after = this.kept();
    const directives = new Map<string, number[]>();
    const rules = new Map<string, number>();
    const n = COUNT_COLUMNS.length;
    const count = (k: { class: string; mode: number }, rule: string, directive: string, sign: number, counts: (i: number) => number) => {
      const key = JSON.stringify([rule, directive, k.class, k.mode]);
      let sums = directives.get(key);
      if (!sums) directives.set(key, (sums = new Array<number>(n + 1).fill(0)));
      sums[0]! += sign;
      for (let i = 0; i < n; i++) sums[i + 1]! += sign * counts(i);
    };
    const rule = (cls: string, ids: Iterable<string>, sign: number) => {
      for (const r of new Set(ids)) {
        const key = JSON.stringify([r, cls]);
        rules.set(key, (rules.get(key) ?? 0) + sign);
      }
    };
    for (const node of nodes) {
      const b = this.before.get(node.nodeId);
      if (b) {
        for (const r of node.before) count(b, r[0] as string, r[1] as string, -1, (i) => Number(r[i + 2]));
        rule(b.class, node.before.map((r) => r[0] as string), -1);
      }
      const a = after.get(node.nodeId);
      if (a) {
        for (const d of node.after) count(a, d.rule_id, d.directive_id, 1, (i) => d.counts[COUNT_COLUMNS[i]!]);
        rule(a.class, node.after.map((d) => d.rule_id), 1);
      }
    }
    // A key taken and added back alike moves nothing: its counter row is there, and stays as it is.
    const moved = [...directives].filter(([, sums]) => sums.some((v) => v !== 0)).map(([key, sums]) => [...(JSON.parse(key) as unknown[]), ...sums]);
    const ruled = [...rules].filter(([, v]) => v !== 0).map(([key, v]) => [...(JSON.parse(key) as unknown[]), v]);
    if (moved.length) this.db.stmt(ADD_DIRECTIVES).run(JSON.stringify(moved));
    if (ruled.length) this.db.stmt(ADD_RULES).run(JSON.stringify(ruled));
    this.db.stmt(UNDEFER).run();
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
  type Node = { node_id: string; node_class: string; class: string | null; mode: number | null; counted: number } & Record<string, number>;
  const nodes = new Map((db.stmt(MEMBER_NODES).all(ids) as Node[]).map((r) => [r.node_id, r]));
  const n = COUNT_COLUMNS.length;
  const groups = new Map<string, number[]>();
  const add = (key: unknown[], sign: number, counts: ((i: number) => number) | null) => {
    const k = JSON.stringify(key);
    let sums = groups.get(k);
    if (!sums) groups.set(k, (sums = new Array<number>(n + 1).fill(0)));
    sums[0]! += sign;
    if (counts) for (let i = 0; i < n; i++) sums[i + 1]! += sign * counts(i);
  };
  for (const [pairs, sign] of [[removed, -1], [added, 1]] as const) {
    for (const [group, id] of pairs) {
      const node = nodes.get(id);
      if (!node) continue;
      add([group, node.node_class, -1], sign, null);
      if (node.class !== null && node.counted) add([group, node.class, node.mode], sign, (i) => node[COUNT_COLUMNS[i]!]!);
    }
  }
  const moved = [...groups].filter(([, sums]) => sums.some((v) => v !== 0)).map(([key, sums]) => [...(JSON.parse(key) as unknown[]), ...sums]);
  if (moved.length) db.stmt(ADD_GROUPS).run(JSON.stringify(moved));
  db.stmt(UNDEFER).run();
}
