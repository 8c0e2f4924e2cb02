/**
 * The embedded registry's file, and the one way every part of the SQLite store reaches it:
 * better-sqlite3 on one file, WAL mode.
 *
 * Durability: `synchronous = FULL`. The ingest deletes a run log from its spool once its batch's
 * insertRuns resolves, so a committed run must survive a power cut; in WAL mode NORMAL only syncs
 * at checkpoints and could lose the last commits while their spool files are already gone, which
 * breaks "nothing accepted with 2xx is ever lost". FULL costs one fsync of the WAL per commit,
 * which the ingest shares among the run logs of a batch (group commit, ingest/runlog.ts).
 *
 * Every write is an IMMEDIATE transaction: it takes the write lock before its first read, so a
 * second process on the same file waits (busy_timeout) instead of failing with SQLITE_BUSY
 * when a deferred transaction tries to upgrade a stale snapshot. The lifecycle sweep writes in
 * batches of a bounded size, each its own transaction, so the ingest waits for one batch at most.
 * Reads are DEFERRED transactions: the statements of one read see one snapshot.
 */
import Database from 'better-sqlite3';
import { capstanError } from '@capstan/shared/errors';
import { storeError } from '../errors.js';
import type { RowCodec } from '../row-codec.js';
import { Checkpointer, DEFAULT_CHECKPOINT, type CheckpointOptions } from './checkpointer.js';

/** Writes one group commit holds at most (writeGrouped): a later one starts the next group. */
export const MAX_GROUPED_WRITES = 64;

export interface SqliteDbOptions {
  path: string;
  /** How long a writer waits for another process's lock before giving up (ms). */
  busyTimeoutMs?: number;
  now?: () => Date;
  /** When the WAL's checkpoints move to a thread of their own (checkpointer.ts). */
  checkpoint?: CheckpointOptions;
}

export class SqliteDb {
  readonly handle: Database.Database;
  /** The clock for times the store stamps itself (manual node creation, deletion, migrations). */
  readonly now: () => Date;
  /** Statements are compiled once per SQL text; listNodes builds a handful of variants. */
  private readonly statements = new Map<string, Database.Statement>();
  /** The WAL's checkpoints off the event loop once it grows; none for a database in memory. */
  readonly checkpointer: Checkpointer | null;

  constructor(opts: SqliteDbOptions) {
    const timeout = opts.busyTimeoutMs ?? 5000;
    this.now = opts.now ?? (() => new Date());
    try {
      this.handle = new Database(opts.path, { timeout });
      this.handle.pragma('journal_mode = WAL');
      this.handle.pragma('synchronous = FULL');
      this.handle.pragma('foreign_keys = ON');
      this.handle.pragma(`busy_timeout = ${timeout}`);
      // A filtered list over 100,000 nodes scans the whole nodes table: with SQLite's 2 MB
      // default cache every scan goes through read() calls (measured: 60 → 33 ms per list).
      this.handle.pragma('cache_size = -65536');
      this.handle.pragma('mmap_size = 1073741824');
      // The savepoint each run of a batch is stored in keeps its undo pages in a sub-journal: in a
      // temporary file by default, written page by page (a pwrite each, costly in a VM), in memory
      // with this. It lives as long as one batch's transaction.
      this.handle.pragma('temp_store = MEMORY');
    } catch (err) {
      throw capstanError('ERR_STARTUP', `cannot open database ${opts.path}`, { cause: err });
    }
    this.checkpointer = this.handle.memory ? null : new Checkpointer(this.handle, opts.path, timeout, opts.checkpoint ?? DEFAULT_CHECKPOINT);
  }

  /** The statement for `sql`, compiled at its first use. */
  stmt(sql: string): Database.Statement {
    let s = this.statements.get(sql);
    if (!s) {
      s = this.handle.prepare(sql);
      // Filtered list queries vary with the request; keep the cache from growing without bound.
      if (this.statements.size > 500) this.statements.clear();
      this.statements.set(sql, s);
    }
    return s;
  }

