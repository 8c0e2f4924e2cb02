/**
 * The PostgreSQL store tests hand a test's migrated schema to the next test (backends.ts): the
 * next test must find it as a freshly migrated one (every table's rows as the migrations seed
 * them, sequences from the start, nothing of the test before), and a schema whose definitions a
 * test changed must not be handed on. Each case is a pair of tests in order, as the store suites
 * run them. Without pg_dump nothing is handed on: the next test gets a new schema and the used
 * one is gone (in CI pg_dump must be there, so that the reuse itself is what is tested).
 */
import { execFile } from 'node:child_process';
import { promisify } from 'node:util';
import t from 'tap';
import { requiredInCi } from '../helpers/programs.js';
import { postgresBackend } from './backends.js';
import { pgAdmin, postgresOrSkipFile } from './pg.js';
import { inventory, run, setup } from './store-suite.js';

/** Every table of `schema` with its rows, as text, in a stable order. */
async function contents(schema: string): Promise<Record<string, string[]>> {
  return pgAdmin(async (c) => {
    const tables = (await c.query<{ t: string }>('SELECT tablename AS t FROM pg_tables WHERE schemaname = $1 ORDER BY 1', [schema])).rows.map((r) => r.t);
    const out: Record<string, string[]> = {};
    for (const table of tables) {
      const { rows } = await c.query<{ r: string }>(`SELECT x::text AS r FROM ${schema}.${table} x ORDER BY 1`);
      out[table] = rows.map((r) => r.r);
    }
    return out;
  });
}

/** Whether the backends can hand schemas on (they need pg_dump); without it, outside CI, the reason is printed. */
async function reusing(): Promise<boolean> {
  const why = await promisify(execFile)('pg_dump', ['--version']).then(() => false as const, (err: Error) => `pg_dump unavailable (${err.message.split('\n')[0]})`);
  if (requiredInCi(why, 'the postgresql-client package has it')) console.log(`# ${why}: schemas are not handed on, and the tests check that instead`);
  return why === false;
}

if (await postgresOrSkipFile(t)) {
  const reuse = await reusing();
  const backend = postgresBackend('capstan_reuse');
  let first = '';
  let firstRun = 0;
  let seeded: Record<string, string[]> = {};

  t.test('a test writes nodes, runs and compliance into its schema', async (t) => {
    const { db, store } = await setup(t, backend);
    first = db.schema!;
    // What it holds as the migrations left it (the file's first: its rows are the seeds).
    seeded = await contents(first);
    t.ok(Object.values(seeded).some((rows) => rows.length > 0), 'the migrations seed some rows');
    await store.upsertFromInventory(inventory('n1'));
    firstRun = (await store.insertRun(run('n1', '2024-05-01T10:00:00Z'))).id!;
    t.not(JSON.stringify(await contents(first)), JSON.stringify(seeded), 'the schema now holds more');
  });

  t.test('the next test gets that schema back as the migrations leave it', async (t) => {
    const { db, store } = await setup(t, backend);
    if (reuse) {
      t.equal(db.schema, first, 'the same schema, handed on');
      t.same(await contents(first), seeded, 'every table as a new schema holds it');
    } else {
      t.not(db.schema, first, 'without pg_dump: a new schema');
      t.same(await contents(first), {}, 'and the used one is gone');
    }
    t.equal(await store.getNode('n1'), null, 'no node of the test before');
    await store.upsertFromInventory(inventory('n1'));
    t.equal((await store.insertRun(run('n1', '2024-05-01T10:00:00Z'))).id, firstRun, 'sequences start again');
    // This test changes a definition: its schema must not be handed on.
    await db.exec('CREATE INDEX reuse_probe_idx ON nodes (os_version)');
  });

  t.test('a schema whose definitions a test changed is dropped, not handed on', async (t) => {
    const { db } = await setup(t, backend);
    t.not(db.schema, first, 'a new schema');
    t.same(await db.rows!("SELECT indexname FROM pg_indexes WHERE schemaname = current_schema() AND indexname = 'reuse_probe_idx'"), [], 'without the index of the test before');
    const left = await pgAdmin((c) => c.query('SELECT 1 FROM pg_namespace WHERE nspname = $1', [first]));
    t.equal(left.rowCount, 0, 'the changed schema is gone');
  });
}
