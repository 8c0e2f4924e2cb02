/**
 * Inventories on PostgreSQL: the newest document of each node as sent, its queryable copy (the
 * filter language's tables, migration 15) and what changed between two inventories. An inventory
 * is written under its node's row lock, like every other change of the node.
 */
import type pg from 'pg';
import { capstanError } from '@capstan/shared/errors';
import { iso, type PostgresDb } from '../../postgres/db.js';
import { checkInventory, checkPaging } from '../../input.js';
import type { Page } from '../../store.js';
import { nodeValues } from '../records.js';
import { INSERT_NODE, UPDATE_NODE, type PostgresNodes } from '../postgres.js';
import type { InventoryChangeRecord, InventoryStore, NodeRecord, NodeUpsertFromInventory } from '../types.js';
import { globToLike } from '../filters/sql.js';
import {
  diffInventory, indexInventory, MAX_CHANGES_PER_INVENTORY, softwarePattern, type IndexedBefore, type InventoryIndex,
} from './indexing.js';

export class PostgresInventory implements InventoryStore {
  constructor(private readonly db: PostgresDb, private readonly nodes: PostgresNodes) {}

  async upsertFromInventory(inv: NodeUpsertFromInventory): Promise<NodeRecord> {
    const { receivedAt, document } = checkInventory(inv);
    const what = 'upsertFromInventory';
    return this.db.tx(what, async (c) => {
      let revoked = false;
      if (inv.auto_accept) {
        const r = await this.db.query(what, c, { name: 'revoked_get', text: 'SELECT 1 FROM revoked_certificates WHERE fingerprint = $1', values: [inv.certificate_fingerprint] });
        revoked = (r.rowCount ?? 0) > 0;
      }
      const auto = !!inv.auto_accept && !revoked;
      // Two first inventories of one node may race: the loser of the insert merges instead.
      const fresh = this.nodes.rules.nodeFromInventory(inv, auto);
      const ins = await this.db.query(what, c, { name: 'node_insert_new', text: `${INSERT_NODE} ON CONFLICT (id) DO NOTHING`, values: nodeValues(fresh) });
      let next = fresh;
      let known: NodeRecord | null = null;
      if (ins.rowCount === 0) {
        known = await this.nodes.lockNode(what, c, inv.id);
        // Deleted between our insert attempt and the lock: retrying registers it afresh.
        if (!known) throw capstanError('ERR_STORE', `node ${inv.id} was deleted concurrently`);
        next = this.nodes.rules.mergeInventory(known, inv, auto);
        await this.db.query(what, c, { name: 'node_update', text: UPDATE_NODE, values: nodeValues(next) });
      }
      await this.nodes.sets(what, c, next, known);
      await this.nodes.history(what, c, this.nodes.rules.transitions(known, next, receivedAt, 'inventory', this.nodes.rules.acceptCause(inv, auto, revoked)));
      // A conflicting certificate's inventory is not the node's: only the conflict is kept.
      if (known && this.nodes.rules.isCertificateConflict(known, inv)) return next;
      // Keep only the newest document; an older one arriving late is dropped.
      const written = await this.db.query(what, c, {
        name: 'inventory_upsert',
        text: `INSERT INTO inventories (node_id, received_at, document) VALUES ($1, $2, $3)
          ON CONFLICT (node_id) DO UPDATE SET received_at = excluded.received_at, document = excluded.document
          WHERE excluded.received_at >= inventories.received_at`,
        values: [inv.id, receivedAt, document],
      });
      if ((written.rowCount ?? 0) > 0) await this.writeIndex(what, c, inv.id, indexInventory(inv.inventory as Record<string, unknown>), receivedAt);
      return next;
    });
  }

