/**
 * What a generation's batch of policies does to its nodes' expectations and compliance on
 * PostgreSQL, set-based: for a chunk of nodes, one statement stores the expectations, drops those
 * of configs no longer kept, moves the nodes' policy config ids and tells which nodes already
 * had these very expectations; one reads the compliance rows of the nodes to recompute; one moves
 * the time marks of those whose rows stay the same; then the batch write of postgres-batch.ts for
 * the others (compliance rows, findings, per-directive rows). Per node, the
 * same decisions as PostgresCompliance.expectationsTx, which took about ten round trips each.
 *
 * The caller holds every node's row lock, gives each node at most once, and has stored the
 * nodes' expectation lists (storeLists).
 */
import type pg from 'pg';
import { iso } from '../postgres/db.js';
import { pick, unnestOf } from '../postgres/arrays.js';
import type { EventInsert } from '../events/types.js';
import type { RunSummaryOutcome } from '../runs/types.js';
import { COUNT_COLUMNS, DIRECTIVE_ROW_COLUMNS, epochS, findingContext, listDelta, marksFromRow, nextMarks, sameRowsUnder, type ComplianceInput, type ComplianceRows, type DirectiveRow } from './rows.js';
import { countsWithAdditions, directiveRowsOf, listAdditions, rowsWithAdditions, type DirectiveAddition } from './additions.js';
import { version, writeComplianceMany, type BatchDeps } from './postgres-batch.js';
import type { CheckedExpectations } from '../input.js';
import type { ExpectedComponent } from './types.js';
import { ExpectationListCache } from './lists.js';
import { RunJudge } from './judged.js';

/** One node's new policy in a chunk: its config id, the one it had (null: none), and what it is now expected to report. */
export interface PolicyExpectation {
  nodeId: string;
  configId: string;
  previous: string | null;
  when: string;
  expected: CheckedExpectations;
}

/**
 * The expectations written (`$6` the digests of the chunk's lists, stored by storeLists before
 * the transaction; `list` is the 1-based index of a node's), the configs other than this one and
 * the previous policy's dropped; the node rows pointed at their new config (only where it moves:
 * no dead tuple for the same); and for every node, whether its stored expectations for this
 * config were already the same list, whether it has a compliance row, and the digest of the list
 * stored for the config kept beside it (`keep`: the previous policy's when it had one, what its
 * directive rows were counted against). Every CTE sees the rows as they were before the statement.
 */
const EXPECTATIONS_SQL = `WITH v AS (SELECT v.node_id, v.config_id, v.set_at, v.keep, ($6::text[])[v.list] AS list
      FROM ${unnestOf(['text', 'text', 'timestamptz', 'int', 'text'])} AS v(node_id, config_id, set_at, list, keep)),
    same AS (SELECT v.node_id FROM v JOIN node_expectations e ON e.node_id = v.node_id AND e.config_id = v.config_id WHERE e.list = v.list),
    prior AS (SELECT v.node_id, e.list FROM v JOIN node_expectations e ON e.node_id = v.node_id AND e.config_id = v.keep),
    put AS (INSERT INTO node_expectations (node_id, config_id, set_at, list) SELECT node_id, config_id, set_at, list FROM v
      ON CONFLICT (node_id, config_id) DO UPDATE SET set_at = excluded.set_at, list = excluded.list),
    dropped AS (DELETE FROM node_expectations e USING v
      WHERE e.node_id = v.node_id AND e.config_id <> v.config_id AND e.config_id <> v.keep),
    moved AS (UPDATE nodes n SET policy_config_id = v.config_id FROM v WHERE n.id = v.node_id AND n.policy_config_id IS DISTINCT FROM v.config_id)
  SELECT v.node_id, same.node_id IS NOT NULL AS same, x.node_id IS NOT NULL AS present, prior.list AS prior FROM v
    LEFT JOIN same ON same.node_id = v.node_id LEFT JOIN prior ON prior.node_id = v.node_id LEFT JOIN node_compliance x ON x.node_id = v.node_id`;

/** Expectation lists parsed, by digest: a digest names one content whatever the schema, so one cache serves every store. */
const LISTS = new ExpectationListCache();

/** The lists named `digests`, parsed (each read once while the cache keeps it); a digest no list has is left out. */
async function listsOf(d: Pick<BatchDeps, 'db'>, c: pg.PoolClient, digests: Iterable<string>): Promise<Map<string, ExpectedComponent[]>> {
  const wanted = [...new Set(digests)];
  const missing = wanted.filter((k) => !LISTS.has(k));
  const read = new Map<string, string>();
  if (missing.length > 0) {
    const { rows } = await d.db.query<{ digest: string; components: string }>('setExpectations', c, {
      name: 'expectation_lists_read', text: 'SELECT digest, components::text AS components FROM expectation_lists WHERE digest = ANY($1::text[])', values: [missing],
    });
    for (const r of rows) read.set(r.digest, r.components);
  }
  const out = new Map<string, ExpectedComponent[]>();
  for (const k of wanted) {
    const list = LISTS.get(k, () => read.get(k));
    if (list) out.set(k, list);
  }
  return out;
}

