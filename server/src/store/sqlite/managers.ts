/**
 * Managers on SQLite (see managers-types.ts). Node writes go through the main store's saveNode
 * (row, tags, groups, certificate and history alike), inside this store's IMMEDIATE transaction.
 */
import type Database from 'better-sqlite3';
import { capstanError } from '@capstan/shared';
import { storeError } from '../errors.js';
import type {
  CloudIdentity, DiscoveredInstance, DiscoverySummary, ManagerInsert, ManagerRecord, ManagerStore,
} from '../managers-types.js';
import { adopted, disappeared, discoveredNode, managerFromInsert, rediscovered } from '../discovery-rules.js';
import { NODE_COLUMNS, SELECT_NODE } from '../query.js';
import type { NodeRecord } from '../store.js';
import { transitions } from '../rules.js';
import { toUtcIso } from '../time.js';
import { nodeFromRow, nodeParams } from './rows.js';

/** What the main store lends: writing a node changed by a rule (inside the caller's transaction). */
export interface SqliteNodeWriter {
  saveNode(next: NodeRecord, prev: NodeRecord | null, at: string, cause: string): void;
}

type Row = Record<string, unknown>;
const COLUMNS = 'id, name, type, provider, spec, created_at, updated_at, last_poll_at, last_poll_error';

function managerFromRow(r: Row): ManagerRecord {
  return {
    id: r.id as string,
    name: r.name as string,
    type: r.type as ManagerRecord['type'],
    provider: r.provider as string,
    spec: JSON.parse(r.spec as string) as Record<string, unknown>,
    created_at: r.created_at as string,
    updated_at: r.updated_at as string,
    last_poll_at: (r.last_poll_at as string | null) ?? null,
    last_poll_error: (r.last_poll_error as string | null) ?? null,
  };
}

const INSERT_ROW = `INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map((c) => '@' + c).join(', ')})`;

export class SqliteManagerStore implements ManagerStore {
  constructor(private readonly db: () => Database.Database, private readonly nodes: SqliteNodeWriter) {}

  private write<T>(what: string, fn: (db: Database.Database) => T): T {
    try {
      return this.db().transaction(() => fn(this.db())).immediate();
    } catch (err) {
      throw storeError(what, err);
    }
  }

  private read<T>(what: string, fn: (db: Database.Database) => T): T {
    try {
      return fn(this.db());
    } catch (err) {
      throw storeError(what, err);
    }
  }

  private manager(db: Database.Database, id: string): ManagerRecord | null {
    const r = db.prepare(`SELECT ${COLUMNS} FROM managers WHERE id = ?`).get(id) as Row | undefined;
    return r ? managerFromRow(r) : null;
  }

  async listManagers(provider?: string): Promise<ManagerRecord[]> {
    return this.read('list managers', (db) => (provider === undefined
      ? db.prepare(`SELECT ${COLUMNS} FROM managers ORDER BY id`).all()
      : db.prepare(`SELECT ${COLUMNS} FROM managers WHERE provider = ? ORDER BY id`).all(provider)) as Row[]).map(managerFromRow);
  }

  async getManager(id: string): Promise<ManagerRecord | null> {
    return this.read('get manager', (db) => this.manager(db, id));
  }

  async createManager(m: ManagerInsert, atRaw: string): Promise<ManagerRecord> {
    const at = toUtcIso(atRaw, 'at');
    return this.write('create manager', (db) => {
      if (this.manager(db, m.id)) throw capstanError('ERR_CONFLICT', `manager ${m.id} exists`);
      const rec = managerFromInsert(m, at);
      db.prepare(`INSERT INTO managers (${COLUMNS}) VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL)`)
        .run(rec.id, rec.name, rec.type, rec.provider, JSON.stringify(rec.spec), at, at);
      return rec;
    });
  }

  async updateManager(id: string, m: Omit<ManagerInsert, 'id' | 'type'>, atRaw: string): Promise<ManagerRecord | null> {
    const at = toUtcIso(atRaw, 'at');
    return this.write('update manager', (db) => {
      const r = db.prepare('UPDATE managers SET name = ?, provider = ?, spec = ?, updated_at = ? WHERE id = ?')
        .run(m.name, m.provider, JSON.stringify(m.spec), at, id);
      return r.changes === 0 ? null : this.manager(db, id);
    });
  }

  async deleteManager(id: string): Promise<boolean> {
    return this.write('delete manager', (db) => db.prepare('DELETE FROM managers WHERE id = ?').run(id).changes > 0);
  }

  async exclusiveNodes(id: string): Promise<string[]> {
    return this.read('exclusive nodes', (db) => (db.prepare(`SELECT l.node_id FROM node_managers l WHERE l.manager_id = ?
      AND NOT EXISTS (SELECT 1 FROM node_managers o WHERE o.node_id = l.node_id AND o.manager_id <> l.manager_id)
      ORDER BY l.node_id`).all(id) as Array<{ node_id: string }>).map((r) => r.node_id));
  }