  /** The queryable copy of a node's newest inventory (migration 15), inside the caller's transaction. */
  private async writeIndex(what: string, c: pg.PoolClient, nodeId: string, ix: InventoryIndex, at: string): Promise<void> {
    const { rows: old } = await this.db.query(what, c, {
      name: 'inventory_before',
      text: `SELECT ni.os_kernel,
          (SELECT coalesce(json_agg(json_build_object('name', pv.name, 'version', pv.version)), '[]') FROM package_versions pv WHERE pv.id = ANY(ni.packages)) AS packages,
          (SELECT coalesce(array_agg(a.address), '{}') FROM node_addresses a WHERE a.node_id = ni.node_id) AS addresses
        FROM node_inventory ni WHERE ni.node_id = $1`,
      values: [nodeId],
    });
    if (old.length > 0) {
      // What changed since the last inventory, kept like changes (retention.changes).
      const o = old[0] as { os_kernel: string | null; packages: IndexedBefore['packages']; addresses: string[] };
      const changes = diffInventory({ packages: o.packages, addresses: o.addresses, kernel: o.os_kernel }, ix).slice(0, MAX_CHANGES_PER_INVENTORY);
      if (changes.length > 0) {
        await this.db.query(what, c, {
          name: 'inventory_changes_add',
          text: `INSERT INTO inventory_changes (node_id, at, kind, name, from_value, to_value)
            SELECT $1, $2, * FROM unnest($3::text[], $4::text[], $5::text[], $6::text[])`,
          values: [nodeId, at, changes.map((x) => x.kind), changes.map((x) => x.name), changes.map((x) => x.from), changes.map((x) => x.to)],
        });
      }
    }
    // Sorted, so that two servers adding the same new versions lock them in one order.
    const pk = [...ix.packages].sort((a, b) => (a.name < b.name ? -1 : a.name > b.name ? 1 : a.version < b.version ? -1 : a.version > b.version ? 1 : 0));
    const names = pk.map((p) => p.name);
    const versions = pk.map((p) => p.version);
    let ids: number[] = [];
    if (pk.length > 0) {
      await this.db.query(what, c, {
        name: 'package_versions_add',
        text: `INSERT INTO package_versions (name, version, version_key)
          SELECT * FROM unnest($1::text[], $2::text[], $3::text[]) ON CONFLICT (name, version) DO NOTHING`,
        values: [names, versions, pk.map((p) => p.key)],
      });
      const { rows } = await this.db.query(what, c, {
        name: 'package_versions_ids',
        text: `SELECT coalesce(array_agg(pv.id ORDER BY pv.id), '{}') AS ids FROM package_versions pv
          JOIN unnest($1::text[], $2::text[]) AS u(name, version) ON pv.name = u.name AND pv.version = u.version`,
        values: [names, versions],
      });
      ids = (rows[0] as { ids: number[] }).ids;
    }
    await this.db.query(what, c, {
      name: 'node_inventory_upsert',
      text: `INSERT INTO node_inventory (node_id, fqdn, os_kernel, arch, os_version_key, cpus, memory, packages)
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8::integer[])
        ON CONFLICT (node_id) DO UPDATE SET fqdn = excluded.fqdn, os_kernel = excluded.os_kernel, arch = excluded.arch,
          os_version_key = excluded.os_version_key, cpus = excluded.cpus, memory = excluded.memory, packages = excluded.packages`,
      values: [nodeId, ix.fqdn, ix.os_kernel, ix.arch, ix.os_version_key, ix.cpus, ix.memory, ids],
    });
    await this.db.query(what, c, { name: 'node_addresses_clear', text: 'DELETE FROM node_addresses WHERE node_id = $1', values: [nodeId] });
    if (ix.addresses.length > 0) {
      await this.db.query(what, c, {
        name: 'node_addresses_add',
        text: 'INSERT INTO node_addresses (address, node_id) SELECT a, $1 FROM unnest($2::text[]) AS a',
        values: [nodeId, ix.addresses],
      });
    }
    await this.db.query(what, c, { name: 'node_facts_clear', text: 'DELETE FROM node_facts WHERE node_id = $1', values: [nodeId] });
    if (ix.facts.length > 0) {
      await this.db.query(what, c, {
        name: 'node_facts_add',
        text: 'INSERT INTO node_facts (node_id, path, value, num) SELECT $1, * FROM unnest($2::text[], $3::text[], $4::float8[])',
        values: [nodeId, ix.facts.map((f) => f.path), ix.facts.map((f) => f.value), ix.facts.map((f) => f.num)],
      });
    }
  }

  async getInventory(nodeId: string): Promise<{ received_at: string; inventory: unknown } | null> {
    const { rows } = await this.db.query('getInventory', this.db.pool, {
      name: 'inventory_get', text: 'SELECT received_at, document FROM inventories WHERE node_id = $1', values: [nodeId],
    });
    return rows[0] ? { received_at: new Date(rows[0].received_at).toISOString(), inventory: rows[0].document } : null;
  }

