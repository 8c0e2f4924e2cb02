/**
 * Managers on SQLite (see types.ts). Node writes go through the nodes part's saveNode (nodes/sqlite.ts)
 * (row, tags, groups, certificate and history alike), inside this store's IMMEDIATE transaction.
 */
import { capstanError } from '@capstan/shared/errors';
import type { CloudIdentity, DiscoveredInstance, DiscoverySummary, ManagerInsert, ManagerRecord, ManagerStore } from './types.js';
import { managerFromInsert } from './rows.js';
import type { StoreRules } from '../rules.js';
import { NODE_COLUMNS, nodeFromRow, nodeParams, SELECT_NODE } from '../nodes/records.js';
import type { NodeRecord } from '../store.js';
import { toUtcIso } from '../time.js';
import { FIND_DISCOVERED, findParams, joinStatements } from './join.js';
import { managerFromRow, MANAGER_COLUMNS as COLUMNS } from './rows.js';
import { type SqliteDb, sqliteRows } from '../sqlite/db.js';

/** What the nodes part lends: writing a node changed by a rule (inside the caller's transaction). */
export interface SqliteNodeWriter {
  saveNode(next: NodeRecord, prev: NodeRecord | null, at: string, cause: string): void;
}

type Row = Record<string, unknown>;
const asManager = (r: Row) => managerFromRow(r, sqliteRows);
const asNode = (r: Row) => nodeFromRow(r, sqliteRows);

const INSERT_ROW = `INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map((c) => '@' + c).join(', ')})`;

export class SqliteManagerStore implements ManagerStore {
  constructor(private readonly db: SqliteDb, private readonly nodes: SqliteNodeWriter, private readonly rules: StoreRules) {}

  private manager(id: string): ManagerRecord | null {
    const r = this.db.prepare(`SELECT ${COLUMNS} FROM managers WHERE id = ?`).get(id) as Row | undefined;
    return r ? asManager(r) : null;
  }

  async listManagers(provider?: string): Promise<ManagerRecord[]> {
    return this.db.read('list managers', () => (provider === undefined
      ? this.db.prepare(`SELECT ${COLUMNS} FROM managers ORDER BY id`).all()
      : this.db.prepare(`SELECT ${COLUMNS} FROM managers WHERE provider = ? ORDER BY id`).all(provider)) as Row[]).map(asManager);
  }

  async getManager(id: string): Promise<ManagerRecord | null> {
    return this.db.read('get manager', () => this.manager(id));
  }

