/**
 * Multi-row statements on SQLite: a batch of any length is written in the fixed sizes, every row
 * once and in order, and a row of the wrong width is refused before anything is bound.
 */
import t from 'tap';
import { SqliteDb } from '@capstan/server/store/sqlite/db';
import { MULTI_ROW_MAX, MultiRow } from '@capstan/server/store/sqlite/multirow';

const open = () => {
  const db = new SqliteDb({ path: ':memory:' });
  db.handle.exec('CREATE TABLE pairs (k INTEGER PRIMARY KEY, v TEXT NOT NULL)');
  return db;
};

t.test('every row of a batch of any length, in order', async (t) => {
  const rows = new MultiRow('INSERT INTO pairs (k, v)', 2);
  for (const n of [0, 1, 7, MULTI_ROW_MAX, MULTI_ROW_MAX + 1, 2 * MULTI_ROW_MAX + 45]) {
    const db = open();
    const batch = Array.from({ length: n }, (_, i) => [i, `v${i}`]);
    rows.run(db, batch);
    const stored = db.handle.prepare('SELECT k, v FROM pairs ORDER BY rowid').raw(true).all();
    t.same(stored, batch, `${n} rows`);
    db.handle.close();
  }
});

t.test('a row of the wrong width is refused', async (t) => {
  const db = open();
  const rows = new MultiRow('INSERT INTO pairs (k, v)', 2);
  t.throws(() => rows.run(db, [[1, 'a'], [2]]), RangeError);
  t.throws(() => rows.run(db, [[1, 'a', 'extra']]), RangeError);
  t.equal((db.handle.prepare('SELECT count(*) AS n FROM pairs').get() as { n: number }).n, 0, 'nothing written');
  db.handle.close();
});
