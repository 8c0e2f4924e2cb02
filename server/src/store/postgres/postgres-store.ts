/**
 * The registry on PostgreSQL, for several server processes sharing one database.
 *
 * Concurrency: every read-modify-write of a node locks its row first (`FOR NO KEY UPDATE`,
 * which does not block the foreign-key checks of other runs' inserts). Two processes ingesting
 * the same run therefore queue on the node row; the second one's `ON CONFLICT DO NOTHING` then
 * sees the first one's committed run and reports a duplicate. The lock also keeps a node from
 * being deleted between the existence check and the insert.
 *
 * Hot statements are named, so node-pg prepares them once per connection.
 */
import pg from 'pg';
import { capstanError } from '@capstan/shared';
import type {
  Acceptance, InsertRunResult, NodeListQuery, NodeRecord, NodeUpsertFromInventory, Page, RunInsert,
  RunRecord, Store,
} from '../store.js';
import { storeError } from '../errors.js';
import { checkInventory, checkRun, refuseNul } from '../input.js';
import { checkPaging, NODE_COLUMNS, nodeFilter, RUN_COLUMNS } from '../query.js';
import { LIVE_STATES, manualNode, mergeInventory, nodeFromInventory, withAcceptance, withState } from '../rules.js';
import { migratePostgres } from './migrate.js';
import { nodeFromRow, nodeValues, runFromRow } from './rows.js';

export interface PostgresStoreOptions {
  url: string;
  poolSize?: number;
  /** Keep the registry in this schema (created by migrate() if missing); default: the search_path. */
  schema?: string;
  now?: () => Date;
  /** Told about connections that fail while idle in the pool (the next query reports it too). */
  onIdleError?: (err: Error) => void;
}

type Q = pg.Pool | pg.PoolClient;

const SELECT_NODE = `SELECT ${NODE_COLUMNS.join(', ')} FROM nodes`;
const INSERT_NODE = `INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')})`;
const UPDATE_NODE = `UPDATE nodes SET ${NODE_COLUMNS.slice(1).map((c, i) => `${c} = $${i + 2}`).join(', ')} WHERE id = $1`;
const LIVE = LIVE_STATES.map((s) => `'${s}'`).join(', ');
/** Postgres text cannot hold U+0000, so no stored id has one: answer "absent" without asking. */
const impossibleId = (id: string) => id.includes('\u0000');
// A plain identifier: it goes into the connection's search_path and into CREATE SCHEMA.
const SCHEMA_NAME = /^[a-z_][a-z0-9_]{0,62}$/;

export class PostgresStore implements Store {
  private readonly pool: pg.Pool;
  private readonly schema: string | undefined;
  private readonly now: () => Date;
  private closed = false;

  constructor(opts: PostgresStoreOptions) {
    if (opts.schema !== undefined && !SCHEMA_NAME.test(opts.schema)) {
      throw capstanError('ERR_CONFIG', 'database schema must be a lower-case identifier');
    }
    this.schema = opts.schema;
    this.now = opts.now ?? (() => new Date());
    this.pool = new pg.Pool({
      connectionString: opts.url,
      max: opts.poolSize ?? 10,
      // Set per connection, so every statement (and every prepared plan) resolves tables here.
      // node-pg lets an `options` parameter in the URL win over this one: do not put one there.
      ...(opts.schema !== undefined ? { options: `-c search_path=${opts.schema}` } : {}),
    });
    // Without a listener, an idle connection dropped by the server would crash the process.
    this.pool.on('error', (err) => opts.onIdleError?.(err));
  }

  private async query<R extends pg.QueryResultRow>(what: string, q: Q, config: pg.QueryConfig): Promise<pg.QueryResult<R>> {
    try {
      return await q.query<R>(config);
    } catch (err) {
      throw storeError(what, err);
    }
  }

  /** Run `fn` in one transaction on one connection; a connection that broke is not reused. */
  private async tx<T>(what: string, fn: (c: pg.PoolClient) => Promise<T>): Promise<T> {
    let c: pg.PoolClient;
    try {
      c = await this.pool.connect();
    } catch (err) {
      throw storeError(what, err);
    }
    try {
      await c.query('BEGIN');
      const result = await fn(c);
      await c.query('COMMIT');
      c.release();
      return result;
    } catch (err) {
      await c.query('ROLLBACK').then(() => c.release(), (e: Error) => c.release(e));
      throw storeError(what, err);
    }
  }

  private async lockNode(what: string, c: pg.PoolClient, id: string): Promise<NodeRecord | null> {
    const { rows } = await this.query(what, c, { name: 'node_lock', text: `${SELECT_NODE} WHERE id = $1 FOR NO KEY UPDATE`, values: [id] });
    return rows[0] ? nodeFromRow(rows[0]) : null;
  }

