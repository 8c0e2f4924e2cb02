/**
 * A batch of runs stored on PostgreSQL with one statement per table for the whole batch, where
 * storing them one by one cost a dozen statements per run (each a round trip, a bind and an
 * executor start in the database): the node-day bases found (and made) at once, the runs inserted
 * at once (duplicates told apart by what the insert returns), then their changes, their nodes
 * and their compliance, each in one statement or a few for all the runs.
 *
 * A round holds at most one run per node: what a run does depends on the node's previous run, so
 * a batch holding several runs of one node stores them in successive rounds, in the batch's order,
 * in the same transaction (the same outcome as storing them one after the other). The caller
 * holds every node's row lock.
 */
import type pg from 'pg';
import { pick, unnestOf } from '../postgres/arrays.js';
import type { PostgresDb } from '../postgres/db.js';
import type { checkRun } from '../input.js';
import type { PostgresChanges } from '../changes/postgres.js';
import type { PostgresCompliance } from '../compliance/postgres.js';
import type { PostgresNodes } from '../nodes/postgres.js';
import type { EventInsert } from '../events/types.js';
import type { NodeRecord } from '../nodes/types.js';
import type { StoreRules } from '../rules.js';
import { UNPACKED_PLACEHOLDER } from './outcomes.js';
import { encodeAgainst, encodeBase, runDay, standalone, type BaseCache, type BaseRow, type BaseTexts } from './run-codec.js';
import type { InsertRunResult, RunInsert } from './types.js';

export interface RunBatchDeps {
  db: PostgresDb;
  nodes: PostgresNodes;
  compliance: PostgresCompliance;
  changes: PostgresChanges;
  rules: StoreRules;
  bases: BaseCache;
}

/** One run of a round: checked, its node as locked (and as moved by earlier rounds), its own events. */
export interface RoundRun {
  run: RunInsert;
  checked: ReturnType<typeof checkRun>;
  node: NodeRecord;
  sink: EventInsert[];
}

interface Stored {
  base_id: number | null;
  log: Buffer;
  outcomes: Buffer;
}

const what = 'insertRuns';

const RUNS_INSERT = `INSERT INTO runs (node_id, started_at, started_at_utc, config_id, complete, report_count,
    counts, outcomes, file_name, sha256, received_at, log_compressed, outcomes_packed, base_id)
  SELECT v.node_id, v.started_at, v.started_utc, v.config_id, v.complete, v.report_count, v.counts::jsonb, '${UNPACKED_PLACEHOLDER}'::jsonb,
    v.file_name, v.sha256, v.received_at, v.log_compressed, v.outcomes_packed, v.base_id
  FROM ${unnestOf(['text', 'text', 'timestamptz', 'text', 'boolean', 'integer', 'text', 'text', 'text', 'timestamptz', 'bytea', 'bytea', 'bigint'])}
    AS v(node_id, started_at, started_utc, config_id, complete, report_count, counts, file_name, sha256, received_at, log_compressed, outcomes_packed, base_id)
  ON CONFLICT (node_id, started_at_utc) DO NOTHING RETURNING id, node_id`;

/** Stores one round (distinct nodes); the results in the order given, each node's record after its run in `moved`. */
export async function storeRound(d: RunBatchDeps, c: pg.PoolClient, round: readonly RoundRun[], moved: Map<string, NodeRecord>): Promise<InsertRunResult[]> {
  const stored = await againstBases(d, c, round);
  const ins = await d.db.query<{ id: string; node_id: string }>(what, c, {
    name: 'runs_insert_batch',
    text: RUNS_INSERT,
    values: [pick(round, (r) => r.run.node_id), pick(round, (r) => r.run.started_at), pick(round, (r) => r.checked.startedUtc),
      pick(round, (r) => r.run.config_id ?? null), pick(round, (r) => r.run.complete), pick(round, (r) => r.run.report_count),
      pick(round, (r) => r.checked.counts), pick(round, (r) => r.run.file_name), pick(round, (r) => r.run.sha256),
      pick(round, (r) => r.checked.receivedAt), pick(stored, (s) => s.log), pick(stored, (s) => s.outcomes), pick(stored, (s) => s.base_id)],
  });
  const newId = new Map(ins.rows.map((r) => [r.node_id, Number(r.id)]));
  const results: InsertRunResult[] = new Array(round.length);
  const dups = round.filter((r) => !newId.has(r.run.node_id));
  if (dups.length > 0) {
    const { rows } = await d.db.query<{ id: string; node_id: string }>(what, c, {
      name: 'runs_find_batch',
      text: `SELECT r.id, r.node_id FROM runs r JOIN ${unnestOf(['text', 'timestamptz'])} AS k(node_id, s) ON r.node_id = k.node_id AND r.started_at_utc = k.s`,
      values: [pick(dups, (r) => r.run.node_id), pick(dups, (r) => r.checked.startedUtc)],
    });
    const dupId = new Map(rows.map((r) => [r.node_id, Number(r.id)]));
    round.forEach((r, i) => {
      if (!newId.has(r.run.node_id)) results[i] = { inserted: false, reason: 'duplicate', id: dupId.get(r.run.node_id)! };
    });
  }
  const done = round.map((r, i) => ({ ...r, i, id: newId.get(r.run.node_id) })).filter((r): r is typeof r & { id: number } => r.id !== undefined);
  for (const r of done) results[r.i] = { inserted: true, id: r.id };
  if (done.length === 0) return results;
  await d.changes.runsStored(c, done.map((r) => ({ run: r.run, runId: r.id, startedUtc: r.checked.startedUtc, changes: r.checked.changes, sink: r.sink })));
  const after = await d.nodes.runsStored(what, c, done.map((r) => ({
    node: r.node, startedUtc: r.checked.startedUtc, configId: r.run.config_id ?? null, receivedAt: r.checked.receivedAt,
  })));
  done.forEach((r, k) => {
    const answered = d.rules.events.answering(r.node, after[k]!, r.checked.receivedAt);
    if (answered) r.sink.push(answered);
    moved.set(r.node.id, after[k]!);
  });
  await d.compliance.runsStored(what, c, done.map((r) => ({
    node: r.node, run: r.run, id: r.id, startedUtc: r.checked.startedUtc, receivedAt: r.checked.receivedAt, packed: r.checked.packed, sink: r.sink,
  })));
  return results;
}

