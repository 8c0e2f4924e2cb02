/**
 * The WAL's checkpoints on a thread of their own (store/sqlite/checkpointer.ts): a registry whose
 * WAL stays small never starts the thread; one whose WAL grows hands its checkpoints over, the
 * writer's own bounded by the limit; nothing written is lost, the last connection to close
 * removes the WAL, and a thread that dies gives the checkpoints back to the commits.
 */
import { existsSync, statSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import Database from 'better-sqlite3';
import { SqliteDb } from '@capstan/server/store/sqlite/db';
import { programDir, waitFor } from '../helpers/programs.js';

const KIB = 1024;

/** `count` transactions of `rows` rows of `bytes` random-ish bytes each. */
function fill(db: SqliteDb, count: number, rows: number, bytes: number, from = 0): void {
  db.handle.exec('CREATE TABLE IF NOT EXISTS blobs (id INTEGER PRIMARY KEY, body BLOB NOT NULL)');
  const put = db.handle.prepare('INSERT INTO blobs (id, body) VALUES (?, ?)');
  for (let c = 0; c < count; c++) {
    db.write('fill', () => {
      for (let r = 0; r < rows; r++) {
        const id = from + c * rows + r;
        put.run(id, Buffer.alloc(bytes, id % 251));
      }
    });
  }
}

t.test('a small registry checkpoints in its commits, as SQLite does', async (t) => {
  const path = join(programDir(t), 'small.db');
  const db = new SqliteDb({ path });
  t.teardown(() => db.close());
  fill(db, 20, 10, 1 * KIB);
  t.equal(db.checkpointer?.running, false, 'no thread');
  t.equal(db.handle.pragma('wal_autocheckpoint', { simple: true }), 1000);
});

t.test('a growing WAL is checkpointed by the thread; nothing is lost; the WAL goes with the last connection', async (t) => {
  const path = join(programDir(t), 'big.db');
  const db = new SqliteDb({ path, checkpoint: { startBytes: 256 * KIB, limitBytes: 8 * 1024 * KIB } });
  let open = true;
  t.teardown(() => open && db.close());
  fill(db, 1, 200, 4 * KIB);
  t.ok(statSync(`${path}-wal`).size >= 256 * KIB, 'the WAL grew past the threshold');
  t.equal(db.checkpointer?.running, true, 'the thread started after the commit that grew it');
  t.equal(db.handle.pragma('wal_autocheckpoint', { simple: true }), 2048, "the writer's own checkpoints only past the limit (8 MiB of 4 KiB pages)");
  t.equal(db.handle.pragma('journal_size_limit', { simple: true }), 8 * 1024 * KIB);
  await waitFor(async () => ((db.checkpointer?.stats.frames ?? 0) > 0 ? true : undefined), 'a checkpoint by the thread', 10_000);
  // More commits, each nudging the thread (at most every 100 ms): it keeps copying.
  const before = db.checkpointer!.stats.checkpoints;
  for (let i = 0; i < 5; i++) {
    fill(db, 1, 50, 4 * KIB, 1000 + i * 50);
    await waitFor(async () => (db.checkpointer!.stats.checkpoints > before + i ? true : undefined), `checkpoint after write ${i}`, 10_000);
  }
  t.equal(db.checkpointer!.stats.errors, 0);
  // A second connection sees every row, while both are open.
  const reader = new Database(path, { readonly: true });
  t.equal(reader.prepare('SELECT count(*) FROM blobs').pluck().get(), 450);
  reader.close();
  db.close();
  open = false;
  t.equal(db.checkpointer!.running, false, 'the thread closed with the store');
  t.notOk(existsSync(`${path}-wal`), 'the last connection checkpointed and removed the WAL');
  const again = new Database(path, { readonly: true });
  t.teardown(() => again.close());
  t.equal(again.prepare('SELECT count(*) FROM blobs').pluck().get(), 450, 'every row is in the database file');
  t.equal(again.prepare('SELECT sum(length(body)) FROM blobs').pluck().get(), 450 * 4 * KIB);
});

t.test('0 keeps every checkpoint in the commits, however large the WAL', async (t) => {
  const path = join(programDir(t), 'inline.db');
  const db = new SqliteDb({ path, checkpoint: { startBytes: 0, limitBytes: 8 * 1024 * KIB } });
  t.teardown(() => db.close());
  fill(db, 1, 200, 4 * KIB);
  t.equal(db.checkpointer?.running, false);
  t.equal(db.handle.pragma('wal_autocheckpoint', { simple: true }), 1000);
});

t.test('a thread that dies gives the checkpoints back to the commits', async (t) => {
  const path = join(programDir(t), 'dies.db');
  const db = new SqliteDb({ path, checkpoint: { startBytes: 256 * KIB, limitBytes: 8 * 1024 * KIB } });
  t.teardown(() => db.close());
  fill(db, 1, 200, 4 * KIB);
  t.equal(db.checkpointer?.running, true);
  await (db.checkpointer as unknown as { worker: { terminate(): Promise<number> } }).worker.terminate();
  await waitFor(async () => (db.checkpointer!.running ? undefined : true), 'the thread seen gone', 10_000);
  t.equal(db.handle.pragma('wal_autocheckpoint', { simple: true }), 1000, 'SQLite checkpoints in commits again');
  fill(db, 1, 200, 4 * KIB, 10_000);
  t.equal(db.checkpointer!.running, false, 'not started again');
  t.equal(db.handle.prepare('SELECT count(*) FROM blobs').pluck().get(), 400);
});

t.test('a database in memory has no checkpointer', async (t) => {
  const db = new SqliteDb({ path: ':memory:' });
  t.teardown(() => db.close());
  t.equal(db.checkpointer, null);
});
