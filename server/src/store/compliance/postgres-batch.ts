/**
 * What a batch of stored runs does to their nodes' compliance on PostgreSQL, one statement per
 * table for the whole batch instead of several per run: the steady-state update (same config,
 * same outcomes: only the base run moves) for every complete run at once, the expectations of the
 * nodes to recompute read at once (from memory when the row has not changed, see
 * directive-cache.ts), then their node rows, their per-directive rows (the kept counters'
 * statement triggers then fire once per batch; only the rows whose counts moved when the cache
 * holds what the node's rows are, see directive-cache.ts) and the answer marks of the rest.
 * Findings are reconciled for the nodes failing before or now, in a few statements for them all.
 *
 * The caller holds every node's row lock and gives each node at most once: the same decisions as
 * PostgresCompliance.runStored taken run by run, in one transaction.
 */
import { createHash } from 'node:crypto';
import type pg from 'pg';
import { iso, type PostgresDb } from '../postgres/db.js';
import { pick, unnestOf } from '../postgres/arrays.js';
import type { PostgresFindings } from '../findings/postgres.js';
import type { EventInsert } from '../events/types.js';
import type { NodeRecord } from '../nodes/types.js';
import { UNPACKED_PLACEHOLDER, packedOrNull, runOutcomes } from '../runs/outcomes.js';
import type { RunInsert } from '../runs/types.js';
import { complianceRows, COUNT_COLUMNS, epochS, findingContext, marksFromRow, nextMarks, type ComplianceInput, type ComplianceRows, type DirectiveRow, type FindingContext } from './rows.js';
import type { DirectiveCache } from './directive-cache.js';
import type { ExpectedComponent } from './types.js';
import type { RunJudge } from './judged.js';

/** One stored run, as the batch hands it over. */
export interface StoredRun {
  node: NodeRecord;
  run: RunInsert;
  id: number;
  startedUtc: string;
  receivedAt: string;
  packed: Buffer;
  /** Where this run's events go. */
  sink: EventInsert[];
}

export interface BatchDeps {
  db: PostgresDb;
  findings: PostgresFindings;
  cache: DirectiveCache;
}

type Row = Record<string, unknown>;

/** A row's version (directive-cache.ts), as SQL over the table aliased `t`. */
export const version = (t: string) => `${t}.xmin::text || '/' || ${t}.ctid::text`;

/**
 * The steady-state update for every complete run, and the rows as they were before it. Outcomes
 * are compared by their SHA-256 (the run's computed here): the packed bytes are ~2.5 KB a run,
 * sent twice in hex otherwise. The comparison is written `(…) IS TRUE` so that it is no join key:
 * as an equality the planner may hash on it, and on a table small enough to be read whole (a
 * few thousand nodes) it then hashed every node's outcomes for each batch, where only the
 * batch's rows, joined by node, need theirs.
 */
export const SAME_SQL = `WITH v AS (SELECT * FROM ${unnestOf(['text', 'bigint', 'text', 'timestamptz', 'timestamptz', 'text', 'bytea', 'bigint'])}
      AS v(node_id, run_id, started_at, started_utc, computed_at, config_id, digest, received_s)),
    u AS (UPDATE node_compliance x SET run_id = v.run_id, run_started_at = v.started_at, run_started_utc = v.started_utc,
        computed_at = v.computed_at, answered_s = GREATEST(coalesce(x.answered_s, 0), v.received_s), runs_seen = x.runs_seen + 1
      FROM v WHERE x.node_id = v.node_id AND x.run_id IS NOT NULL AND x.run_started_utc <= v.started_utc
        AND x.config_id IS NOT DISTINCT FROM v.config_id AND (sha256(x.outcomes_packed) = v.digest) IS TRUE AND x.runs_seen > 0
      RETURNING x.node_id, ${version('x')} AS version)
  SELECT v.node_id, u.node_id IS NOT NULL AS updated, ${version('x')} AS version, u.version AS new_version, x.node_id IS NOT NULL AS present, x.run_started_utc AS started,
    x.applying_since_s, x.answered_s, x.keep_last_s, x.run_id, x.run_started_utc, x.runs_seen, x.error, x.non_compliant
  FROM v LEFT JOIN u ON u.node_id = v.node_id LEFT JOIN node_compliance x ON x.node_id = v.node_id`;

/**
 * The expectations of (node, config) pairs with their row version; the components only where the
 * version differs from the one given (`known`, what the cache holds).
 */
