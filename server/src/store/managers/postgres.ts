/**
 * Managers on PostgreSQL (see types.ts and sqlite.ts, its twin). Applying a
 * poll takes a transaction-level advisory lock (polls are applied one at a time, as SQLite's
 * IMMEDIATE transactions do) and its manager row; nodes are locked as read (FOR NO KEY UPDATE)
 * and written through the nodes part's saveNode (nodes/postgres.ts).
 */
import type pg from 'pg';
import { capstanError } from '@capstan/shared/errors';
import type { CloudIdentity, DiscoveredInstance, DiscoverySummary, ManagerInsert, ManagerRecord, ManagerStore } from './types.js';
import { managerFromInsert } from './rows.js';
import type { StoreRules } from '../rules.js';
import { NODE_COLUMNS, nodeFromRow, nodeValues, SELECT_NODE } from '../nodes/records.js';
import type { NodeRecord } from '../store.js';
import { toUtcIso } from '../time.js';
import { FIND_DISCOVERED, findParams, joinStatements } from './join.js';
import { managerFromRow, MANAGER_COLUMNS as COLUMNS } from './rows.js';
import { type PostgresDb, postgresRows, type Queryable as Q } from '../postgres/db.js';

export interface PostgresNodeWriter {
  saveNode(c: pg.PoolClient, next: NodeRecord, prev: NodeRecord | null, at: string, cause: string): Promise<void>;
}

type Row = Record<string, unknown>;
const INSERT_ROW = `INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')})`;
const LINK = `INSERT INTO node_managers (node_id, manager_id, first_seen_at, last_seen_at) VALUES ($1, $2, $3, $3)
  ON CONFLICT (node_id, manager_id) DO UPDATE SET last_seen_at = excluded.last_seen_at`;

const asManager = (r: Row) => managerFromRow(r, postgresRows);
const asNode = (r: Row) => nodeFromRow(r, postgresRows);

export class PostgresManagerStore implements ManagerStore {
  constructor(private readonly db: PostgresDb, private readonly nodes: PostgresNodeWriter, private readonly rules: StoreRules) {}

  private async manager(c: Q, id: string, lock = false): Promise<ManagerRecord | null> {
    const r = await c.query<Row>(`SELECT ${COLUMNS} FROM managers WHERE id = $1${lock ? ' FOR UPDATE' : ''}`, [id]);
    return r.rows[0] ? asManager(r.rows[0]) : null;
  }

  async listManagers(provider?: string): Promise<ManagerRecord[]> {
    return this.db.read('list managers', async (c) => (provider === undefined
      ? await c.query<Row>(`SELECT ${COLUMNS} FROM managers ORDER BY id`)
      : await c.query<Row>(`SELECT ${COLUMNS} FROM managers WHERE provider = $1 ORDER BY id`, [provider])).rows.map(asManager));
  }

  async getManager(id: string): Promise<ManagerRecord | null> {
    return this.db.read('get manager', (c) => this.manager(c, id));
  }