/**
 * Lists about to be named, brought within the hour of use before they are (migration 30): a list
 * the sweep is deleting is waited for and then inserted again, and one it has not reached is
 * out of its reach (it deletes lists unused for two hours) until this transaction commits.
 */
const TOUCH_LISTS = `UPDATE expectation_lists SET used_at = now() WHERE digest = ANY($1::text[]) AND used_at < now() - interval '1 hour'`;

export async function touchLists(d: Pick<BatchDeps, 'db'>, c: pg.PoolClient, digests: string[]): Promise<void> {
  await d.db.query('setExpectations', c, { name: 'expectation_lists_touch', text: TOUCH_LISTS, values: [digests] });
}

/**
 * A generation's lists stored, or taken back into use as TOUCH_LISTS does, each in digest order
 * and committed on its own before the batch's transaction starts. Inside it, two batches written
 * at once (or two servers' generations) that both insert a new list would each wait for the
 * other's commit, and with two such lists in opposite orders, deadlock. A list stored here and
 * then not used (the transaction failed) is deleted by the sweep like any unused list.
 */
const STORE_LISTS = `INSERT INTO expectation_lists AS l (digest, components, used_at)
    SELECT u.digest, u.components, now() FROM unnest($1::text[], $2::jsonb[]) AS u(digest, components) ORDER BY u.digest
  ON CONFLICT (digest) DO UPDATE SET used_at = now() WHERE l.used_at < now() - interval '1 hour'`;

export async function storeLists(d: Pick<BatchDeps, 'db'>, lists: ReadonlyMap<string, string>): Promise<void> {
  if (lists.size === 0) return;
  const digests = [...lists.keys()].sort();
  await d.db.query('setExpectations', d.db.pool, { name: 'expectation_lists_store', text: STORE_LISTS, values: [digests, digests.map((k) => lists.get(k)!)] });
}

/** The compliance rows of the nodes to recompute, as PostgresCompliance.expectationsTx reads one. */
const CURRENT_SQL = `SELECT node_id, run_id, run_started_at, run_started_utc, config_id, outcomes, outcomes_packed,
    applying_since_s, answered_s, keep_last_s, runs_seen, ${COUNT_COLUMNS.join(', ')}
  FROM node_compliance WHERE node_id = ANY($1::text[])`;

/**
 * Only the time marks of nodes whose compliance stays what it was (marksOnly below), with each
 * row's version before and after (the directive cache's entry of its rows moves with it).
 */
const MARKS_SQL = `WITH u AS (UPDATE node_compliance x SET computed_at = v.computed_at, applying_since_s = v.applying_since_s,
      answered_s = v.answered_s, keep_last_s = v.keep_last_s
    FROM ${unnestOf(['text', 'timestamptz', 'bigint', 'bigint', 'integer'])} AS v(node_id, computed_at, applying_since_s, answered_s, keep_last_s)
    WHERE x.node_id = v.node_id RETURNING x.node_id, ${version('x')} AS version)
  SELECT u.node_id, ${version('o')} AS version, u.version AS new_version FROM u JOIN node_compliance o ON o.node_id = u.node_id`;

/**
 * A compliance row failing nowhere, whose outcomes are packed (or none): rows that stay the same
 * or are made from the stored ones open or close no finding, and leave the outcomes as they are.
 */
const quiet = (cur: Record<string, unknown>) => Number(cur.error) + Number(cur.non_compliant) === 0
  && !(cur.outcomes_packed === null && !(Array.isArray(cur.outcomes) && cur.outcomes.length === 0));

/**
 * A node whose compliance row a new policy changes only in its time marks, as on SQLite: its
 * directive rows were counted from its last run against the list `prior` names, and the new list
 * is that list, or one whose other components the run reported on none of (rows.ts
 * sameRowsUnder), so the same rows and totals come out; it fails nowhere, so no finding opens or
 * closes; and its outcomes are packed (or there are none), as the full write would leave them.
 */
function marksOnly(cur: Record<string, unknown> | undefined, prior: string | undefined, it: PolicyExpectation, counted: ReadonlyMap<string, ExpectedComponent[]>,
  outcomesOf: (cur: Record<string, unknown>) => RunSummaryOutcome[]): boolean {
  if (cur === undefined || prior === undefined || !quiet(cur)) return false;
  if (prior === it.expected.digest) return true;
  const before = counted.get(prior);
  if (before === undefined) return false;
  // Lists whose difference can move rows whatever the run reported (one that only adds, say) are
  // told apart without unpacking it.
  const delta = listDelta(before, it.expected.items);
  return delta !== null && sameRowsUnder(delta.size === 0 || cur.run_id === null ? [] : outcomesOf(cur), delta);
}