const EXPECTATIONS_SQL = `SELECT k.node_id, e.set_at, l.version,
    CASE WHEN l.version IS DISTINCT FROM k.known THEN (SELECT x.components::text FROM expectation_lists x WHERE x.digest = e.list) END AS components
  FROM ${unnestOf(['text', 'text', 'text'])} AS k(node_id, config_id, known)
  JOIN node_expectations e ON e.node_id = k.node_id AND e.config_id = k.config_id
  CROSS JOIN LATERAL (SELECT e.xmin::text || '/' || e.ctid::text AS version) l`;

const ANSWERED_SQL = `WITH u AS (UPDATE node_compliance x SET answered_s = GREATEST(coalesce(x.answered_s, 0), v.received_s)
    FROM ${unnestOf(['text', 'bigint'])} AS v(node_id, received_s) WHERE x.node_id = v.node_id RETURNING x.node_id, ${version('x')} AS version)
  SELECT u.node_id, ${version('o')} AS version, u.version AS new_version FROM u JOIN node_compliance o ON o.node_id = u.node_id`;

const UPSERT_SQL = `INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected,
    computed_at, outcomes, outcomes_packed, applying_since_s, answered_s, keep_last_s, runs_seen, ${COUNT_COLUMNS.join(', ')})
  SELECT v.node_id, v.run_id, v.run_started_at, v.run_started_utc, v.config_id, v.expected, v.computed_at, '${UNPACKED_PLACEHOLDER}'::jsonb,
    v.outcomes_packed, v.applying_since_s, v.answered_s, v.keep_last_s, v.runs_seen, ${COUNT_COLUMNS.map((c) => `v.${c}`).join(', ')}
  FROM ${unnestOf(['text', 'bigint', 'text', 'timestamptz', 'text', 'boolean', 'timestamptz', 'bytea', 'bigint', 'bigint', 'integer', 'bigint', ...COUNT_COLUMNS.map(() => 'integer')])}
    AS v(node_id, run_id, run_started_at, run_started_utc, config_id, expected, computed_at, outcomes_packed, applying_since_s, answered_s,
      keep_last_s, runs_seen, ${COUNT_COLUMNS.join(', ')})
  ON CONFLICT (node_id) DO UPDATE SET run_id = excluded.run_id, run_started_at = excluded.run_started_at,
    run_started_utc = excluded.run_started_utc, config_id = excluded.config_id, expected = excluded.expected,
    computed_at = excluded.computed_at, outcomes = excluded.outcomes, outcomes_packed = excluded.outcomes_packed,
    applying_since_s = excluded.applying_since_s, answered_s = excluded.answered_s, keep_last_s = excluded.keep_last_s,
    runs_seen = excluded.runs_seen, ${COUNT_COLUMNS.map((col) => `${col} = excluded.${col}`).join(', ')}
  RETURNING node_id, ${version('node_compliance')} AS version`;

/**
 * UPSERT_SQL's update for rows whose packed outcomes are the ones stored (a new policy judging
 * the same run): everything but the outcomes, so that ~2.5 KB a node is neither sent back nor
 * written again into the table's TOAST (the stored value keeps its place).
 */
const KEEP_OUTCOMES_SQL = `UPDATE node_compliance x SET run_id = v.run_id, run_started_at = v.run_started_at,
    run_started_utc = v.run_started_utc, config_id = v.config_id, expected = v.expected, computed_at = v.computed_at,
    applying_since_s = v.applying_since_s, answered_s = v.answered_s, keep_last_s = v.keep_last_s, runs_seen = v.runs_seen,
    ${COUNT_COLUMNS.map((col) => `${col} = v.${col}`).join(', ')}
  FROM ${unnestOf(['text', 'bigint', 'text', 'timestamptz', 'text', 'boolean', 'timestamptz', 'bigint', 'bigint', 'integer', 'bigint', ...COUNT_COLUMNS.map(() => 'integer')])}
    AS v(node_id, run_id, run_started_at, run_started_utc, config_id, expected, computed_at, applying_since_s, answered_s,
      keep_last_s, runs_seen, ${COUNT_COLUMNS.join(', ')})
  WHERE x.node_id = v.node_id AND x.outcomes_packed IS NOT NULL
  RETURNING x.node_id, ${version('x')} AS version`;

const PRUNE_SQL = `DELETE FROM node_compliance_directives x WHERE x.node_id = ANY($1::text[])
  AND NOT EXISTS (SELECT 1 FROM ${unnestOf(['text', 'text', 'text'], 2)} AS g(node_id, rule_id, directive_id)
    WHERE g.node_id = x.node_id AND g.rule_id = x.rule_id AND g.directive_id = x.directive_id)`;