  async createManager(m: ManagerInsert, atRaw: string): Promise<ManagerRecord> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.tx('create manager', async (c) => {
      const rec = managerFromInsert(m, at);
      const r = await c.query(`INSERT INTO managers (${COLUMNS}) VALUES ($1, $2, $3, $4, $5, $6, $6, NULL, NULL) ON CONFLICT (id) DO NOTHING`,
        [rec.id, rec.name, rec.type, rec.provider, JSON.stringify(rec.spec), at]);
      if (r.rowCount === 0) throw capstanError('ERR_CONFLICT', `manager ${m.id} exists`);
      return rec;
    });
  }

  async updateManager(id: string, m: Omit<ManagerInsert, 'id' | 'type'>, atRaw: string): Promise<ManagerRecord | null> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.tx('update manager', async (c) => {
      const r = await c.query('UPDATE managers SET name = $1, provider = $2, spec = $3, updated_at = $4 WHERE id = $5',
        [m.name, m.provider, JSON.stringify(m.spec), at, id]);
      return r.rowCount === 0 ? null : this.manager(c, id);
    });
  }

  async deleteManager(id: string): Promise<boolean> {
    return this.db.tx('delete manager', async (c) => ((await c.query('DELETE FROM managers WHERE id = $1', [id])).rowCount ?? 0) > 0);
  }

  async exclusiveNodes(id: string): Promise<string[]> {
    return this.db.read('exclusive nodes', async (c) => (await c.query<{ node_id: string }>(`SELECT l.node_id FROM node_managers l
      WHERE l.manager_id = $1 AND NOT EXISTS (SELECT 1 FROM node_managers o WHERE o.node_id = l.node_id AND o.manager_id <> l.manager_id)
      ORDER BY l.node_id`, [id])).rows.map((r) => r.node_id));
  }

  async linkNode(nodeId: string, managerId: string, atRaw: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.tx('link node', async (c) => {
      const r = await c.query(`INSERT INTO node_managers (node_id, manager_id, first_seen_at, last_seen_at)
        SELECT n.id, m.id, $3, $3 FROM nodes n, managers m WHERE n.id = $1 AND m.id = $2
        ON CONFLICT (node_id, manager_id) DO UPDATE SET last_seen_at = excluded.last_seen_at`, [nodeId, managerId, at]);
      return (r.rowCount ?? 0) > 0;
    });
  }

  async applyDiscovery(managerId: string, instances: DiscoveredInstance[], atRaw: string): Promise<DiscoverySummary> {
    const at = toUtcIso(atRaw, 'at');
    const cause = `discovery (manager ${managerId})`;
    return this.db.tx('apply discovery', async (c) => {
      // Polls are applied one at a time across servers: two managers seeing one new instance
      // would otherwise both insert it and one would fail on the cloud-identity index. Polls are
      // minutes apart and short; ingest does not take this lock.
      await c.query("SELECT pg_advisory_xact_lock(hashtext('capstan.discovery'))");
      const manager = await this.manager(c, managerId, true);
      if (!manager) throw capstanError('ERR_NOT_FOUND', `manager ${managerId} is unknown`);
      const summary: DiscoverySummary = { created: 0, updated: 0, unchanged: 0, missing: 0, changed: [] };
      const seen = new Set<string>();
      for (const inst of instances) {
        const r = await c.query<Row>(`${SELECT_NODE} WHERE n.source_id = $1 AND n.region = $2 AND n.account_id = $3 FOR NO KEY UPDATE OF n`,
          [inst.source_id, inst.region, inst.account_id]);
        const known = r.rows[0] ? asNode(r.rows[0]) : null;
        const next = known ? this.rules.discovery.rediscovered(known, inst, at) : this.rules.discovery.discoveredNode(inst, manager, at);
        if (next !== known) await this.nodes.saveNode(c, next, known, at, cause);
        if (!known) summary.created++;
        else if (next !== known) summary.updated++;
        else summary.unchanged++;
        if (next !== known) summary.changed.push({ change: known ? 'updated' : 'created', before: known, after: next });
        await c.query(LINK, [next.id, managerId, at]);
        seen.add(next.id);
      }
      const held = (await c.query<{ node_id: string; others: string }>(`SELECT l.node_id, (SELECT count(*) FROM node_managers o
        WHERE o.node_id = l.node_id AND o.manager_id <> l.manager_id) AS others FROM node_managers l WHERE l.manager_id = $1`, [managerId])).rows;
      for (const h of held) {
        if (seen.has(h.node_id)) continue;
        if (Number(h.others) > 0) {
          await c.query('DELETE FROM node_managers WHERE node_id = $1 AND manager_id = $2', [h.node_id, managerId]);
          continue;
        }
        const r = await c.query<Row>(`${SELECT_NODE} WHERE n.id = $1 FOR NO KEY UPDATE OF n`, [h.node_id]);
        if (!r.rows[0]) continue;
        const node = asNode(r.rows[0]);
        const next = this.rules.discovery.disappeared(node, at);
        if (next !== node) {
          await this.nodes.saveNode(c, next, node, at, cause);
          summary.missing++;
          summary.changed.push({ change: 'missing', before: node, after: next });
        }
      }
      await c.query('UPDATE managers SET last_poll_at = $1, last_poll_error = NULL WHERE id = $2', [at, managerId]);
      return summary;
    });
  }

  async recordPoll(id: string, atRaw: string, error: string | null): Promise<void> {
    const at = toUtcIso(atRaw, 'at');
    await this.db.tx('record poll', (c) => c.query('UPDATE managers SET last_poll_at = $1, last_poll_error = $2 WHERE id = $3', [at, error, id]));
  }

  async adoptDiscovered(nodeId: string, identity: CloudIdentity, atRaw: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.tx('adopt discovered node', async (c) => {
      // Not while a poll is applied: it could miss the row moving to its new id and insert it again.
      await c.query("SELECT pg_advisory_xact_lock(hashtext('capstan.discovery'))");
      if ((await c.query('SELECT 1 FROM nodes WHERE id = $1', [nodeId])).rowCount) return false;
      const r = await c.query<Row>(`${SELECT_NODE} WHERE n.source_id = $1 AND n.region = $2 AND n.account_id = $3
        AND n.last_inventory_at IS NULL AND n.certificate_fingerprint IS NULL FOR UPDATE OF n`,
      [identity.source_id, identity.region, identity.account_id]);
      if (!r.rows[0]) return false;
      const old = asNode(r.rows[0]);
      const next = this.rules.discovery.adopted(old, nodeId, at);
      await c.query('UPDATE nodes SET source_id = NULL, account_id = NULL WHERE id = $1', [old.id]);
      await c.query(INSERT_ROW, nodeValues(next));
      for (const table of ['node_tags', 'node_groups', 'node_history', 'node_managers', 'node_host_keys']) {
        await c.query(`UPDATE ${table} SET node_id = $1 WHERE node_id = $2`, [nodeId, old.id]);
      }
      await c.query('DELETE FROM nodes WHERE id = $1', [old.id]);
      for (const h of this.rules.nodes.transitions(old, next, at, `agent enrolled on discovered node ${old.id}`)) {
        await c.query('INSERT INTO node_history (node_id, at, field, from_value, to_value, cause) VALUES ($1, $2, $3, $4, $5, $6)',
          [nodeId, h.at, h.field, h.from, h.to, h.cause]);
      }
      return true;
    });
  }

  async findDiscovered(identity: CloudIdentity): Promise<NodeRecord | null> {
    return this.db.read('find discovered node', async (c) => {
      const r = await c.query<Row>(`${SELECT_NODE} ${FIND_DISCOVERED((n) => `$${n}`)}`, findParams(identity));
      return r.rows[0] ? asNode(r.rows[0]) : null;
    });
  }

  async joinDiscovered(nodeId: string, identity: CloudIdentity, atRaw: string, cause: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.tx('join discovered node', async (c) => {
      // Not while a poll is applied (as adoptDiscovered).
      await c.query("SELECT pg_advisory_xact_lock(hashtext('capstan.discovery'))");
      const self = await c.query<Row>(`${SELECT_NODE} WHERE n.id = $1 FOR UPDATE OF n`, [nodeId]);
      if (!self.rows[0] || asNode(self.rows[0]).source_id !== null) return false;
      const r = await c.query<Row>(`${SELECT_NODE} ${FIND_DISCOVERED((n) => `$${n}`)} FOR UPDATE OF n`, findParams(identity));
      if (!r.rows[0]) return false;
      const old = asNode(r.rows[0]);
      if (old.id === nodeId) return false;
      for (const [sql, params] of joinStatements((n) => `$${n}`, nodeId, old, asNode(self.rows[0]), at, cause)) await c.query(sql, params);
      return true;
    });
  }
}
