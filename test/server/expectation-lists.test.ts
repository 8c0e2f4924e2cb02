/**
 * Expectation lists (migration 30), on both stores: each distinct list is stored once, named by
 * the digest of its JSON, for every node and config expecting it; reads give it back as written;
 * the sweep deletes a list once no node's expectations name it (on PostgreSQL, once it has not
 * been taken into use for two hours); and a database at 29 keeps every node's expectations
 * through the upgrade, equal lists made one.
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { ExpectedComponent, Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { expectationsDigest } from '@capstan/server/store/input';
import { inventory, setup, type Backend, type Db } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { pgUnavailable, PG_URL } from './pg.js';
import { postgresAt, sqliteAt } from '../helpers/old-schema.js';
import { programDir } from '../helpers/programs.js';

const A: ExpectedComponent[] = [{ rule_id: 'r1', directive_id: 'd1', component: 'File' }, { rule_id: 'r1', directive_id: 'd2', component: 'Pkg' }];
const B: ExpectedComponent[] = [{ rule_id: 'r2', directive_id: 'd3', component: 'Svc' }];
const NODES = ['n1', 'n2', 'n3'];
const at = (m: number) => new Date(Date.UTC(2024, 4, 1, 9, m)).toISOString();

const digests = async (db: Db) => (await db.rows!('SELECT digest FROM expectation_lists ORDER BY digest')).map((r) => r.digest as string);

/** Make every list look last taken into use three hours ago (PostgreSQL keeps a list two hours). */
const ageLists = (db: Db) => db.exec(db.dialect === 'postgres' ? "UPDATE expectation_lists SET used_at = now() - interval '3 hours'" : 'SELECT 1');

async function setAll(store: Store, config: string, list: ExpectedComponent[], minute: number) {
  for (const id of NODES) t.ok(await store.setExpectations(id, config, list, at(minute)));
}

function scenario(t: Test, backend: Backend): void {
  t.test('a list is stored once for all that expect it, and swept when none does', async (t) => {
    const { db, store } = await setup(t, backend);
    for (const id of NODES) await store.upsertFromInventory(inventory(id));
    await setAll(store, 'cfg-a', A, 0);
    t.same(await digests(db), [expectationsDigest(JSON.stringify(A))], 'one list, named by the digest of its JSON');
    t.equal((await db.rows!("SELECT count(*) AS n FROM node_expectations WHERE list <> ''"))[0]!.n, db.dialect === 'postgres' ? '3' : 3);
    for (const id of NODES) t.same(await store.getExpectations(id, 'cfg-a'), A, `${id} reads its list back`);

    // A new policy: the previous one is kept (a node may still run it), so both lists stay named.
    await setAll(store, 'cfg-b', B, 1);
    await ageLists(db);
    t.equal(await store.deleteUnusedExpectationLists(100), 0, 'every list still named');
    t.equal((await digests(db)).length, 2);
    if (db.dialect === 'postgres') await db.exec('UPDATE expectation_lists SET used_at = now()');

    // One more: cfg-a is neither current nor previous any more, and its list goes.
    await setAll(store, 'cfg-c', B, 2);
    if (db.dialect === 'postgres') t.equal(await store.deleteUnusedExpectationLists(100), 0, 'a list used within two hours is kept');
    await ageLists(db);
    t.equal(await store.deleteUnusedExpectationLists(100), 1, 'the list nothing names is deleted');
    t.same(await digests(db), [expectationsDigest(JSON.stringify(B))]);
    t.same(await store.getExpectations('n1', 'cfg-c'), B);
    t.same(await store.getExpectations('n1', 'cfg-b'), B);
    t.equal(await store.getExpectations('n1', 'cfg-a'), null);

    // Named again after it was deleted: stored again, and read back.
    t.ok(await store.setExpectations('n1', 'cfg-d', A, at(3)));
    t.same(await store.getExpectations('n1', 'cfg-d'), A);
    t.equal((await digests(db)).length, 2);
    if (db.dialect === 'postgres') {
      // A list taken back into use after an hour is touched first, out of the sweep's reach.
      await ageLists(db);
      t.ok(await store.setExpectations('n2', 'cfg-e', A, at(4)));
      const fresh = await db.rows!(`SELECT used_at > now() - interval '1 minute' AS fresh FROM expectation_lists WHERE digest = '${expectationsDigest(JSON.stringify(A))}'`);
      t.same(fresh, [{ fresh: true }], 'its use is recorded');
    }
  });

  t.test('the batch writer stores each distinct list once too', async (t) => {
    const { db, store } = await setup(t, backend);
    for (const id of NODES) await store.upsertFromInventory(inventory(id));
    const write = (id: string, config: string, expected: ExpectedComponent[]) => ({
      bundle: { node_id: id, config_id: config, generated_at: at(5), bundle: JSON.stringify({ node_id: id, config_id: config, directives: [] }) }, expected,
    });
    t.equal(await store.putPolicies([write('n1', 'cfg-1', A), write('n2', 'cfg-1', A), write('n3', 'cfg-2', B)]), 3);
    t.same(await digests(db), [expectationsDigest(JSON.stringify(A)), expectationsDigest(JSON.stringify(B))].sort());
    t.same(await store.getExpectations('n2', 'cfg-1'), A);
    t.same(await store.getExpectations('n3', 'cfg-2'), B);
    // The same policy written again is the same list: nothing new stored.
    t.equal(await store.putPolicies([write('n1', 'cfg-1', A)]), 1);
    t.equal((await digests(db)).length, 2);
  });
}