  async inventoryHistory(nodeId: string, page: number, perPage: number): Promise<Page<InventoryChangeRecord>> {
    const { limit, offset } = checkPaging(page, perPage);
    const { rows } = await this.db.query('inventoryHistory', this.db.pool, {
      name: 'inventory_history',
      text: `SELECT at, kind, name, from_value AS "from", to_value AS "to", count(*) OVER () AS total FROM inventory_changes WHERE node_id = $1
        ORDER BY id DESC LIMIT $2 OFFSET $3`,
      values: [nodeId, limit, offset],
    });
    let total = rows.length > 0 ? Number((rows[0] as { total: string }).total) : 0;
    if (rows.length === 0 && offset > 0) {
      const r = await this.db.query('inventoryHistory', this.db.pool, { name: 'inventory_history_count', text: 'SELECT count(*) AS c FROM inventory_changes WHERE node_id = $1', values: [nodeId] });
      total = Number((r.rows[0] as { c: string }).c);
    }
    const data = (rows as Array<InventoryChangeRecord & { at: Date | string; total: string }>).map(({ total: _t, at, ...r }) => ({ at: iso(at)!, ...r }));
    return { data, total };
  }

  async listSoftware(nameGlob: string, page: number, perPage: number): Promise<Page<{ name: string; version: string; nodes: number }>> {
    const { limit, offset } = checkPaging(page, perPage);
    softwarePattern(nameGlob); // the same checks as SQLite's
    const like = globToLike(nameGlob);
    // One GIN probe per matching version: a glob names a few packages, never the whole pool.
    const { rows } = await this.db.query('listSoftware', this.db.pool, {
      name: 'software_list',
      text: `WITH v AS (
          SELECT pv.name, pv.version, pv.version_key, (SELECT count(*) FROM node_inventory ni WHERE ni.packages @> ARRAY[pv.id]) AS nodes
          FROM package_versions pv WHERE pv.name LIKE $1 ESCAPE '\\')
        SELECT name, version, nodes::int AS nodes, count(*) OVER () AS total FROM v WHERE nodes > 0
        ORDER BY name, version_key, version LIMIT $2 OFFSET $3`,
      values: [like, limit, offset],
    });
    const data = (rows as Array<{ name: string; version: string; nodes: number; total: string }>).map(({ total: _t, ...r }) => r);
    let total = rows.length > 0 ? Number((rows[0] as { total: string }).total) : 0;
    if (rows.length === 0 && offset > 0) {
      const c = await this.db.query('listSoftware', this.db.pool, {
        name: 'software_count',
        text: `SELECT count(*) AS c FROM package_versions pv WHERE pv.name LIKE $1 ESCAPE '\\' AND EXISTS (SELECT 1 FROM node_inventory ni WHERE ni.packages @> ARRAY[pv.id])`,
        values: [like],
      });
      total = Number((c.rows[0] as { c: string }).c);
    }
    return { data, total };
  }

  async reindexInventories(limit: number, after = ''): Promise<{ indexed: number; last: string; done: boolean }> {
    const what = 'reindexInventories';
    const { rows } = await this.db.query(what, this.db.pool, {
      text: `SELECT i.node_id FROM inventories i WHERE i.node_id > $1
        AND NOT EXISTS (SELECT 1 FROM node_inventory ni WHERE ni.node_id = i.node_id) ORDER BY i.node_id LIMIT $2`,
      values: [after, limit],
    });
    const ids = rows.map((r) => r.node_id as string);
    const indexed = await this.db.tx(what, async (c) => {
      let n = 0;
      for (const id of ids) {
        // The node's row is what an arriving inventory locks too: one of the two indexes it.
        if (!(await this.nodes.lockNode(what, c, id))) continue;
        const { rows: doc } = await this.db.query(what, c, {
          text: `SELECT received_at, document FROM inventories i WHERE node_id = $1
            AND NOT EXISTS (SELECT 1 FROM node_inventory ni WHERE ni.node_id = i.node_id)`,
          values: [id],
        });
        if (!doc[0]) continue;
        await this.writeIndex(what, c, id, indexInventory(doc[0].document as Record<string, unknown>), new Date(doc[0].received_at).toISOString());
        n++;
      }
      return n;
    });
    return { indexed, last: ids.at(-1) ?? after, done: ids.length < limit };
  }
}
