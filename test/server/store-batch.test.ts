/**
 * insertRuns, the ingest's group commit, on both backends (PostgreSQL skipped with the reason
 * when unreachable): several runs in one transaction, each refused or stored on its own, the
 * same duplicate rule and the same compliance as one insertRun at a time.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import Database from 'better-sqlite3';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { PG_URL, pgAdmin, pgUnavailable } from './pg.js';
import { complianceClock } from '@capstan/server/registry/compliance';
import { CLOCK, inventory, run } from './store-suite.js';
import { programDir } from '../helpers/programs.js';
import { setAcceptance } from '../helpers/node-changes.js';

const CLK = complianceClock({ runIntervalMs: 300_000, missedRuns: 3, applyingGraceMs: 300_000 }, new Date('2024-05-01T10:11:00Z'));


/** A fresh store, and raw SQL on its database (to make rows as an older version wrote them). */
type Open = (t: Test) => Promise<Store & { sql?: (q: string) => Promise<void> }>;

const sqlite: Open = async (t) => {
  const path = join(programDir(t), 'capstan.db');
  const store = await openRegistry({ sqlitePath: path, now: CLOCK });
  t.teardown(() => store.close());
  return Object.assign(store, {
    sql: async (q: string) => {
      const db = new Database(path);
      try {
        db.exec(q);
      } finally {
        db.close();
      }
    },
  });
};

const postgres: Open = async (t) => {
  const schema = `capstan_test_${randomBytes(6).toString('hex')}`;
  await pgAdmin((c) => c.query(`CREATE SCHEMA ${schema}`));
  const store = await openRegistry({ databaseUrl: PG_URL, schema, poolSize: 2, now: CLOCK });
  t.teardown(async () => {
    await store.close();
    await pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  });
  return Object.assign(store, {
    sql: async (q: string) => {
      await pgAdmin(async (c) => {
        await c.query(`SET search_path = ${schema}`);
        await c.query(q);
      });
    },
  });
};

async function accepted(store: Store, ...ids: string[]): Promise<void> {
  for (const id of ids) {
    await store.upsertFromInventory(inventory(id));
    await setAcceptance(store, id, 'accepted', '2024-05-01T10:01:00Z');
  }
}

const outcome = (directive_id: string, outcome: string, component = 'File') => ({ rule_id: 'r1', directive_id, component, outcome, count: 1 });

