// The registry suite on the embedded backend: one SQLite file per test in programDir(t).
import { join } from 'node:path';
import t from 'tap';
import Database from 'better-sqlite3';
import { openRegistry } from '@capstan/server/registry/open';
import { registryStoreSuites, sqliteBackend } from './backends.js';
import { programDir } from '../helpers/programs.js';

const backend = sqliteBackend;
registryStoreSuites(t, backend);

t.test('the database file is in WAL mode, so readers never wait for the ingest', async (t) => {
  const path = join(programDir(t), 'capstan.db');
  const store = await openRegistry({ sqlitePath: path });
  t.teardown(() => store.close());
  const db = new Database(path, { readonly: true });
  t.teardown(() => db.close());
  t.equal(db.pragma('journal_mode', { simple: true }), 'wal');
});

t.test('a path that cannot be opened is a start-up error', async (t) => {
  await t.rejects(openRegistry({ sqlitePath: join(programDir(t), 'missing', 'dir', 'capstan.db') }), { code: 'ERR_STARTUP' });
  await t.rejects(openRegistry({}), { code: 'ERR_CONFIG' });
});

t.test('grouped writes of one turn share one commit; one that fails undoes only its own', async (t) => {
  const { SqliteDb, MAX_GROUPED_WRITES } = await import('@capstan/server/store/sqlite/db');
  const path = join(programDir(t), 'group.db');
  const db = new SqliteDb({ path });
  t.teardown(() => db.close());
  db.handle.exec('CREATE TABLE t (k TEXT PRIMARY KEY, v INTEGER NOT NULL)');
  const put = (k: string, v: unknown) => db.writeGrouped(`put ${k}`, () => db.stmt('INSERT INTO t (k, v) VALUES (?, ?)').run(k, v).changes);
  const results = await Promise.allSettled([
    put('a', 1), put('b', 2),
    put('a', 3), // the key is taken: a constraint error, for this caller only
    db.writeGrouped('throws', () => {
      db.stmt('INSERT INTO t (k, v) VALUES (?, ?)').run('c', 4);
      throw new Error('after its insert');
    }),
    put('d', 5),
  ]);
  t.same(results.map((r) => r.status), ['fulfilled', 'fulfilled', 'rejected', 'rejected', 'fulfilled']);
  t.match((results[2] as PromiseRejectedResult).reason, { code: 'ERR_BAD_REQUEST', message: /put a: value refused by the database/ });
  t.match((results[3] as PromiseRejectedResult).reason, { code: 'ERR_STORE', message: /throws failed/ });
  t.same(db.grouped, { commits: 1, writes: 5 }, 'one commit for the five');
  t.same(db.handle.prepare('SELECT k, v FROM t ORDER BY k').all(), [{ k: 'a', v: 1 }, { k: 'b', v: 2 }, { k: 'd', v: 5 }], 'the failed ones left nothing');
  // Seen by another connection once the promises settle: committed, not only written.
  const other = new Database(path, { readonly: true });
  t.teardown(() => other.close());
  t.equal((other.prepare('SELECT count(*) AS n FROM t').get() as { n: number }).n, 3);

  // A group holds at most MAX_GROUPED_WRITES; writes of a later turn are the next group.
  await Promise.all(Array.from({ length: MAX_GROUPED_WRITES + 1 }, (_, i) => put(`m${i}`, i)));
  t.same(db.grouped, { commits: 3, writes: 5 + MAX_GROUPED_WRITES + 1 });
  await put('later', 1);
  t.same(db.grouped, { commits: 4, writes: 5 + MAX_GROUPED_WRITES + 2 }, 'alone: its own commit');
});

t.test("an inventory's audit record and events, asked for grouped in one turn, share one commit", async (t) => {
  const { SqliteDb } = await import('@capstan/server/store/sqlite/db');
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  // The store's database, found through the first grouped write it is asked for.
  let db: InstanceType<typeof SqliteDb> | null = null;
  const grouped = SqliteDb.prototype.writeGrouped;
  const plain = SqliteDb.prototype.write;
  const plainWrites: string[] = [];
  SqliteDb.prototype.writeGrouped = function (this: InstanceType<typeof SqliteDb>, what, fn) {
    db = this;
    return grouped.call(this, what, fn);
  } as typeof grouped;
  SqliteDb.prototype.write = function (this: InstanceType<typeof SqliteDb>, what, fn) {
    plainWrites.push(what);
    return plain.call(this, what, fn);
  } as typeof plain;
  t.teardown(() => {
    SqliteDb.prototype.writeGrouped = grouped;
    SqliteDb.prototype.write = plain;
  });
  const at = '2024-05-01T10:00:00.000Z';
  const audit = (i: number) => ({ at, admin: null, role: null, actor_kind: 'node' as const, actor: `n${i}`, before: null, after: null, action: 'node.register', target: `n${i}`, method: '', path: '', address: '', status: 200, error: null });
  const ev = (i: number) => [{ at, type: 'node.accepted', severity: 'info' as const, node_id: `n${i}`, data: {} }];
  await Promise.all([0, 1, 2, 3].flatMap((i) => [store.admins.insertAudit(audit(i), { grouped: true }), store.insertEvents(ev(i), { grouped: true })]));
  t.same(db!.grouped, { commits: 1, writes: 8 }, 'eight writes, one commit');
  t.same(plainWrites, [], 'none on its own');
  await store.admins.insertAudit(audit(9));
  t.same(plainWrites, ['record audit'], 'not grouped: written at once, on its own');
});