  async migrate(): Promise<void> {
    await this.tx('migrate', (c) => migratePostgres(c, this.schema));
  }

  async close(): Promise<void> {
    if (this.closed) return;
    this.closed = true;
    await this.pool.end();
  }

  async getNode(id: string): Promise<NodeRecord | null> {
    if (impossibleId(id)) return null;
    const { rows } = await this.query('getNode', this.pool, { name: 'node_get', text: `${SELECT_NODE} WHERE id = $1`, values: [id] });
    return rows[0] ? nodeFromRow(rows[0]) : null;
  }

  async listNodes(q: NodeListQuery): Promise<Page<NodeRecord>> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const values: unknown[] = [];
    const where = nodeFilter(q, (v) => `$${values.push(v)}`, 'ILIKE');
    const { rows } = await this.query('listNodes', this.pool, {
      text: `SELECT count(*) OVER () AS total, ${NODE_COLUMNS.join(', ')} FROM nodes ${where}
        ORDER BY hostname, id LIMIT $${values.length + 1} OFFSET $${values.length + 2}`,
      values: [...values, limit, offset],
    });
    const total = rows[0] ? Number(rows[0].total) : await this.countPastEnd('listNodes', `SELECT count(*) AS n FROM nodes ${where}`, values, offset);
    return { data: rows.map(nodeFromRow), total };
  }

  /**
   * The lists get their total from `count(*) OVER ()` in the page query itself (one snapshot,
   * one round trip). A page past the end has no row to carry it: only then count separately.
   */
  private async countPastEnd(what: string, text: string, values: unknown[], offset: number): Promise<number> {
    if (offset === 0) return 0;
    const { rows } = await this.query<{ n: string }>(what, this.pool, { text, values });
    return Number(rows[0]!.n);
  }

  async upsertFromInventory(inv: NodeUpsertFromInventory): Promise<NodeRecord> {
    const { receivedAt, document } = checkInventory(inv);
    return this.tx('upsertFromInventory', async (c) => {
      // Two first inventories of one node may race: the loser of the insert merges instead.
      const fresh = nodeFromInventory(inv);
      const ins = await this.query('upsertFromInventory', c, {
        name: 'node_insert_new', text: `${INSERT_NODE} ON CONFLICT (id) DO NOTHING`, values: nodeValues(fresh),
      });
      let next = fresh;
      if (ins.rowCount === 0) {
        const known = await this.lockNode('upsertFromInventory', c, inv.id);
        // Deleted between our insert attempt and the lock: retrying registers it afresh.
        if (!known) throw capstanError('ERR_STORE', `node ${inv.id} was deleted concurrently`);
        next = mergeInventory(known, inv);
        await this.query('upsertFromInventory', c, { name: 'node_update', text: UPDATE_NODE, values: nodeValues(next) });
      }
      // Keep only the newest document; an older one arriving late is dropped.
      await this.query('upsertFromInventory', c, {
        name: 'inventory_upsert',
        text: `INSERT INTO inventories (node_id, received_at, document) VALUES ($1, $2, $3)
          ON CONFLICT (node_id) DO UPDATE SET received_at = excluded.received_at, document = excluded.document
          WHERE excluded.received_at >= inventories.received_at`,
        values: [inv.id, receivedAt, document],
      });
      return next;
    });
  }

  async createNode(n: Parameters<Store['createNode']>[0]): Promise<NodeRecord> {
    refuseNul(n);
    const node = manualNode(n, this.now().toISOString());
    const ins = await this.query('createNode', this.pool, {
      name: 'node_insert_new', text: `${INSERT_NODE} ON CONFLICT (id) DO NOTHING`, values: nodeValues(node),
    });
    if (ins.rowCount === 0) throw capstanError('ERR_NODE_EXISTS', `node ${n.id} already exists`);
    return node;
  }

  async setAcceptance(id: string, accepted: Acceptance, at: string): Promise<NodeRecord | null> {
    return this.update('setAcceptance', id, (node) => withAcceptance(node, accepted, at));
  }

  async setState(id: string, state: string, at: string): Promise<NodeRecord | null> {
    refuseNul({ state });
    return this.update('setState', id, (node) => withState(node, state, at));
  }

  /** Lock, change with a rule from rules.ts, write back if anything changed. */
  private async update(what: string, id: string, change: (n: NodeRecord) => NodeRecord): Promise<NodeRecord | null> {
    if (impossibleId(id)) return null;
    return this.tx(what, async (c) => {
      const node = await this.lockNode(what, c, id);
      if (!node) return null;
      const next = change(node);
      if (next !== node) await this.query(what, c, { name: 'node_update', text: UPDATE_NODE, values: nodeValues(next) });
      return next;
    });
  }

  async deleteNode(id: string): Promise<boolean> {
    if (impossibleId(id)) return false;
    // Runs and the inventory go with it through ON DELETE CASCADE.
    const res = await this.query('deleteNode', this.pool, { text: 'DELETE FROM nodes WHERE id = $1', values: [id] });
    return (res.rowCount ?? 0) > 0;
  }

  async getInventory(nodeId: string): Promise<{ received_at: string; inventory: unknown } | null> {
    if (impossibleId(nodeId)) return null;
    const { rows } = await this.query('getInventory', this.pool, {
      name: 'inventory_get', text: 'SELECT received_at, document FROM inventories WHERE node_id = $1', values: [nodeId],
    });
    return rows[0] ? { received_at: new Date(rows[0].received_at).toISOString(), inventory: rows[0].document } : null;
  }

  async insertRun(run: RunInsert): Promise<InsertRunResult> {
    const { startedUtc, receivedAt, counts, outcomes } = checkRun(run);
    return this.tx('insertRun', async (c): Promise<InsertRunResult> => {
      const lock = await this.query('insertRun', c, {
        name: 'run_lock_node', text: 'SELECT 1 FROM nodes WHERE id = $1 FOR NO KEY UPDATE', values: [run.node_id],
      });
      if (lock.rowCount === 0) throw capstanError('ERR_NODE_UNKNOWN', `node ${run.node_id} is not registered`);
      const ins = await this.query<{ id: string }>('insertRun', c, {
        name: 'run_insert',
        text: `INSERT INTO runs (node_id, started_at, started_at_utc, config_id, complete, report_count,
            counts, outcomes, file_name, sha256, received_at, log_compressed)
          VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12)
          ON CONFLICT (node_id, started_at_utc) DO NOTHING RETURNING id`,
        values: [run.node_id, run.started_at, startedUtc, run.config_id ?? null, run.complete, run.report_count,
          counts, outcomes, run.file_name, run.sha256, receivedAt, run.log_compressed],
      });
      if (ins.rowCount === 0) {
        const dup = await this.query<{ id: string }>('insertRun', c, {
          name: 'run_find', text: 'SELECT id FROM runs WHERE node_id = $1 AND started_at_utc = $2', values: [run.node_id, startedUtc],
        });
        return { inserted: false, reason: 'duplicate', id: Number(dup.rows[0]!.id) };
      }
      // A back-filled older run must not move last_run_at or last_config_id backwards. SET
      // expressions all see the old row, so the config test uses the old last_run_at.
      await this.query('insertRun', c, {
        name: 'run_update_node',
        text: `UPDATE nodes SET
            last_config_id = CASE WHEN last_run_at IS NULL OR last_run_at <= $2 THEN $3 ELSE last_config_id END,
            last_run_at = GREATEST(last_run_at, $2),
            status = CASE WHEN state IN (${LIVE}) THEN 'reachable' ELSE 'unreachable' END,
            updated_at = GREATEST(updated_at, $4)
          WHERE id = $1`,
        values: [run.node_id, startedUtc, run.config_id ?? null, receivedAt],
      });
      return { inserted: true, id: Number(ins.rows[0]!.id) };
    });
  }

  async listRuns(nodeId: string, page: number, perPage: number): Promise<Page<RunRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    if (impossibleId(nodeId)) return { data: [], total: 0 };
    const { rows } = await this.query('listRuns', this.pool, {
      name: 'runs_list',
      // (node_id, started_at_utc) is unique, so this order is total and paging is stable.
      text: `SELECT count(*) OVER () AS total, ${RUN_COLUMNS.join(', ')} FROM runs WHERE node_id = $1
        ORDER BY started_at_utc DESC LIMIT $2 OFFSET $3`,
      values: [nodeId, limit, offset],
    });
    const total = rows[0] ? Number(rows[0].total) : await this.countPastEnd('listRuns', 'SELECT count(*) AS n FROM runs WHERE node_id = $1', [nodeId], offset);
    return { data: rows.map(runFromRow), total };
  }

  async getRunLog(runId: number): Promise<Buffer | null> {
    if (!Number.isSafeInteger(runId)) return null;
    const { rows } = await this.query<{ log_compressed: Buffer }>('getRunLog', this.pool, {
      name: 'run_log', text: 'SELECT log_compressed FROM runs WHERE id = $1', values: [runId],
    });
    return rows[0] ? rows[0].log_compressed : null;
  }
}