  async createManager(m: ManagerInsert, atRaw: string): Promise<ManagerRecord> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.write('create manager', () => {
      if (this.manager(m.id)) throw capstanError('ERR_CONFLICT', `manager ${m.id} exists`);
      const rec = managerFromInsert(m, at);
      this.db.prepare(`INSERT INTO managers (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL)`)
        .run(rec.id, rec.name, rec.type, rec.provider, JSON.stringify(rec.spec), at, at);
      return rec;
    });
  }

  async updateManager(id: string, m: Omit<ManagerInsert, 'id' | 'type'>, atRaw: string): Promise<ManagerRecord | null> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.write('update manager', () => {
      const r = this.db.prepare('UPDATE managers SET name = ?, provider = ?, spec = ?, updated_at = ? WHERE id = ?')
        .run(m.name, m.provider, JSON.stringify(m.spec), at, id);
      return r.changes === 0 ? null : this.manager(id);
    });
  }

  async deleteManager(id: string): Promise<boolean> {
    return this.db.write('delete manager', () => this.db.prepare('DELETE FROM managers WHERE id = ?').run(id).changes > 0);
  }

  async exclusiveNodes(id: string): Promise<string[]> {
    return this.db.read('exclusive nodes', () => (this.db.prepare(`SELECT l.node_id FROM node_managers l WHERE l.manager_id = ?
      AND NOT EXISTS (SELECT 1 FROM node_managers o WHERE o.node_id = l.node_id AND o.manager_id <> l.manager_id)
      ORDER BY l.node_id`).all(id) as Array<{ node_id: string }>).map((r) => r.node_id));
  }

  async linkNode(nodeId: string, managerId: string, atRaw: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.write('link node', () => {
      if (!this.db.prepare('SELECT 1 FROM nodes WHERE id = ?').get(nodeId) || !this.manager(managerId)) return false;
      this.db.prepare(`INSERT INTO node_managers (node_id, manager_id, first_seen_at, last_seen_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (node_id, manager_id) DO UPDATE SET last_seen_at = excluded.last_seen_at`).run(nodeId, managerId, at, at);
      return true;
    });
  }

  async applyDiscovery(managerId: string, instances: DiscoveredInstance[], atRaw: string): Promise<DiscoverySummary> {
    const at = toUtcIso(atRaw, 'at');
    const cause = `discovery (manager ${managerId})`;
    return this.db.write('apply discovery', () => {
      const manager = this.manager(managerId);
      if (!manager) throw capstanError('ERR_NOT_FOUND', `manager ${managerId} is unknown`);
      const summary: DiscoverySummary = { created: 0, updated: 0, unchanged: 0, missing: 0, changed: [] };
      const byCloud = this.db.prepare(`${SELECT_NODE} WHERE n.source_id = ? AND n.region = ? AND n.account_id = ?`);
      const link = this.db.prepare(`INSERT INTO node_managers (node_id, manager_id, first_seen_at, last_seen_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (node_id, manager_id) DO UPDATE SET last_seen_at = excluded.last_seen_at`);
      const seen = new Set<string>();
      for (const inst of instances) {
        const row = byCloud.get(inst.source_id, inst.region, inst.account_id) as Row | undefined;
        const known = row ? asNode(row) : null;
        const next = known ? this.rules.discovery.rediscovered(known, inst, at) : this.rules.discovery.discoveredNode(inst, manager, at);
        if (next !== known) this.nodes.saveNode(next, known, at, cause);
        if (!known) summary.created++;
        else if (next !== known) summary.updated++;
        else summary.unchanged++;
        if (next !== known) summary.changed.push({ change: known ? 'updated' : 'created', before: known, after: next });
        link.run(next.id, managerId, at, at);
        seen.add(next.id);
      }
      // Held before, not seen now: missing when no other manager holds it; otherwise this
      // manager simply no longer holds it (the others still vouch for it).
      const held = this.db.prepare(`SELECT l.node_id, (SELECT count(*) FROM node_managers o WHERE o.node_id = l.node_id
        AND o.manager_id <> l.manager_id) AS others FROM node_managers l WHERE l.manager_id = ?`).all(managerId) as Array<{ node_id: string; others: number }>;
      for (const h of held) {
        if (seen.has(h.node_id)) continue;
        if (h.others > 0) {
          this.db.prepare('DELETE FROM node_managers WHERE node_id = ? AND manager_id = ?').run(h.node_id, managerId);
          continue;
        }
        const row = this.db.prepare(`${SELECT_NODE} WHERE n.id = ?`).get(h.node_id) as Row | undefined;
        if (!row) continue;
        const node = asNode(row);
        const next = this.rules.discovery.disappeared(node, at);
        if (next !== node) {
          this.nodes.saveNode(next, node, at, cause);
          summary.missing++;
          summary.changed.push({ change: 'missing', before: node, after: next });
        }
      }
      this.db.prepare('UPDATE managers SET last_poll_at = ?, last_poll_error = NULL WHERE id = ?').run(at, managerId);
      return summary;
    });
  }

  async recordPoll(id: string, atRaw: string, error: string | null): Promise<void> {
    const at = toUtcIso(atRaw, 'at');
    this.db.write('record poll', () => this.db.prepare('UPDATE managers SET last_poll_at = ?, last_poll_error = ? WHERE id = ?').run(at, error, id));
  }

  async adoptDiscovered(nodeId: string, identity: CloudIdentity, atRaw: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.write('adopt discovered node', () => {
      if (this.db.prepare('SELECT 1 FROM nodes WHERE id = ?').get(nodeId)) return false;
      const row = this.db.prepare(`${SELECT_NODE} WHERE n.source_id = ? AND n.region = ? AND n.account_id = ?
        AND n.last_inventory_at IS NULL AND n.certificate_fingerprint IS NULL`)
        .get(identity.source_id, identity.region, identity.account_id) as Row | undefined;
      if (!row) return false;
      const old = asNode(row);
      const next = this.rules.discovery.adopted(old, nodeId, at);
      // The cloud identity is unique: free it on the old row before the new row takes it.
      this.db.prepare('UPDATE nodes SET source_id = NULL, account_id = NULL WHERE id = ?').run(old.id);
      this.db.prepare(INSERT_ROW).run(nodeParams(next));
      for (const table of ['node_tags', 'node_groups', 'node_history', 'node_managers', 'node_host_keys']) {
        this.db.prepare(`UPDATE ${table} SET node_id = ? WHERE node_id = ?`).run(nodeId, old.id);
      }
      this.db.prepare('DELETE FROM nodes WHERE id = ?').run(old.id);
      const ins = this.db.prepare('INSERT INTO node_history (node_id, at, field, from_value, to_value, cause) VALUES (?, ?, ?, ?, ?, ?)');
      for (const h of this.rules.nodes.transitions(old, next, at, `agent enrolled on discovered node ${old.id}`)) ins.run(nodeId, h.at, h.field, h.from, h.to, h.cause);
      return true;
    });
  }

  async findDiscovered(identity: CloudIdentity): Promise<NodeRecord | null> {
    return this.db.read('find discovered node', () => {
      const r = this.db.prepare(`${SELECT_NODE} ${FIND_DISCOVERED(() => '?')}`).get(...findParams(identity)) as Row | undefined;
      return r ? asNode(r) : null;
    });
  }

  async joinDiscovered(nodeId: string, identity: CloudIdentity, atRaw: string, cause: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.db.write('join discovered node', () => {
      const self = this.db.prepare(`${SELECT_NODE} WHERE n.id = ?`).get(nodeId) as Row | undefined;
      if (!self || asNode(self).source_id !== null) return false;
      const r = this.db.prepare(`${SELECT_NODE} ${FIND_DISCOVERED(() => '?')}`).get(...findParams(identity)) as Row | undefined;
      if (!r) return false;
      const old = asNode(r);
      if (old.id === nodeId) return false;
      for (const [sql, params] of joinStatements(() => '?', nodeId, old, asNode(self), at, cause)) this.db.prepare(sql).run(...params);
      return true;
    });
  }
}
