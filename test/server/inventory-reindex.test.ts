/**
 * Upgrading a database whose inventories were stored before the filter language's tables
 * (version 14): the server makes them queryable in the background at start, in batches, on
 * SQLite and PostgreSQL; a node indexed meanwhile by a newer inventory is left as it is.
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { reindexInventories } from '@capstan/server/ingest/reindex';
import { pgUnavailable, PG_URL } from './pg.js';
import { postgresAt, sqliteAt } from '../helpers/old-schema.js';
import { inventory } from './store-suite.js';
import { programDir } from '../helpers/programs.js';

const OLD = 14;
const AT = '2026-11-20T10:00:00.000Z';
const NODES = ['n1', 'n2', 'n3', 'n4', 'n5'];

const NODE_SQL = (p: (i: number) => string) => `INSERT INTO nodes (id, hostname, status, state, accepted, created_at, updated_at, name, state_changed_at)
  VALUES (${p(1)}, ${p(1)}, 'reachable', 'running', 'accepted', ${p(2)}, ${p(2)}, ${p(1)}, ${p(2)})`;
const INVENTORY_SQL = (p: (i: number) => string) => `INSERT INTO inventories (node_id, received_at, document) VALUES (${p(1)}, ${p(2)}, ${p(3)})`;

/** n1…n4 have openssl 3.0.11 (n5 an old one); n2 also has the fact role = web. */
const doc = (id: string) => ({
  hostname: id,
  os: { name: 'debian', version: '12' },
  packages: [{ name: 'openssl', version: id === 'n5' ? '1.1.1w-0+deb11u1' : '3.0.11-1~deb12u2' }, { name: 'bash', version: '5.2.15-2' }],
  ...(id === 'n2' && { facts: { role: 'web' } }),
});

async function check(t: Test, store: Store, name: string): Promise<void> {
  const find = async (q: string) => (await store.listNodeIds([{ key: 'q', values: [q] }])).sort();
  t.same(await find('package:openssl >= 3'), [], `${name}: nothing queryable before`);
  // One node gets a newer inventory before the background work reaches it.
  await store.upsertFromInventory(inventory('n3', {
    hostname: 'n3', received_at: '2026-11-21T10:00:00.000Z',
    inventory: { ...doc('n3'), packages: [{ name: 'openssl', version: '3.0.13-1~deb12u1' }] },
  }));
  const done: number[] = [];
  const r = reindexInventories(store, silentLogger, (n) => done.push(n), 2);
  t.equal(await r.finished, 4, `${name}: the four others indexed, in batches of two`);
  t.same(done, [4], `${name}: told once, when done`);
  t.same(await find('package:openssl >= 3'), ['n1', 'n2', 'n3', 'n4'], `${name}: queryable`);
  t.same(await find('package:openssl >= 3.0.12'), ['n3'], `${name}: n3 keeps its newer inventory`);
  t.same(await find('fact:role = web'), ['n2'], `${name}: facts too`);
  t.same(await find('package:openssl < 3'), ['n5'], `${name}: version order`);
  const again = reindexInventories(store, silentLogger, (n) => done.push(n));
  t.equal(await again.finished, 0, `${name}: nothing left at the next start`);
  t.same(done, [4], `${name}: not told when there was nothing to do`);
}

t.test('SQLite: inventories stored at version 14 become queryable', async (t) => {
  const dir = programDir(t);
  const path = join(dir, 'capstan.db');
  const db = sqliteAt(path, OLD);
  for (const id of NODES) {
    db.prepare(NODE_SQL(() => '?')).run(id, id, AT, AT, id, AT);
    db.prepare(INVENTORY_SQL(() => '?')).run(id, AT, JSON.stringify(doc(id)));
  }
  db.close();
  const store = await openRegistry({ sqlitePath: path });
  t.teardown(() => store.close());
  await check(t, store, 'sqlite');
});

t.test('PostgreSQL: inventories stored at version 14 become queryable', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  const { client: c, schema } = await postgresAt(t, OLD, 'capstan_reindex');
  for (const id of NODES) {
    await c.query(NODE_SQL((i) => `$${i}`), [id, AT]);
    await c.query(INVENTORY_SQL((i) => `$${i}`), [id, AT, JSON.stringify(doc(id))]);
  }
  const store = await openRegistry({ databaseUrl: PG_URL, schema });
  t.teardown(() => store.close());
  await check(t, store, 'postgres');
});