/**
 * The stored rows of some directives of some nodes ([node, rule, directive] as three arrays), each
 * found by the primary key (additions.ts reads them as arrays in DIRECTIVE_ROW_COLUMNS order).
 */
const STORED_ROWS_SQL = `SELECT d.node_id, ${DIRECTIVE_ROW_COLUMNS.map((col) => `d.${col}`).join(', ')}
  FROM unnest($1::text[], $2::text[], $3::text[]) AS k(node_id, rule_id, directive_id)
  JOIN node_compliance_directives d ON d.node_id = k.node_id AND d.rule_id = k.rule_id AND d.directive_id = k.directive_id`;

/**
 * For each node failing nowhere, with a run whose outcomes are packed (or none), whose new list
 * only adds components to the one its rows were counted against: the rows of the directives
 * that gain components made from the stored ones (additions.ts), with those stored rows, and its
 * counts from its stored ones; absent where the run must be judged. Its other rows stay as they
 * are: only these are read and written (the kept counters move with the node row's trigger).
 */
async function madeFromStored(d: BatchDeps, c: pg.PoolClient, whole: readonly PolicyExpectation[], current: ReadonlyMap<string, Record<string, unknown>>,
  prior: ReadonlyMap<string, string>, counted: ReadonlyMap<string, ExpectedComponent[]>) {
  const adding = new Map<string, ReadonlyMap<string, DirectiveAddition>>();
  for (const it of whole) {
    const cur = current.get(it.nodeId);
    const before = counted.get(prior.get(it.nodeId) ?? '');
    if (cur === undefined || cur.run_id === null || before === undefined || !quiet(cur)) continue;
    const added = listAdditions(before, it.expected.items);
    if (added !== null && added.size > 0) adding.set(it.nodeId, added);
  }
  const made = new Map<string, { rows: ComplianceRows; stored: DirectiveRow[] }>();
  if (adding.size === 0) return made;
  const stored = new Map<string, unknown[][]>();
  const keys = [...adding].flatMap(([nodeId, added]) => [...added.values()].map((a) => [nodeId, a.rule_id, a.directive_id] as const));
  const { rows } = await d.db.query<Record<string, unknown>>('setExpectations', c, {
    name: 'compliance_directives_stored_of', text: STORED_ROWS_SQL, values: [keys.map((k) => k[0]), keys.map((k) => k[1]), keys.map((k) => k[2])],
  });
  for (const r of rows) {
    let list = stored.get(r.node_id as string);
    if (!list) stored.set(r.node_id as string, (list = []));
    list.push(DIRECTIVE_ROW_COLUMNS.map((col) => r[col]));
  }
  for (const [nodeId, added] of adding) {
    const mine = stored.get(nodeId) ?? [];
    const directives = rowsWithAdditions(mine, added);
    if (directives === null) continue;
    made.set(nodeId, { rows: { items: [], counts: countsWithAdditions(current.get(nodeId)!, added), directives }, stored: directiveRowsOf(mine) });
  }
  return made;
}

/**
 * A chunk of policies' expectations stored and their nodes' compliance recomputed where the
 * per-node path would: a node is left alone only when it has a compliance row and the same
 * policy is written again with the same expectations, and only its time marks move when its
 * rows stay the same (marksOnly); a node whose new list only adds components has its rows made
 * from the stored ones where it can (madeFromStored). The events go to `sink`, in the chunk's
 * order. Runs reported the same are unpacked and judged once by `runs` (judged.ts; the caller
 * gives one for its whole write). Returns how many nodes were recomputed.
 */
