/**
 * Inventories on SQLite: the newest document of each node as sent, its queryable copy (the
 * filter language's tables, migration 15) and what changed between two inventories.
 */
import type { SqliteDb } from '../../sqlite/db.js';
import { checkInventory, checkPaging } from '../../input.js';
import type { Page } from '../../store.js';
import type { SqliteNodes } from '../sqlite.js';
import type { InventoryChangeRecord, InventoryStore, NodeRecord, NodeUpsertFromInventory } from '../types.js';
import {
  diffInventory, indexInventory, MAX_CHANGES_PER_INVENTORY, softwarePattern, type IndexedBefore, type InventoryIndex,
} from './indexing.js';

export class SqliteInventory implements InventoryStore {
  constructor(private readonly db: SqliteDb, private readonly nodes: SqliteNodes) {}

  async upsertFromInventory(inv: NodeUpsertFromInventory): Promise<NodeRecord> {
    const { receivedAt, document } = checkInventory(inv);
    // Grouped with the other inventories of this turn: one commit (its callers wait for it).
    return this.db.writeGrouped('upsertFromInventory', () => {
      const known = this.nodes.node(inv.id);
      const revoked = !!inv.auto_accept &&
        !!this.db.stmt('SELECT 1 FROM revoked_certificates WHERE fingerprint = ?').get(inv.certificate_fingerprint);
      const auto = !!inv.auto_accept && !revoked;
      const next = known ? this.nodes.rules.mergeInventory(known, inv, auto) : this.nodes.rules.nodeFromInventory(inv, auto);
      this.nodes.saveNode(next, known, receivedAt, 'inventory', this.nodes.rules.acceptCause(inv, auto, revoked));
      // A conflicting certificate's inventory is not the node's: only the conflict is kept.
      if (known && this.nodes.rules.isCertificateConflict(known, inv)) return next;
      // Keep only the newest document; an older one arriving late is dropped.
      const { changes } = this.db.stmt(`INSERT INTO inventories (node_id, received_at, document) VALUES (?, ?, ?)
        ON CONFLICT (node_id) DO UPDATE SET received_at = excluded.received_at, document = excluded.document
        WHERE excluded.received_at >= inventories.received_at`).run(inv.id, receivedAt, document);
      if (changes > 0) this.writeIndex(inv.id, indexInventory(inv.inventory as Record<string, unknown>), receivedAt);
      return next;
    });
  }

  /** The queryable copy of a node's newest inventory (migration 15), inside the caller's transaction. */
  private writeIndex(nodeId: string, ix: InventoryIndex, at: string): void {
    const get = this.db.stmt('SELECT id FROM package_versions WHERE name = ? AND version = ?');
    const add = this.db.stmt('INSERT INTO package_versions (name, version, version_key) VALUES (?, ?, ?)');
    const ids = ix.packages.map((pk) => {
      const row = get.get(pk.name, pk.version) as { id: number } | undefined;
      return row ? row.id : Number(add.run(pk.name, pk.version, pk.key).lastInsertRowid);
    }).sort((a, b) => a - b);
    const old = this.db.stmt('SELECT key, package_ids, os_kernel FROM node_inventory WHERE node_id = ?').get(nodeId) as { key: number; package_ids: string; os_kernel: string | null } | undefined;
    if (old) {
      // What changed since the last inventory, kept like changes (retention.changes).
      const before: IndexedBefore = {
        packages: this.db.stmt('SELECT name, version FROM package_versions WHERE id IN (SELECT value FROM json_each(?))').all(old.package_ids) as IndexedBefore['packages'],
        addresses: (this.db.stmt('SELECT address FROM node_addresses WHERE node_id = ?').all(nodeId) as Array<{ address: string }>).map((r) => r.address),
        kernel: old.os_kernel,
      };
      const ins = this.db.stmt('INSERT INTO inventory_changes (node_id, at, kind, name, from_value, to_value) VALUES (?, ?, ?, ?, ?, ?)');
      for (const c of diffInventory(before, ix).slice(0, MAX_CHANGES_PER_INVENTORY)) ins.run(nodeId, at, c.kind, c.name, c.from, c.to);
    }
    const cols = [ix.fqdn, ix.os_kernel, ix.arch, ix.os_version_key, ix.cpus, ix.memory, JSON.stringify(ids)];
    let key: number;
    let before: number[] = [];
    if (old) {
      key = old.key;
      before = JSON.parse(old.package_ids) as number[];
      this.db.stmt(`UPDATE node_inventory SET fqdn = ?, os_kernel = ?, arch = ?, os_version_key = ?, cpus = ?, memory = ?, package_ids = ?
        WHERE key = ?`).run(...cols, key);
    } else {
      key = Number(this.db.stmt(`INSERT INTO node_inventory (fqdn, os_kernel, arch, os_version_key, cpus, memory, package_ids, node_id)
        VALUES (?, ?, ?, ?, ?, ?, ?, ?)`).run(...cols, nodeId).lastInsertRowid);
      this.db.stmt('UPDATE nodes SET inventory_key = ? WHERE id = ?').run(key, nodeId);
    }
    // Only what changed since the last inventory is written: most inventories change nothing.
    const now = new Set(ids);
    const was = new Set(before);
    const del = this.db.stmt('DELETE FROM node_packages WHERE package_id = ? AND node_key = ?');
    for (const id of before) if (!now.has(id)) del.run(id, key);
    const ins = this.db.stmt('INSERT OR IGNORE INTO node_packages (package_id, node_key) VALUES (?, ?)');
    for (const id of ids) if (!was.has(id)) ins.run(id, key);
    this.db.stmt('DELETE FROM node_addresses WHERE node_id = ?').run(nodeId);
    const addr = this.db.stmt('INSERT INTO node_addresses (address, node_id) VALUES (?, ?)');
    for (const a of ix.addresses) addr.run(a, nodeId);
    this.db.stmt('DELETE FROM node_facts WHERE node_id = ?').run(nodeId);
    const fact = this.db.stmt('INSERT INTO node_facts (node_id, path, value, num) VALUES (?, ?, ?, ?)');
    for (const f of ix.facts) fact.run(nodeId, f.path, f.value, f.num);
  }

