/**
 * Upgrading a database written by the schema before node-day bases (version 13): every run reads
 * back identical after the migrations, and again after `compact-runs` has converted them in
 * place, on SQLite (through the command line, which prints its progress) and PostgreSQL.
 *
 * The old rows are written with the statements the store used at version 13: runs whole (zstd
 * log, deflated outcomes, or the outcomes' JSON for rows from before migration 8).
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { deflateRawSync } from 'node:zlib';
import Database from 'better-sqlite3';
import { compressSync } from '@capstan/shared';
import { type RunRecord, type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { nodeProfile, runLogText } from '@capstan/bench/sim/runlog';
import { BIN, runProgram, programDir } from '../helpers/programs.js';
import { pgUnavailable, PG_URL } from './pg.js';
import { postgresAt, sqliteAt } from '../helpers/old-schema.js';

const OLD = 13;
const NODES = ['node-a', 'node-b', 'node-c'];
const MIX = { repaired: 0.02, error: 0.01, info: 0.2 };

interface OldRun {
  record: Omit<RunRecord, 'id'>;
  text: Buffer;
  /** How the old store kept its outcomes: packed (migration 8 on) or JSON only. */
  packed: boolean;
  opaque?: Buffer;
}

/** Two days of runs per node, as agents send them: mostly alike, a few outcomes differing. */
function oldRuns(): OldRun[] {
  const out: OldRun[] = [];
  for (const node of NODES) {
    const profile = nodeProfile(node, 40, MIX);
    for (let i = 0; i < 8; i++) {
      const start = new Date(Date.UTC(2026, 10, 20, 22, 0, 0) + i * 40 * 60_000);
      const text = Buffer.from(runLogText(profile, start, i, MIX));
      const started = start.toISOString().replace('.000Z', '+00:00');
      out.push({
        text,
        packed: i % 3 !== 0,
        ...(node === 'node-c' && i === 5 ? { opaque: Buffer.from('stored by a test, not zstd') } : {}),
        record: {
          node_id: node, started_at: started, config_id: profile.configId, complete: i !== 4, report_count: 40,
          counts: { result_success: 30 + i, log_info: 2 },
          outcomes: [
            { rule_id: 'r1', directive_id: 'd1', component: 'File', outcome: i % 2 ? 'result_repaired' : 'result_success', count: 1 },
            { rule_id: 'r2', directive_id: 'd2', component: 'Package "x"', outcome: 'result_success', count: i + 1 },
          ],
          file_name: `${started}@${node}.log.zst`, sha256: 'ab'.repeat(32), received_at: new Date(start.getTime() + 5000).toISOString(),
        },
      });
    }
  }
  return out;
}

const INSERT_RUN = (p: (i: number) => string) => `INSERT INTO runs (node_id, started_at, started_at_utc, config_id, complete,
  report_count, counts, outcomes, file_name, sha256, received_at, log_compressed, outcomes_packed)
  VALUES (${Array.from({ length: 13 }, (_, i) => p(i + 1)).join(', ')})`;

function runValues(r: OldRun, bool: (b: boolean) => unknown): unknown[] {
  const x = r.record;
  const json = JSON.stringify(x.outcomes);
  return [x.node_id, x.started_at, new Date(x.started_at).toISOString(), x.config_id, bool(x.complete), x.report_count,
    JSON.stringify(x.counts), r.packed ? '[]' : json, x.file_name, x.sha256, x.received_at,
    r.opaque ?? compressSync(r.text, 'zstd'), // packed as servers of that schema did: raw deflate (today's are zstd; both read back)
    r.packed ? deflateRawSync(Buffer.from(json), { level: 6 }) : null];
}