function suite(name: string, open: Open): void {
  t.test(`${name}: runs of a batch are stored in one call, each with its own result, in order`, async (t) => {
    const store = await open(t);
    await accepted(store, 'n1', 'n2');
    const results = await store.insertRuns([
      run('n1', '2024-05-01T10:00:00Z'),
      run('n2', '2024-05-01T10:00:00Z'),
      run('n1', '2024-05-01T10:05:00+00:00', { received_at: '2024-05-01T10:06:00Z' }),
    ]);
    t.same(results.map((r) => r.ok), [true, true, true]);
    const ids = results.map((r) => (r.ok ? r.result.id : -1));
    t.equal(new Set(ids).size, 3, 'three distinct run ids');
    t.equal((await store.listRuns('n1', 1, 10)).total, 2);
    t.equal((await store.listRuns('n2', 1, 10)).total, 1);
    t.equal((await store.getNode('n1'))!.last_run_at, '2024-05-01T10:05:00.000Z', 'the node follows its newest run');
    t.equal((await store.getComplianceBase('n1'))!.run!.id, ids[2], 'compliance is based on the newest complete run');
  });

  t.test(`${name}: a refused run fails alone and the rest of its batch is stored`, async (t) => {
    const store = await open(t);
    await accepted(store, 'n1', 'n2');
    const results = await store.insertRuns([
      run('n1', '2024-05-01T10:00:00Z'),
      run('ghost', '2024-05-01T10:00:00Z'),
      run('n2', '2024-05-01T10:00:00Z', { file_name: 'bad\u0000name' }),
      run('n2', 'not a time'),
      run('n2', '2024-05-01T10:01:00Z'),
    ]);
    t.same(results.map((r) => r.ok), [true, false, false, false, true]);
    const code = (i: number) => (results[i]!.ok ? null : (results[i] as { error: { code?: string } }).error.code);
    t.equal(code(1), 'ERR_NODE_UNKNOWN');
    t.equal(code(2), 'ERR_BAD_REQUEST');
    t.equal(code(3), 'ERR_BAD_REQUEST');
    t.equal((await store.listRuns('n1', 1, 10)).total, 1);
    t.equal((await store.listRuns('n2', 1, 10)).total, 1, 'only the good run of n2');
    t.equal((await store.getNode('n2'))!.last_run_at, '2024-05-01T10:01:00.000Z');
  });

  t.test(`${name}: duplicates are recognised inside a batch and against stored runs`, async (t) => {
    const store = await open(t);
    await accepted(store, 'n1');
    const [first] = await store.insertRuns([run('n1', '2024-05-01T10:00:00Z')]);
    const results = await store.insertRuns([
      run('n1', '2024-05-01T12:00:00+02:00'), // the same instant as the stored one
      run('n1', '2024-05-01T11:00:00Z'),
      run('n1', '2024-05-01T11:00:00Z'),
    ]);
    const firstId = first!.ok ? first!.result.id : -1;
    t.same(results[0], { ok: true, result: { inserted: false, reason: 'duplicate', id: firstId } });
    t.ok(results[1]!.ok && results[1]!.result.inserted);
    const newId = results[1]!.ok ? results[1]!.result.id : -1;
    t.same(results[2], { ok: true, result: { inserted: false, reason: 'duplicate', id: newId } }, 'the second copy in the same batch');
    t.equal((await store.listRuns('n1', 1, 10)).total, 2);
  });

  t.test(`${name}: directive compliance follows each run, rows that changed or went away included`, async (t) => {
    const store = await open(t);
    await accepted(store, 'n1', 'n2');
    await store.insertRuns([
      run('n1', '2024-05-01T10:00:00Z', { outcomes: [outcome('d1', 'result_success'), outcome('d2', 'result_error'), outcome('d3', 'result_success')] }),
      run('n2', '2024-05-01T10:00:00Z', { outcomes: [outcome('d1', 'result_success')] }),
    ]);
    const byDirective = async () => Object.fromEntries((await store.complianceByRule('directive', CLK)).map((r) => [r.directive_id, { nodes: r.nodes, ...r.counts }]));
    let d = await byDirective();
    t.same(Object.keys(d).sort(), ['d1', 'd2', 'd3']);
    t.equal(d.d1!.nodes, 2);
    t.equal(d.d2!.error, 1);
    // n1: d1 unchanged, d2 repaired now, d3 gone, d4 new.
    await store.insertRuns([
      run('n1', '2024-05-01T10:05:00Z', { outcomes: [outcome('d1', 'result_success'), outcome('d2', 'result_repaired'), outcome('d4', 'result_success')] }),
    ]);
    d = await byDirective();
    t.same(Object.keys(d).sort(), ['d1', 'd2', 'd4'], 'the directive no longer reported is gone');
    t.same([d.d1!.nodes, d.d1!.success], [2, 2]);
    t.same([d.d2!.error, d.d2!.repaired], [0, 1], 'the changed directive has its new counts');
    t.equal(d.d4!.success, 1);
    const summary = await store.complianceSummary([], CLK);
    t.same([summary.counts.success, summary.counts.repaired, summary.counts.error], [3, 1, 0], 'node totals agree with the directives');
  });

  t.test(`${name}: outcomes are stored packed, and rows written before packing read as before`, async (t) => {
    const store = await open(t);
    await accepted(store, 'n1');
    const outcomes = [outcome('d1', 'result_success'), outcome('d2', 'result_error', 'Service \u00e9')];
    await store.insertRuns([run('n1', '2024-05-01T10:00:00Z', { outcomes })]);
    t.same((await store.listRuns('n1', 1, 10)).data[0]!.outcomes, outcomes, 'a run gives its outcomes back');
    t.same((await store.getComplianceBase('n1'))!.outcomes, outcomes, 'so does the node compliance base');
    // As migration 7 left them: the JSON in `outcomes`, nothing packed.
    const json = JSON.stringify(outcomes).replace(/'/g, "''");
    await store.sql!(`UPDATE runs SET outcomes = '${json}', outcomes_packed = NULL;
      UPDATE node_compliance SET outcomes = '${json}', outcomes_packed = NULL;`);
    t.same((await store.listRuns('n1', 1, 10)).data[0]!.outcomes, outcomes, 'an older run row');
    t.same((await store.getComplianceBase('n1'))!.outcomes, outcomes, 'an older compliance row');
    // The same outcomes again on an older row: compared packed, so recomputed once, then equal.
    await store.insertRuns([run('n1', '2024-05-01T10:05:00Z', { outcomes })]);
    await store.insertRuns([run('n1', '2024-05-01T10:10:00Z', { outcomes })]);
    const base = (await store.getComplianceBase('n1'))!;
    t.equal(base.run!.started_at, '2024-05-01T10:10:00Z', 'the newest run is the base');
    t.same(base.outcomes, outcomes);
    t.equal((await store.complianceSummary([], CLK)).counts.error, 1, 'compliance counts unchanged');
  });
}

suite('sqlite', sqlite);
const reason = await pgUnavailable();
if (reason === undefined) suite('postgres', postgres);
else t.comment(`postgres cases skipped: ${reason}`);
