/**
 * The embedded registry: better-sqlite3 on one file, WAL mode.
 *
 * Durability: `synchronous = FULL`. The ingest deletes a run log from its spool once insertRun
 * resolves, so a committed run must survive a power cut; in WAL mode NORMAL only syncs at
 * checkpoints and could lose the last commits while their spool files are already gone, which
 * breaks "nothing accepted with 2xx is ever lost". FULL costs one fsync of the WAL per commit.
 *
 * Every write is an IMMEDIATE transaction: it takes the write lock before its first read, so a
 * second process on the same file waits (busy_timeout) instead of failing with SQLITE_BUSY
 * when a deferred transaction tries to upgrade a stale snapshot.
 */
import Database from 'better-sqlite3';
import { capstanError } from '@capstan/shared';
import type {
  Acceptance, InsertRunResult, NodeListQuery, NodeRecord, NodeUpsertFromInventory, Page, RunInsert,
  RunRecord, Store,
} from '../store.js';
import { storeError } from '../errors.js';
import { checkInventory, checkRun, refuseNul } from '../input.js';
import { checkPaging, NODE_COLUMNS, nodeFilter, RUN_COLUMNS } from '../query.js';
import { LIVE_STATES, manualNode, mergeInventory, nodeFromInventory, withAcceptance, withState } from '../rules.js';
import { migrateSqlite } from './migrate.js';
import { nodeFromRow, nodeParams, runFromRow } from './rows.js';

export interface SqliteStoreOptions {
  path: string;
  /** How long a writer waits for another process's lock before giving up (ms). */
  busyTimeoutMs?: number;
  now?: () => Date;
}

const SELECT_NODE = `SELECT ${NODE_COLUMNS.join(', ')} FROM nodes`;
const INSERT_NODE = `INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map((c) => '@' + c).join(', ')})`;
const UPDATE_NODE = `UPDATE nodes SET ${NODE_COLUMNS.filter((c) => c !== 'id').map((c) => `${c} = @${c}`).join(', ')} WHERE id = @id`;
const LIVE = LIVE_STATES.map((s) => `'${s}'`).join(', ');

export class SqliteStore implements Store {
  private readonly db: Database.Database;
  private readonly now: () => Date;
  /** Statements are compiled once per SQL text; listNodes builds a handful of variants. */
  private readonly statements = new Map<string, Database.Statement>();

  constructor(opts: SqliteStoreOptions) {
    const timeout = opts.busyTimeoutMs ?? 5000;
    this.now = opts.now ?? (() => new Date());
    try {
      this.db = new Database(opts.path, { timeout });
      this.db.pragma('journal_mode = WAL');
      this.db.pragma('synchronous = FULL');
      this.db.pragma('foreign_keys = ON');
      this.db.pragma(`busy_timeout = ${timeout}`);
    } catch (err) {
      throw capstanError('ERR_STARTUP', `cannot open database ${opts.path}`, { cause: err });
    }
  }

  private stmt(sql: string): Database.Statement {
    let s = this.statements.get(sql);
    if (!s) {
      s = this.db.prepare(sql);
      this.statements.set(sql, s);
    }
    return s;
  }

  /** Run `fn` in a write transaction, turning database failures into coded errors. */
  private write<T>(what: string, fn: () => T): T {
    try {
      return this.db.transaction(fn).immediate();
    } catch (err) {
      throw storeError(what, err);
    }
  }

  private read<T>(what: string, fn: () => T): T {
    try {
      return this.db.transaction(fn).deferred();
    } catch (err) {
      throw storeError(what, err);
    }
  }

  private node(id: string): NodeRecord | null {
    const row = this.stmt(`${SELECT_NODE} WHERE id = ?`).get(id) as Record<string, unknown> | undefined;
    return row ? nodeFromRow(row) : null;
  }

  async migrate(): Promise<void> {
    try {
      migrateSqlite(this.db, this.now);
    } catch (err) {
      throw storeError('migrate', err);
    }
  }

  async close(): Promise<void> {
    if (this.db.open) this.db.close();
  }

  async getNode(id: string): Promise<NodeRecord | null> {
    return this.read('getNode', () => this.node(id));
  }