  /** A statement used once (its text varies with every call: not worth a place in the cache). */
  prepare(sql: string): Database.Statement {
    return this.handle.prepare(sql);
  }

  /** Run `fn` in a write transaction, turning database failures into coded errors naming `what`. */
  write<T>(what: string, fn: () => T): T {
    let value: T;
    try {
      value = this.handle.transaction(fn).immediate();
    } catch (err) {
      throw storeError(what, err);
    }
    this.checkpointer?.committed();
    return value;
  }

  /**
   * `fn` in a write transaction shared with the other grouped writes asked for in the same turn
   * of the event loop (group commit): one BEGIN, each write in a savepoint of its own (one that
   * throws undoes only its own writes and rejects only its caller), one COMMIT and so one fsync of
   * the WAL for all of them. Each caller's promise settles once the commit is durable, as with
   * write(). For small writes that arrive many at a time from independent callers that wait for
   * them (inventories at enrolment, whose fsyncs were a third of a server's time). Not for a
   * write a caller may leave unawaited and expect done: it is done a turn later.
   */
  writeGrouped<T>(what: string, fn: () => T): Promise<T> {
    return new Promise<T>((resolve, reject) => {
      if (this.group === null) {
        this.group = [];
        setImmediate(() => this.commitGroup());
      }
      this.group.push({ what, fn, resolve: resolve as (v: unknown) => void, reject });
      if (this.group.length >= MAX_GROUPED_WRITES) this.commitGroup();
    });
  }

  private group: Array<{ what: string; fn: () => unknown; resolve: (v: unknown) => void; reject: (err: unknown) => void }> | null = null;
  /** Commits made for grouped writes, and the writes they held. */
  readonly grouped = { commits: 0, writes: 0 };

  private commitGroup(): void {
    const items = this.group;
    this.group = null;
    if (!items || items.length === 0) return;
    this.grouped.commits++;
    this.grouped.writes += items.length;
    if (items.length === 1) {
      const [one] = items as [NonNullable<typeof items>[number]];
      try {
        one.resolve(this.write(one.what, one.fn));
      } catch (err) {
        one.reject(err);
      }
      return;
    }
    const outcomes: Array<{ ok: true; value: unknown } | { ok: false; err: unknown }> = [];
    try {
      this.handle.transaction(() => {
        for (const it of items) {
          try {
            outcomes.push({ ok: true, value: this.handle.transaction(it.fn)() });
          } catch (err) {
            outcomes.push({ ok: false, err: storeError(it.what, err) });
          }
        }
      }).immediate();
    } catch (err) {
      // BEGIN or COMMIT failed: none of them is stored.
      for (const it of items) it.reject(storeError(it.what, err));
      return;
    }
    this.checkpointer?.committed();
    items.forEach((it, i) => {
      const o = outcomes[i]!;
      if (o.ok) it.resolve(o.value);
      else it.reject(o.err);
    });
  }

  /** Run `fn` in a read transaction (one snapshot), turning database failures into coded errors. */
  read<T>(what: string, fn: () => T): T {
    try {
      return this.handle.transaction(fn).deferred();
    } catch (err) {
      throw storeError(what, err);
    }
  }

  /**
   * `fn` as a savepoint inside the caller's write transaction: when it throws, only its own
   * writes are undone (one run of an insertRuns batch).
   */
  savepoint<A extends unknown[], T>(fn: (...args: A) => T): (...args: A) => T {
    return this.handle.transaction(fn);
  }

  close(): void {
    this.checkpointer?.close();
    if (this.handle.open) this.handle.close();
  }
}

/**
 * How rows come back from SQLite: times as ISO text already (written in one spelling, time.ts),
 * JSON as text, booleans as 0/1.
 */
export const sqliteRows: RowCodec = {
  time: (v) => (v ?? null) as string | null,
  json: (v) => JSON.parse(v as string),
  bool: (v) => v === 1,
};