t.test('sqlite', async (t) => scenario(t, sqliteBackend));
t.test('postgres', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  scenario(t, postgresBackend('capstan_lists'));
});

/** Rows as a version 29 store wrote them: two nodes with the same list, one with another, one node with two configs. */
function oldRows(p: (i: number) => string): Array<[string, unknown[]]> {
  const rows: Array<[string, unknown[]]> = [];
  for (const id of NODES) {
    rows.push([`INSERT INTO nodes (id, hostname, status, state, accepted, created_at, updated_at, name, state_changed_at) VALUES (${[1, 2, 3, 4, 5, 6, 7, 8, 9].map(p).join(', ')})`,
      [id, `${id}.example.com`, 'reachable', 'running', 'accepted', at(0), at(0), id, at(0)]]);
  }
  const put = (id: string, config: string, list: ExpectedComponent[]) =>
    rows.push([`INSERT INTO node_expectations (node_id, config_id, set_at, components) VALUES (${[1, 2, 3, 4].map(p).join(', ')})`, [id, config, at(1), JSON.stringify(list)]]);
  put('n1', 'cfg-a', A);
  put('n2', 'cfg-a', A);
  put('n3', 'cfg-b', B);
  put('n3', 'cfg-a', A);
  return rows;
}

async function upgraded(t: Test, store: Store, lists: string[]) {
  t.same(await store.getExpectations('n1', 'cfg-a'), A);
  t.same(await store.getExpectations('n2', 'cfg-a'), A);
  t.same(await store.getExpectations('n3', 'cfg-b'), B);
  t.same(await store.getExpectations('n3', 'cfg-a'), A);
  t.equal(lists.length, 2, 'equal lists made one');
  t.ok(lists.every((d) => d.startsWith('stored:')), 'named for where they were stored');
  // A write of the same components under their digest: the old list goes once nothing names it.
  for (const id of ['n1', 'n2']) t.ok(await store.setExpectations(id, 'cfg-c', B, at(2)));
  t.ok(await store.setExpectations('n3', 'cfg-c', B, at(2)));
  t.same(await store.getExpectations('n3', 'cfg-c'), B);
}

t.test('SQLite: a version 29 database keeps its expectations, one list per distinct one', async (t) => {
  const path = join(programDir(t), 'capstan.db');
  const db = sqliteAt(path, 29);
  for (const [sql, values] of oldRows(() => '?')) db.prepare(sql).run(...values);
  db.close();
  const store = await openRegistry({ sqlitePath: path });
  t.teardown(() => store.close());
  const Database = (await import('better-sqlite3')).default;
  const read = new Database(path, { readonly: true });
  const lists = (read.prepare('SELECT digest FROM expectation_lists').pluck().all() as string[]);
  read.close();
  await upgraded(t, store, lists);
});

t.test('PostgreSQL: a version 29 database keeps its expectations, one list per distinct one', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  const { client, schema } = await postgresAt(t, 29, 'capstan_lists_old');
  for (const [sql, values] of oldRows((i) => `$${i}`)) await client.query(sql, values);
  const store = await openRegistry({ databaseUrl: PG_URL, schema });
  t.teardown(() => store.close());
  const lists = (await client.query<{ digest: string }>('SELECT digest FROM expectation_lists')).rows.map((r) => r.digest);
  await upgraded(t, store, lists);
});