/** Directive rows gone from nodes whose rows the cache knows: deleted by key. */
const DELETE_SQL = `DELETE FROM node_compliance_directives x USING ${unnestOf(['text', 'text', 'text'])} AS g(node_id, rule_id, directive_id)
  WHERE x.node_id = g.node_id AND x.rule_id = g.rule_id AND x.directive_id = g.directive_id`;

const DIRECTIVES_SQL = `INSERT INTO node_compliance_directives AS x (node_id, rule_id, directive_id, ${COUNT_COLUMNS.join(', ')})
  SELECT * FROM ${unnestOf(['text', 'text', 'text', ...COUNT_COLUMNS.map(() => 'integer')])}
  ON CONFLICT (node_id, rule_id, directive_id) DO UPDATE SET ${COUNT_COLUMNS.map((col) => `${col} = excluded.${col}`).join(', ')}
  WHERE (${COUNT_COLUMNS.map((col) => `x.${col}`).join(', ')}) IS DISTINCT FROM (${COUNT_COLUMNS.map((col) => `excluded.${col}`).join(', ')})`;

/** The batch's stored runs applied to compliance (see the file's comment). */
export async function complianceRunsStored(d: BatchDeps, what: string, c: pg.PoolClient, runs: readonly StoredRun[]): Promise<void> {
  const answered: StoredRun[] = runs.filter((r) => !r.run.complete);
  const complete = runs.filter((r) => r.run.complete);
  const recompute: Array<{ r: StoredRun; row: Row | undefined }> = [];
  if (complete.length > 0) {
    const { rows } = await d.db.query<Row>(what, c, {
      name: 'compliance_same_batch',
      text: SAME_SQL,
      values: [pick(complete, (r) => r.run.node_id), pick(complete, (r) => r.id), pick(complete, (r) => r.run.started_at),
        pick(complete, (r) => r.startedUtc), pick(complete, (r) => r.receivedAt), pick(complete, (r) => r.run.config_id ?? null),
        pick(complete, (r) => createHash('sha256').update(r.packed).digest()), pick(complete, (r) => epochS(r.receivedAt))],
    });
    const byNode = new Map(rows.map((row) => [row.node_id as string, row]));
    for (const r of complete) {
      const row = byNode.get(r.run.node_id)!;
      if (row.updated) {
        // Only the base run moved: the directive rows the cache holds are still the node's.
        d.cache.moveRows(r.run.node_id, row.version as string, row.new_version as string);
        continue;
      }
      // Only the newest complete run decides compliance; a back-filled older one is an answer.
      const prev = row.present ? iso(row.started) : undefined;
      if (prev === undefined || prev === null || prev <= r.startedUtc) recompute.push({ r, row: row.present ? row : undefined });
      else answered.push(r);
    }
  }
  if (recompute.length > 0) {
    const expected = await expectationsOf(d, what, c, recompute.map(({ r }) => r.node));
    await writeComplianceMany(d, c, recompute.map(({ r, row }) => {
      const policy = r.node.policy_config_id;
      const e = policy === null ? undefined : expected.get(r.node.id);
      const receivedS = epochS(r.receivedAt);
      const input: ComplianceInput = {
        nodeId: r.run.node_id,
        run: { id: r.id, started_at: r.run.started_at, started_utc: r.startedUtc, config_id: r.run.config_id ?? null },
        outcomes: runOutcomes(r.run),
        outcomesPacked: r.packed,
        expected: policy === null ? null : e?.components ?? null,
        marks: nextMarks(marksFromRow(row), {
          kind: 'run', received_s: receivedS, run_config_id: r.run.config_id ?? null, policy_config_id: policy, policy_set_s: e?.setS ?? null,
        }),
      };
      return { input, at: r.receivedAt, version: row?.version as string | undefined, f: findingContext(row, { id: r.id, started_utc: r.startedUtc }, r.startedUtc, r.run.findings ?? []), sink: r.sink };
    }));
  }
  if (answered.length > 0) {
    const { rows } = await d.db.query<{ node_id: string; version: string; new_version: string }>(what, c, {
      name: 'compliance_answered_batch', text: ANSWERED_SQL, values: [pick(answered, (r) => r.run.node_id), pick(answered, (r) => epochS(r.receivedAt))],
    });
    for (const row of rows) d.cache.moveRows(row.node_id, row.version, row.new_version);
  }
}