  async getInventory(nodeId: string): Promise<{ received_at: string; inventory: unknown } | null> {
    const row = this.db.read('getInventory', () =>
      this.db.stmt('SELECT received_at, document FROM inventories WHERE node_id = ?').get(nodeId)) as
      { received_at: string; document: string } | undefined;
    return row ? { received_at: row.received_at, inventory: JSON.parse(row.document) } : null;
  }

  async inventoryHistory(nodeId: string, page: number, perPage: number): Promise<Page<InventoryChangeRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    return this.db.read('inventoryHistory', () => {
      const total = (this.db.stmt('SELECT count(*) AS c FROM inventory_changes WHERE node_id = ?').get(nodeId) as { c: number }).c;
      const data = this.db.stmt(`SELECT at, kind, name, from_value AS "from", to_value AS "to" FROM inventory_changes WHERE node_id = ?
        ORDER BY id DESC LIMIT ? OFFSET ?`).all(nodeId, limit, offset) as InventoryChangeRecord[];
      return { data, total };
    });
  }

  async listSoftware(nameGlob: string, page: number, perPage: number): Promise<Page<{ name: string; version: string; nodes: number }>> {
    const { limit, offset } = checkPaging(page, perPage);
    const pattern = softwarePattern(nameGlob);
    return this.db.read('listSoftware', () => {
      // GLOB is case-sensitive, as package names are; the pattern's own brackets are escaped.
      const total = (this.db.stmt('SELECT count(*) AS c FROM package_versions pv WHERE pv.name GLOB ? AND EXISTS (SELECT 1 FROM node_packages np WHERE np.package_id = pv.id)')
        .get(pattern) as { c: number }).c;
      const rows = this.db.stmt(`SELECT pv.name, pv.version, (SELECT count(*) FROM node_packages np WHERE np.package_id = pv.id) AS nodes
        FROM package_versions pv WHERE pv.name GLOB ? AND EXISTS (SELECT 1 FROM node_packages np WHERE np.package_id = pv.id)
        ORDER BY pv.name, pv.version_key, pv.version LIMIT ? OFFSET ?`).all(pattern, limit, offset) as Array<{ name: string; version: string; nodes: number }>;
      return { data: rows, total };
    });
  }

  async reindexInventories(limit: number, after = ''): Promise<{ indexed: number; last: string; done: boolean }> {
    const rows = this.db.read('reindexInventories', () => this.db.stmt(`SELECT i.node_id, i.received_at, i.document FROM inventories i
      JOIN nodes n ON n.id = i.node_id WHERE n.inventory_key IS NULL AND i.node_id > ? ORDER BY i.node_id LIMIT ?`).all(after, limit)) as
      Array<{ node_id: string; received_at: string; document: string }>;
    let indexed = 0;
    this.db.write('reindexInventories', () => {
      const still = this.db.stmt('SELECT 1 FROM nodes WHERE id = ? AND inventory_key IS NULL');
      for (const r of rows) {
        if (!still.get(r.node_id)) continue;
        this.writeIndex(r.node_id, indexInventory(JSON.parse(r.document) as Record<string, unknown>), r.received_at);
        indexed++;
      }
    });
    return { indexed, last: rows.at(-1)?.node_id ?? after, done: rows.length < limit };
  }
}