  async listNodes(q: NodeListQuery): Promise<Page<NodeRecord>> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const values: unknown[] = [];
    const where = nodeFilter(q, (v) => (values.push(v), '?'), 'LIKE');
    // Count and page in one read transaction, so the total describes the page's snapshot.
    return this.read('listNodes', () => {
      const { n } = this.stmt(`SELECT count(*) AS n FROM nodes ${where}`).get(...values) as { n: number };
      const rows = this.stmt(`${SELECT_NODE} ${where} ORDER BY hostname, id LIMIT ? OFFSET ?`)
        .all(...values, limit, offset) as Record<string, unknown>[];
      return { data: rows.map(nodeFromRow), total: n };
    });
  }

  async upsertFromInventory(inv: NodeUpsertFromInventory): Promise<NodeRecord> {
    const { receivedAt, document } = checkInventory(inv);
    return this.write('upsertFromInventory', () => {
      const known = this.node(inv.id);
      const next = known ? mergeInventory(known, inv) : nodeFromInventory(inv);
      this.stmt(known ? UPDATE_NODE : INSERT_NODE).run(nodeParams(next));
      // Keep only the newest document; an older one arriving late is dropped.
      this.stmt(`INSERT INTO inventories (node_id, received_at, document) VALUES (?, ?, ?)
        ON CONFLICT (node_id) DO UPDATE SET received_at = excluded.received_at, document = excluded.document
        WHERE excluded.received_at >= inventories.received_at`).run(inv.id, receivedAt, document);
      return next;
    });
  }

  async createNode(n: Parameters<Store['createNode']>[0]): Promise<NodeRecord> {
    refuseNul(n);
    const node = manualNode(n, this.now().toISOString());
    return this.write('createNode', () => {
      const { changes } = this.stmt(`${INSERT_NODE} ON CONFLICT (id) DO NOTHING`).run(nodeParams(node));
      if (changes === 0) throw capstanError('ERR_NODE_EXISTS', `node ${n.id} already exists`);
      return node;
    });
  }

  async setAcceptance(id: string, accepted: Acceptance, at: string): Promise<NodeRecord | null> {
    return this.update('setAcceptance', id, (node) => withAcceptance(node, accepted, at));
  }

  async setState(id: string, state: string, at: string): Promise<NodeRecord | null> {
    refuseNul({ state });
    return this.update('setState', id, (node) => withState(node, state, at));
  }

  /** Read, change with a rule from rules.ts, write back if anything changed. */
  private update(what: string, id: string, change: (n: NodeRecord) => NodeRecord): NodeRecord | null {
    return this.write(what, () => {
      const node = this.node(id);
      if (!node) return null;
      const next = change(node);
      if (next !== node) this.stmt(UPDATE_NODE).run(nodeParams(next));
      return next;
    });
  }

  async deleteNode(id: string): Promise<boolean> {
    // Runs and the inventory go with it through ON DELETE CASCADE (foreign_keys is on).
    return this.write('deleteNode', () => this.stmt('DELETE FROM nodes WHERE id = ?').run(id).changes > 0);
  }

  async getInventory(nodeId: string): Promise<{ received_at: string; inventory: unknown } | null> {
    const row = this.read('getInventory', () =>
      this.stmt('SELECT received_at, document FROM inventories WHERE node_id = ?').get(nodeId)) as
      { received_at: string; document: string } | undefined;
    return row ? { received_at: row.received_at, inventory: JSON.parse(row.document) } : null;
  }

  async insertRun(run: RunInsert): Promise<InsertRunResult> {
    const { startedUtc, receivedAt, counts, outcomes } = checkRun(run);
    return this.write('insertRun', (): InsertRunResult => {
      if (!this.stmt('SELECT 1 FROM nodes WHERE id = ?').get(run.node_id)) {
        throw capstanError('ERR_NODE_UNKNOWN', `node ${run.node_id} is not registered`);
      }
      const ins = this.stmt(`INSERT INTO runs (node_id, started_at, started_at_utc, config_id, complete,
          report_count, counts, outcomes, file_name, sha256, received_at, log_compressed)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?) ON CONFLICT (node_id, started_at_utc) DO NOTHING`)
        .run(run.node_id, run.started_at, startedUtc, run.config_id ?? null, run.complete ? 1 : 0, run.report_count,
          counts, outcomes, run.file_name, run.sha256, receivedAt, run.log_compressed);
      if (ins.changes === 0) {
        const dup = this.stmt('SELECT id FROM runs WHERE node_id = ? AND started_at_utc = ?')
          .get(run.node_id, startedUtc) as { id: number };
        return { inserted: false, reason: 'duplicate', id: dup.id };
      }
      // A back-filled older run must not move last_run_at or last_config_id backwards. SET
      // expressions all see the old row, so the config test uses the old last_run_at.
      this.stmt(`UPDATE nodes SET
          last_config_id = CASE WHEN last_run_at IS NULL OR last_run_at <= @t THEN @config ELSE last_config_id END,
          last_run_at = CASE WHEN last_run_at IS NULL OR last_run_at < @t THEN @t ELSE last_run_at END,
          status = CASE WHEN state IN (${LIVE}) THEN 'reachable' ELSE 'unreachable' END,
          updated_at = max(updated_at, @received)
        WHERE id = @id`).run({ id: run.node_id, t: startedUtc, config: run.config_id ?? null, received: receivedAt });
      return { inserted: true, id: Number(ins.lastInsertRowid) };
    });
  }

  async listRuns(nodeId: string, page: number, perPage: number): Promise<Page<RunRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    return this.read('listRuns', () => {
      const { n } = this.stmt('SELECT count(*) AS n FROM runs WHERE node_id = ?').get(nodeId) as { n: number };
      // (node_id, started_at_utc) is unique, so this order is total and paging is stable.
      const rows = this.stmt(`SELECT ${RUN_COLUMNS.join(', ')} FROM runs WHERE node_id = ?
        ORDER BY started_at_utc DESC LIMIT ? OFFSET ?`).all(nodeId, limit, offset) as Record<string, unknown>[];
      return { data: rows.map(runFromRow), total: n };
    });
  }

  async getRunLog(runId: number): Promise<Buffer | null> {
    if (!Number.isSafeInteger(runId)) return null;
    const row = this.read('getRunLog', () =>
      this.stmt('SELECT log_compressed FROM runs WHERE id = ?').get(runId)) as { log_compressed: Buffer } | undefined;
    return row ? row.log_compressed : null;
  }
}