/**
 * Each run's log and outcomes against its node-day's base (run-codec.ts), the bases found in one
 * statement, the missing ones made from their run in one more, those not decoded in memory read
 * in one more. Runs given compressed bytes instead of text are stored as given, and so are runs
 * whose base cannot be read, compressed alone (run-codec.ts standalone).
 */
async function againstBases(d: RunBatchDeps, c: pg.PoolClient, round: readonly RoundRun[]): Promise<Stored[]> {
  const out: Stored[] = round.map((r) => ({ base_id: null, log: r.run.log_compressed!, outcomes: r.checked.packed }));
  const texted = round.map((r, i) => ({ r, i, day: runDay(r.checked.startedUtc) })).filter((x) => x.r.run.log_text);
  if (texted.length === 0) return out;
  const json = texted.map(({ r }) => r.run.outcomes_json ?? Buffer.from(JSON.stringify(r.run.outcomes), 'utf8'));
  const idOf = new Map<string, number>();
  const texts = new Map<number, BaseTexts>();
  const find = async (xs: typeof texted) => {
    const { rows } = await d.db.query<{ id: string; node_id: string }>(what, c, {
      name: 'run_bases_find_batch',
      text: `SELECT b.id, b.node_id FROM run_bases b JOIN ${unnestOf(['text', 'date'])} AS k(node_id, day) ON b.node_id = k.node_id AND b.day = k.day`,
      values: [pick(xs, (x) => x.r.run.node_id), pick(xs, (x) => x.day)],
    });
    for (const row of rows) idOf.set(row.node_id, Number(row.id));
  };
  await find(texted);
  const missing = texted.map((x, k) => ({ ...x, k })).filter((x) => !idOf.has(x.r.run.node_id));
  if (missing.length > 0) {
    const rows = missing.map((x) => encodeBase({ log: x.r.run.log_text!, outcomes: json[x.k]! }));
    const made = await d.db.query<{ id: string; node_id: string }>(what, c, {
      name: 'run_bases_insert_batch',
      text: `INSERT INTO run_bases (node_id, day, log_compressed, outcomes_packed) SELECT * FROM ${unnestOf(['text', 'date', 'bytea', 'bytea'])}
        ON CONFLICT (node_id, day) DO NOTHING RETURNING id, node_id`,
      values: [pick(missing, (x) => x.r.run.node_id), pick(missing, (x) => x.day), pick(rows, (b) => b.log_compressed), pick(rows, (b) => b.outcomes_packed)],
    });
    const byNode = new Map(missing.map((x) => [x.r.run.node_id, x]));
    for (const row of made.rows) {
      const x = byNode.get(row.node_id)!;
      const id = Number(row.id);
      idOf.set(row.node_id, id);
      texts.set(id, d.bases.set(id, { log: x.r.run.log_text!, outcomes: json[x.k]! }, { nodeId: row.node_id, day: x.day }));
    }
    // Made meanwhile by another server (the node's row lock makes that rare): found now.
    const still = missing.filter((x) => !idOf.has(x.r.run.node_id));
    if (still.length > 0) await find(still);
  }
  const unread: Array<{ id: number; nodeId: string; day: string }> = [];
  for (const { r, day } of texted) {
    const id = idOf.get(r.run.node_id)!;
    if (texts.has(id)) continue;
    const t = d.bases.get(id);
    if (t) texts.set(id, t);
    else unread.push({ id, nodeId: r.run.node_id, day });
  }
  if (unread.length > 0) {
    const { rows } = await d.db.query<BaseRow & { id: string }>(what, c, {
      name: 'run_bases_get_batch',
      text: 'SELECT id, log_compressed, outcomes_packed FROM run_bases WHERE id = ANY($1::bigint[])',
      values: [pick(unread, (u) => u.id)],
    });
    const at = new Map(unread.map((u) => [u.id, u]));
    for (const row of rows) {
      const u = at.get(Number(row.id))!;
      const t = d.bases.readable(u.id, row, { nodeId: u.nodeId, day: u.day });
      if (t) texts.set(u.id, t);
    }
  }
  texted.forEach(({ r, i }, k) => {
    const id = idOf.get(r.run.node_id)!;
    const t = texts.get(id);
    // A base that cannot be read: this run on its own, the batch's other runs as ever.
    out[i] = t ? encodeAgainst(id, t, r.run.log_text!, json[k]!, r.run.against) : standalone(r.run.log_text!, r.checked.packed);
  });
  return out;
}