export async function policyExpectationsMany(d: BatchDeps, c: pg.PoolClient, items: readonly PolicyExpectation[], sink: EventInsert[], runs = new RunJudge()): Promise<number> {
  if (items.length === 0) return 0;
  const what = 'setExpectations';
  // Each distinct list once (a generation's nodes share a handful of them), stored already.
  const lists = new Map<string, number>();
  for (const it of items) if (!lists.has(it.expected.digest)) lists.set(it.expected.digest, lists.size + 1);
  // Their directive rows' entries stay: versioned by the compliance row, they are replaced or moved below.
  for (const it of items) d.cache.forgetExpectations(it.nodeId);
  const { rows } = await d.db.query<{ node_id: string; same: boolean; present: boolean; prior: string | null }>(what, c, {
    name: 'expectations_put_batch',
    text: EXPECTATIONS_SQL,
    values: [pick(items, (it) => it.nodeId), pick(items, (it) => it.configId), pick(items, (it) => it.when),
      pick(items, (it) => lists.get(it.expected.digest)!), pick(items, (it) => it.previous ?? it.configId), [...lists.keys()]],
  });
  const unchanged = new Set(rows.filter((r) => r.same && r.present).map((r) => r.node_id));
  // What each node's directive rows were counted against (its previous policy's list, when it had
  // one): its rows are then known without a read.
  const hadPolicy = new Set(items.filter((it) => it.previous !== null).map((it) => it.nodeId));
  const prior = new Map(rows.filter((r) => r.present && r.prior !== null && hadPolicy.has(r.node_id)).map((r) => [r.node_id, r.prior!]));
  // Judged by its current policy: nothing to recompute when the same policy is written again.
  const todo = items.filter((it) => !(it.previous === it.configId && unchanged.has(it.nodeId)));
  if (todo.length === 0) return 0;
  const current = new Map<string, Record<string, unknown>>();
  for (const r of (await d.db.query<Record<string, unknown>>(what, c, { name: 'compliance_current_batch', text: CURRENT_SQL, values: [pick(todo, (it) => it.nodeId)] })).rows) {
    current.set(r.node_id as string, r);
  }
  const marksOf = (it: PolicyExpectation) => {
    const cur = current.get(it.nodeId);
    const hasRun = cur !== undefined && cur.run_id !== null;
    return nextMarks(marksFromRow(cur), {
      kind: 'policy', at_s: epochS(it.when), config_id: it.configId, previous_config_id: it.previous, run_config_id: hasRun ? (cur.config_id as string | null) : null,
    });
  };
  const counted = await listsOf(d, c, todo.flatMap((it) => (prior.has(it.nodeId) ? [prior.get(it.nodeId)!] : [])));
  // Most nodes of a generation whose templates moved only values: the same components, the same rows.
  // A node's outcomes unpacked once: looked at to see whether its rows stay, then judged when they
  // do not; and the same outcomes of other nodes unpacked and judged once (judged.ts).
  const unpacked = new Map<string, RunSummaryOutcome[]>();
  const outcomesOf = (cur: Record<string, unknown>) => {
    let o = unpacked.get(cur.node_id as string);
    if (o === undefined) unpacked.set(cur.node_id as string, (o = runs.outcomes(cur.node_id as string, cur.outcomes_packed, cur.outcomes)));
    return o;
  };
  const moving = todo.filter((it) => marksOnly(current.get(it.nodeId), prior.get(it.nodeId), it, counted, outcomesOf));
  if (moving.length > 0) {
    const marks = moving.map(marksOf);
    const { rows: moved } = await d.db.query<{ node_id: string; version: string; new_version: string }>(what, c, {
      name: 'compliance_marks_batch', text: MARKS_SQL,
      values: [pick(moving, (it) => it.nodeId), pick(moving, (it) => it.when), pick(marks, (m) => m.applying_since_s), pick(marks, (m) => m.answered_s), pick(marks, (m) => m.keep_last_s)],
    });
    for (const r of moved) d.cache.moveRows(r.node_id, r.version, r.new_version);
  }
  const still = new Set(moving.map((it) => it.nodeId));
  const whole = todo.filter((it) => !still.has(it.nodeId));
  const made = await madeFromStored(d, c, whole, current, prior, counted);
  await writeComplianceMany(d, c, whole.map((it) => {
    const cur = current.get(it.nodeId);
    const hasRun = cur !== undefined && cur.run_id !== null;
    const marks = marksOf(it);
    const mine = made.get(it.nodeId);
    const input: ComplianceInput = hasRun
      ? {
        nodeId: it.nodeId,
        run: { id: Number(cur.run_id), started_at: cur.run_started_at as string, started_utc: iso(cur.run_started_utc)!, config_id: cur.config_id as string | null },
        // Rows made from the stored ones: the outcomes stay packed (the row keeps them).
        outcomes: mine ? [] : outcomesOf(cur),
        ...(cur.outcomes_packed ? { outcomesPacked: cur.outcomes_packed as Buffer } : {}),
        expected: it.expected.items,
        marks,
      }
      : { nodeId: it.nodeId, run: null, outcomes: [], expected: it.expected.items, marks };
    // The node's cache entries were dropped above: its rows are those its run counts against the
    // list of its previous policy when that is stored; else every row is written, the rest pruned.
    const countedFrom = counted.get(prior.get(it.nodeId) ?? '');
    // Its run's packed outcomes stay where they are: the same run is judged again.
    return { input, at: it.when, version: undefined, ...(countedFrom && { countedFrom }), ...(mine && { made: mine }), f: findingContext(cur, null, it.when, []), sink,
      outcomesStored: input.outcomesPacked !== undefined };
  }), runs);
  return todo.length;
}