/** What every run must read as: its record, and its log text (or the opaque bytes as stored). */
async function readAll(t: Test, store: Store, runs: OldRun[], what: string): Promise<void> {
  let n = 0;
  for (const node of NODES) {
    const page = await store.listRuns(node, 1, 100);
    const mine = runs.filter((r) => r.record.node_id === node);
    t.equal(page.total, mine.length, `${what}: ${node} has all its runs`);
    for (const got of page.data) {
      const want = mine.find((r) => r.record.started_at === got.started_at)!;
      const { id: _id, ...record } = got;
      t.same(record, want.record, `${what}: run ${got.id} record`);
      if (want.opaque) t.ok((await store.getRunLog(got.id))!.equals(want.opaque), `${what}: run ${got.id} keeps its bytes`);
      else t.ok((await store.getRunLogText(got.id, 1 << 22))!.equals(want.text), `${what}: run ${got.id} log text`);
      n++;
    }
  }
  t.equal(n, runs.length, `${what}: every run read`);
}

const NODE_SQL = (p: (i: number) => string) => `INSERT INTO nodes (id, hostname, status, state, accepted, created_at, updated_at, name, state_changed_at)
  VALUES (${p(1)}, ${p(1)}, 'reachable', 'running', 'accepted', ${p(2)}, ${p(2)}, ${p(1)}, ${p(2)})`;

t.test('SQLite: a version 13 database upgrades, compacts with progress, and reads back identical', async (t) => {
  const dir = programDir(t);
  const path = join(dir, 'capstan.db');
  const runs = oldRuns();
  const db = sqliteAt(path, OLD);
  for (const node of NODES) db.prepare(NODE_SQL(() => '?')).run(...[1, 1, 2, 2, 1, 2].map((i) => nodeArgs(node)[i - 1]));
  for (const r of runs) db.prepare(INSERT_RUN(() => '?')).run(...runValues(r, (b) => (b ? 1 : 0)));
  db.close();

  let store = await openRegistry({ sqlitePath: path });
  await readAll(t, store, runs, 'migrated');
  await store.close();

  const ran = await runProgram(BIN.server, ['compact-runs', '--data-dir', dir, '--batch', '10']);
  t.equal(ran.code, 0, ran.stderr);
  const lines = ran.stdout.trim().split('\n');
  t.ok(lines.length >= 3, 'progress after every batch');
  t.match(lines.at(-1), /^converted 23 runs, left 1 as they were; through run id 24 of 24$/);

  store = await openRegistry({ sqlitePath: path });
  await readAll(t, store, runs, 'compacted');
  const check = new Database(path, { readonly: true });
  t.equal(check.prepare('SELECT count(*) FROM runs WHERE base_id IS NULL').pluck().get(), 1, 'only the opaque run stays whole');
  t.equal(check.prepare('SELECT count(*) FROM run_bases').pluck().get(), 6, 'one base per node and day');
  check.close();
  await store.close();
});

t.test('PostgreSQL: a version 13 database upgrades, compacts, and reads back identical', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  const { client: c, schema } = await postgresAt(t, OLD, 'capstan_bases');
  const runs = oldRuns();
  for (const node of NODES) await c.query(NODE_SQL((i) => `$${i}`), nodeArgs(node));
  for (const r of runs) await c.query(INSERT_RUN((i) => `$${i}`), runValues(r, (b) => b));

  const store = await openRegistry({ databaseUrl: PG_URL, schema });
  t.teardown(() => store.close());
  await readAll(t, store, runs, 'migrated');
  let converted = 0;
  for (let i = 0; i < 10; i++) {
    const r = await store.compactRuns(7);
    converted += r.converted;
    if (r.done) break;
  }
  t.equal(converted, 23);
  await readAll(t, store, runs, 'compacted');
  const other = await openRegistry({ databaseUrl: PG_URL, schema });
  t.teardown(() => other.close());
  await readAll(t, other, runs, 'compacted, another server');
  const { rows } = await c.query('SELECT count(*)::int AS n FROM run_bases');
  t.equal(rows[0].n, 6, 'one base per node and day');
});

function nodeArgs(node: string): unknown[] {
  return [node, '2026-11-01T00:00:00.000Z'];
}