/** Each node's expectations under its current policy (nodes with none are left out), with when they were set. */
async function expectationsOf(d: BatchDeps, what: string, c: pg.PoolClient, nodes: readonly NodeRecord[]): Promise<Map<string, { components: ExpectedComponent[]; setS: number }>> {
  const out = new Map<string, { components: ExpectedComponent[]; setS: number }>();
  let todo = nodes.filter((n) => n.policy_config_id !== null);
  // Twice at most: an entry dropped meanwhile (a policy written by another batch of this process)
  // is read again whole.
  for (let pass = 0; pass < 2 && todo.length > 0; pass++) {
    const { rows } = await d.db.query<{ node_id: string; set_at: Date; version: string; components: string | null }>(what, c, {
      name: 'expectations_batch',
      text: EXPECTATIONS_SQL,
      values: [pick(todo, (n) => n.id), pick(todo, (n) => n.policy_config_id), pick(todo, (n) => (pass === 0 ? d.cache.expectationsVersion(n.id, n.policy_config_id!) : null))],
    });
    const policyOf = new Map(todo.map((n) => [n.id, n.policy_config_id!]));
    const again: NodeRecord[] = [];
    for (const row of rows) {
      const config = policyOf.get(row.node_id)!;
      let components: ExpectedComponent[] | undefined;
      if (row.components !== null) {
        components = JSON.parse(row.components) as ExpectedComponent[];
        d.cache.setExpectations(row.node_id, config, row.version, components, row.components.length);
      } else {
        components = d.cache.expectations(row.node_id, config, row.version);
      }
      if (components) out.set(row.node_id, { components, setS: Math.floor(row.set_at.getTime() / 1000) });
      else again.push(todo.find((n) => n.id === row.node_id)!);
    }
    todo = again;
  }
  return out;
}

/** A directive row's key and counts, as the cache holds them. */
const rowKey = (x: { rule_id: string; directive_id: string }) => `${x.rule_id}\n${x.directive_id}`;

/** A node's directive rows as the cache holds them: counts by key. */
const rowMap = (rows: readonly DirectiveRow[]) => new Map(rows.map((x) => [rowKey(x), COUNT_COLUMNS.map((col) => x.counts[col]).join(',')]));

/**
 * Node rows, findings and per-directive rows of several nodes (one entry each) recomputed. For a
 * node whose rows the cache holds at the node row's `version`, or whose rows were counted from
 * its run (as `input` has it) against the list `countedFrom`, only the rows that moved are
 * written and only those gone are deleted; for the others every row is written (unchanged ones
 * left alone by the upsert's WHERE) and whatever is not reported any more is pruned.
 */