  async linkNode(nodeId: string, managerId: string, atRaw: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.write('link node', (db) => {
      if (!db.prepare('SELECT 1 FROM nodes WHERE id = ?').get(nodeId) || !this.manager(db, managerId)) return false;
      db.prepare(`INSERT INTO node_managers (node_id, manager_id, first_seen_at, last_seen_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (node_id, manager_id) DO UPDATE SET last_seen_at = excluded.last_seen_at`).run(nodeId, managerId, at, at);
      return true;
    });
  }

  async applyDiscovery(managerId: string, instances: DiscoveredInstance[], atRaw: string): Promise<DiscoverySummary> {
    const at = toUtcIso(atRaw, 'at');
    const cause = `discovery (manager ${managerId})`;
    return this.write('apply discovery', (db) => {
      const manager = this.manager(db, managerId);
      if (!manager) throw capstanError('ERR_NOT_FOUND', `manager ${managerId} is unknown`);
      const summary: DiscoverySummary = { created: 0, updated: 0, unchanged: 0, missing: 0 };
      const byCloud = db.prepare(`${SELECT_NODE} WHERE n.source_id = ? AND n.region = ? AND n.account_id = ?`);
      const link = db.prepare(`INSERT INTO node_managers (node_id, manager_id, first_seen_at, last_seen_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (node_id, manager_id) DO UPDATE SET last_seen_at = excluded.last_seen_at`);
      const seen = new Set<string>();
      for (const inst of instances) {
        const row = byCloud.get(inst.source_id, inst.region, inst.account_id) as Row | undefined;
        const known = row ? nodeFromRow(row) : null;
        const next = known ? rediscovered(known, inst, at) : discoveredNode(inst, manager, at);
        if (next !== known) this.nodes.saveNode(next, known, at, cause);
        if (!known) summary.created++;
        else if (next !== known) summary.updated++;
        else summary.unchanged++;
        link.run(next.id, managerId, at, at);
        seen.add(next.id);
      }
      // Held before, not seen now: missing when no other manager holds it; otherwise this
      // manager simply no longer holds it (the others still vouch for it).
      const held = db.prepare(`SELECT l.node_id, (SELECT count(*) FROM node_managers o WHERE o.node_id = l.node_id
        AND o.manager_id <> l.manager_id) AS others FROM node_managers l WHERE l.manager_id = ?`).all(managerId) as Array<{ node_id: string; others: number }>;
      for (const h of held) {
        if (seen.has(h.node_id)) continue;
        if (h.others > 0) {
          db.prepare('DELETE FROM node_managers WHERE node_id = ? AND manager_id = ?').run(h.node_id, managerId);
          continue;
        }
        const row = db.prepare(`${SELECT_NODE} WHERE n.id = ?`).get(h.node_id) as Row | undefined;
        if (!row) continue;
        const node = nodeFromRow(row);
        const next = disappeared(node, at);
        if (next !== node) {
          this.nodes.saveNode(next, node, at, cause);
          summary.missing++;
        }
      }
      db.prepare('UPDATE managers SET last_poll_at = ?, last_poll_error = NULL WHERE id = ?').run(at, managerId);
      return summary;
    });
  }

  async recordPoll(id: string, atRaw: string, error: string | null): Promise<void> {
    const at = toUtcIso(atRaw, 'at');
    this.write('record poll', (db) => db.prepare('UPDATE managers SET last_poll_at = ?, last_poll_error = ? WHERE id = ?').run(at, error, id));
  }

  async adoptDiscovered(nodeId: string, identity: CloudIdentity, atRaw: string): Promise<boolean> {
    const at = toUtcIso(atRaw, 'at');
    return this.write('adopt discovered node', (db) => {
      if (db.prepare('SELECT 1 FROM nodes WHERE id = ?').get(nodeId)) return false;
      const row = db.prepare(`${SELECT_NODE} WHERE n.source_id = ? AND n.region = ? AND n.account_id = ?
        AND n.last_inventory_at IS NULL AND n.certificate_fingerprint IS NULL`)
        .get(identity.source_id, identity.region, identity.account_id) as Row | undefined;
      if (!row) return false;
      const old = nodeFromRow(row);
      const next = adopted(old, nodeId, at);
      // The cloud identity is unique: free it on the old row before the new row takes it.
      db.prepare('UPDATE nodes SET source_id = NULL, account_id = NULL WHERE id = ?').run(old.id);
      db.prepare(INSERT_ROW).run(nodeParams(next));
      for (const table of ['node_tags', 'node_groups', 'node_history', 'node_managers', 'node_host_keys']) {
        db.prepare(`UPDATE ${table} SET node_id = ? WHERE node_id = ?`).run(nodeId, old.id);
      }
      db.prepare('DELETE FROM nodes WHERE id = ?').run(old.id);
      const ins = db.prepare('INSERT INTO node_history (node_id, at, field, from_value, to_value, cause) VALUES (?, ?, ?, ?, ?, ?)');
      for (const h of transitions(old, next, at, `agent enrolled on discovered node ${old.id}`)) ins.run(nodeId, h.at, h.field, h.from, h.to, h.cause);
      return true;
    });
  }
}