export async function writeComplianceMany(
  d: BatchDeps, c: pg.PoolClient,
  entries: Array<{
    input: ComplianceInput; at: string; version: string | undefined; countedFrom?: ExpectedComponent[]; f: FindingContext; sink: EventInsert[];
    /** `input.outcomesPacked` is the value the node's row holds: it is not written again (KEEP_OUTCOMES_SQL). */
    outcomesStored?: boolean;
    /**
     * The rows of the directives that gain components, made without judging the node's run
     * (additions.ts; it fails nowhere), and those rows as stored: its other rows stay as they are.
     */
    made?: { rows: ComplianceRows; stored: readonly DirectiveRow[] };
  }>,
  /** Judges the runs (judged.ts): a policy write's, once per outcome set; else one per run. */
  runs: Pick<RunJudge, 'rows'> = { rows: complianceRows },
): Promise<void> {
  const what = 'writeCompliance';
  const computed = entries.map((e) => {
    const rows = e.made?.rows ?? runs.rows(e.input);
    const held = e.made ? rowMap(e.made.stored) : e.countedFrom !== undefined ? rowMap(runs.rows({ ...e.input, expected: e.countedFrom }).directives)
      : e.version === undefined ? undefined : d.cache.rows(e.input.nodeId, e.version);
    return { ...e, rows, now: rowMap(rows.directives), held };
  });
  const unknown = computed.filter((e) => e.held === undefined);
  const dirs = computed.flatMap(({ input, rows, held }) => rows.directives
    .filter((x) => held === undefined || held.get(rowKey(x)) !== COUNT_COLUMNS.map((col) => x.counts[col]).join(','))
    .map((x) => ({ node_id: input.nodeId, ...x })));
  if (unknown.length > 0) {
    const all = unknown.flatMap(({ input, rows }) => rows.directives.map((x) => ({ node_id: input.nodeId, ...x })));
    await d.db.query(what, c, {
      name: 'compliance_directives_prune_batch',
      text: PRUNE_SQL,
      values: [pick(unknown, (e) => e.input.nodeId), pick(all, (x) => x.node_id), pick(all, (x) => x.rule_id), pick(all, (x) => x.directive_id)],
    });
  }
  const gone = computed.flatMap(({ input, now, held }) => held === undefined ? [] : [...held.keys()].filter((k) => !now.has(k)).map((k) => {
    const [rule_id, directive_id] = k.split('\n') as [string, string];
    return { node_id: input.nodeId, rule_id, directive_id };
  }));
  if (gone.length > 0) {
    await d.db.query(what, c, {
      name: 'compliance_directives_delete_batch', text: DELETE_SQL,
      values: [pick(gone, (x) => x.node_id), pick(gone, (x) => x.rule_id), pick(gone, (x) => x.directive_id)],
    });
  }
  // The node rows after the rows that go and before the new ones: a node whose time state moves
  // (a new policy: applying) has its directive rows moved between the kept counters by the node
  // row's trigger, so only the rows it keeps are moved, none taken out again or written twice.
  // Rows keeping their stored outcomes are updated without them; any such row not found (none
  // while the caller holds the node's lock) is written whole with the rest.
  const written = new Map<string, string>();
  const head = (list: typeof computed) => [pick(list, (e) => e.input.nodeId), pick(list, (e) => e.input.run?.id ?? null),
    pick(list, (e) => e.input.run?.started_at ?? null), pick(list, (e) => e.input.run?.started_utc ?? null), pick(list, (e) => e.input.run?.config_id ?? null),
    pick(list, (e) => e.input.expected !== null && e.input.expected.length > 0), pick(list, (e) => e.at)];
  const tail = (list: typeof computed) => [pick(list, (e) => e.input.marks.applying_since_s), pick(list, (e) => e.input.marks.answered_s),
    pick(list, (e) => e.input.marks.keep_last_s), pick(list, (e) => e.f.runs_seen), ...COUNT_COLUMNS.map((col) => pick(list, (e) => e.rows.counts[col]))];
  const keeping = computed.filter((e) => e.outcomesStored === true && e.input.outcomesPacked !== undefined);
  if (keeping.length > 0) {
    const { rows } = await d.db.query<{ node_id: string; version: string }>(what, c, {
      name: 'compliance_keep_outcomes_batch', text: KEEP_OUTCOMES_SQL, values: [...head(keeping), ...tail(keeping)],
    });
    for (const r of rows) written.set(r.node_id, r.version);
  }
  const whole = computed.filter((e) => !written.has(e.input.nodeId));
  if (whole.length > 0) {
    const { rows } = await d.db.query<{ node_id: string; version: string }>(what, c, {
      name: 'compliance_upsert_batch',
      text: UPSERT_SQL,
      values: [...head(whole), pick(whole, (e) => packedOrNull(e.input.outcomes, e.input.outcomesPacked)), ...tail(whole)],
    });
    for (const r of rows) written.set(r.node_id, r.version);
  }
  // A node failing nowhere, before or now, has no finding to open or close (most runs).
  const failing = computed.filter(({ f, rows }) => f.failing_before > 0 || rows.counts.error + rows.counts.non_compliant > 0);
  const events = await d.findings.reconcileMany(c, failing.map(({ input, f, rows }) => ({
    node_id: input.nodeId, run: f.run, at: f.at, items: rows.items, reports: f.reports, runs_seen: f.runs_seen, last_seen: f.last_seen,
  })));
  failing.forEach(({ sink }, i) => sink.push(...events[i]!));
  if (dirs.length > 0) {
    await d.db.query(what, c, {
      name: 'compliance_directives_upsert_batch',
      text: DIRECTIVES_SQL,
      values: [pick(dirs, (x) => x.node_id), pick(dirs, (x) => x.rule_id), pick(dirs, (x) => x.directive_id),
        ...COUNT_COLUMNS.map((col) => pick(dirs, (x) => x.counts[col]))],
    });
  }
  for (const { input, now, made } of computed) {
    const v = written.get(input.nodeId);
    // Made rows are some of the node's: the cache holds a node's rows whole or not at all.
    if (v !== undefined && !made) d.cache.setRows(input.nodeId, v, now);
  }
}
