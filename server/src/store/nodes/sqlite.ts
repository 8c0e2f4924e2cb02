/**
 * Nodes on SQLite: the node rows with their certificates, the filterable copies of tags and
 * groups, history, properties and listing. Every change reads the node, applies its rule
 * (the domain's, store/rules.ts) and writes it back with its transitions in one IMMEDIATE transaction.
 */
import { capstanError } from '@capstan/shared/errors';
import { addressKey } from '@capstan/shared/filter/parse';
import { type SqliteDb, sqliteRows } from '../sqlite/db.js';
import { checkNodeCreate, checkPaging } from '../input.js';
import type { Page } from '../store.js';
import { toUtcIso } from '../time.js';
import { listRows, type LinkRow } from '../managers/rows.js';
import { complianceKeySql, filterWhere, orderBy } from './filters/query.js';
import { sqliteDialect } from './filters/sqlite.js';
import { addressTaken, checkProperties, propertyRows } from './inventory/indexing.js';
import type { JsonValue } from '@capstan/shared/filter/properties';
import { checkLevel, levelOf, nextLevel, propertiesRows, secretCell, type NodePropertiesRow, type NodePropertyLevel } from './properties.js';
import { acceptedPageSql, acceptedRow, historyFromRow, NODE_COLUMNS, nodeFromRow, nodePage, nodeParams, SELECT_NODE, TRUST } from './records.js';
import { nodePageByCompliance } from './compliance-page.js';
import { sqliteSwept } from '../compliance/kept-sqlite.js';
import { NodeChanges } from './changes.js';
import type { StoreRules } from '../rules.js';
import type { AcceptedNodeRow, HistoryEntry, HistoryInsert, NodeCreate, NodeFilter, NodeListQuery, NodePage, NodeRecord, NodeStore, NodeTrust } from './types.js';

const INSERT_NODE = `INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map((c) => '@' + c).join(', ')})`;
const UPDATE_NODE = `UPDATE nodes SET ${NODE_COLUMNS.filter((c) => c !== 'id').map((c) => `${c} = @${c}`).join(', ')} WHERE id = @id`;
const INSERT_HISTORY = 'INSERT INTO node_history (node_id, at, field, from_value, to_value, cause) VALUES (?, ?, ?, ?, ?, ?)';

const ACCEPTED_PAGE_SQLITE = acceptedPageSql(true, true);
const UNFILTERED_TOTALS = "SELECT value AS status, nodes AS c FROM kept_node_counts WHERE field = 'status'";
const ACCEPTED_PAGE_SQLITE_BARE = acceptedPageSql(true, false);

export class SqliteNodes extends NodeChanges implements NodeStore {
  private readonly updateAfterRun: string;

  constructor(private readonly db: SqliteDb, readonly storeRules: StoreRules) {
    super(storeRules.nodes);
    this.updateAfterRun = `UPDATE nodes SET ${storeRules.nodes.afterRunFields.map((c) => `${c} = ?`).join(', ')} WHERE id = ?`;
  }

  /** A node as stored, inside the caller's transaction. */
  node(id: string): NodeRecord | null {
    const row = this.db.stmt(`${SELECT_NODE} WHERE n.id = ?`).get(id) as Record<string, unknown> | undefined;
    return row ? nodeFromRow(row, sqliteRows) : null;
  }

  /**
   * Write a node changed by a rule (a new one when `prev` is null) with its filterable copies and
   * its transitions, inside the caller's transaction; `causes` overrides the cause of one field.
   */
  saveNode(next: NodeRecord, prev: NodeRecord | null, at: string, cause: string, causes?: { accepted?: string }): void {
    this.db.stmt(prev ? UPDATE_NODE : INSERT_NODE).run(nodeParams(next));
    this.sets(next, prev);
    this.history(this.rules.transitions(prev, next, at, cause, causes));
  }

  /** Record transitions, inside the caller's transaction. */
  history(entries: HistoryInsert[]): void {
    const ins = this.db.stmt(INSERT_HISTORY);
    for (const h of entries) ins.run(h.node_id, h.at, h.field, h.from, h.to, h.cause);
  }

  /** Write the certificate (kept beside the row) when it changed. */
  private certificate(next: NodeRecord, prev: NodeRecord | null): void {
    if (prev && prev.certificate === next.certificate) return;
    if (next.certificate === null) this.db.stmt('DELETE FROM node_certificates WHERE node_id = ?').run(next.id);
    else {
      this.db.stmt(`INSERT INTO node_certificates (node_id, certificate) VALUES (?, ?)
        ON CONFLICT (node_id) DO UPDATE SET certificate = excluded.certificate`).run(next.id, next.certificate);
    }
  }

  /** Rewrite the filterable copies of tags and groups when they changed. */
  private sets(next: NodeRecord, prev: NodeRecord | null): void {
    this.certificate(next, prev);
    if (!prev || JSON.stringify(prev.tags) !== JSON.stringify(next.tags)) {
      if (prev) this.db.stmt('DELETE FROM node_tags WHERE node_id = ?').run(next.id);
      const ins = this.db.stmt('INSERT INTO node_tags (node_id, key, value) VALUES (?, ?, ?)');
      for (const [k, v] of Object.entries(next.tags)) ins.run(next.id, k, v);
    }
    if (!prev || JSON.stringify(prev.groups) !== JSON.stringify(next.groups)) {
      if (prev) this.db.stmt('DELETE FROM node_groups WHERE node_id = ?').run(next.id);
      const ins = this.db.stmt('INSERT INTO node_groups (node_id, group_id) VALUES (?, ?)');
      for (const g of next.groups) ins.run(next.id, g);
    }
  }

  async acceptedNodesPage(after: string, limit: number, withCertificates = true): Promise<AcceptedNodeRow[]> {
    const sql = withCertificates ? ACCEPTED_PAGE_SQLITE : ACCEPTED_PAGE_SQLITE_BARE;
    const rows = this.db.read('acceptedNodesPage', () => this.db.stmt(sql).all(after, checkPaging(1, limit).limit)) as Array<Record<string, unknown>>;
    return rows.map(acceptedRow);
  }

  async getNodeTrust(id: string): Promise<NodeTrust | null> {
    return this.db.read('getNodeTrust', () => (this.db.stmt(TRUST).get(id) as NodeTrust | undefined) ?? null);
  }

  async getNode(id: string): Promise<NodeRecord | null> {
    return this.db.read('getNode', () => this.node(id));
  }

  async listNodes(q: NodeListQuery): Promise<NodePage> {
    return this.list(q, true);
  }

  async listNodesFresh(q: NodeListQuery): Promise<NodePage> {
    return this.list(q, false);
  }

  /** listNodes; `kept`: sorted by compliance at a moment from the kept shares (compliance-page.ts), else every key computed. */
  private list(q: NodeListQuery, kept: boolean): NodePage {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const filters = this.storeRules.filters.check(q);
    const values: unknown[] = [];
    const d = sqliteDialect(this.db, values, filters, this.storeRules.filters.check);
    const where = filterWhere(filters, d);
    const order = orderBy(q.sort, q.order, d);
    // Totals and page in one read transaction, so they describe the same snapshot.
    return this.db.read('listNodes', () => {
      // The whole registry's totals are kept (kept_node_counts, migration 25): counting 300,000
      // nodes took 28 ms of every unfiltered page, the console's first one included.
      const counted = this.db.stmt(kept && filters.length === 0 ? UNFILTERED_TOTALS : `SELECT n.status AS status, count(*) AS c FROM nodes n ${where} GROUP BY n.status`)
        .all(...values) as Array<{ status: string; c: number }>;
      const totals = { unknown: 0, reachable: 0, unreachable: 0 };
      for (const r of counted) totals[r.status as keyof typeof totals] = r.c;
      const byKept = kept && q.sort === 'compliance' && q.compliance_at !== undefined;
      const rows = (byKept
        ? this.db.stmt(nodePageByCompliance(where, order, q.order, q.compliance_at!, sqliteSwept(this.db), { cut: '?', limit: '?', offset: '?' }, d.collate))
          .all(...values, limit + offset, ...values, ...values, limit + offset, limit, offset)
        : this.db.stmt(nodePage(where, order, '?', '?', q.sort === 'compliance' ? complianceKeySql(q.compliance_at) : undefined))
          .all(...values, limit, offset)) as Record<string, unknown>[];
      const nodes = rows.map((r) => nodeFromRow(r, sqliteRows));
      // The page's manager links, in one statement (a page is at most a few hundred ids).
      const links = nodes.length === 0 ? [] : this.db.prepare(
        `SELECT node_id, manager_id FROM node_managers WHERE node_id IN (${nodes.map(() => '?').join(', ')})`,
      ).all(...nodes.map((n) => n.id)) as LinkRow[];
      return { data: listRows(nodes, links), total: totals.unknown + totals.reachable + totals.unreachable, totals };
    });
  }

  async listNodeIds(filters: NodeFilter[]): Promise<string[]> {
    const checked = this.storeRules.filters.check({ filters });
    const values: unknown[] = [];
    const where = filterWhere(checked, sqliteDialect(this.db, values, checked, this.storeRules.filters.check));
    const rows = this.db.read('listNodeIds', () => this.db.stmt(`SELECT n.id FROM nodes n ${where}`).all(...values)) as Array<{ id: string }>;
    return rows.map((r) => r.id);
  }

  async createNode(input: NodeCreate): Promise<NodeRecord> {
    const n = checkNodeCreate(input);
    const now = this.db.now().toISOString();
    const node = this.rules.manualNode(n, now);
    return this.db.write('createNode', () => {
      if (node.source_id !== null && this.db.stmt('SELECT 1 FROM nodes WHERE source_id = ? AND region = ? AND account_id = ?')
        .get(node.source_id, node.region, node.account_id)) {
        throw capstanError('ERR_NODE_EXISTS', `a node with cloud identity ${node.source_id}/${node.region}/${node.account_id} already exists`);
      }
      const address = node.manager === 'manual' ? node.address : null;
      const key = address === null ? null : addressKey(address);
      if (address !== null) {
        const owner = this.db.stmt(`SELECT id FROM nodes WHERE lower(address) = lower(?) UNION ALL SELECT node_id FROM node_addresses WHERE address = ? LIMIT 1`)
          .get(address, key ?? '') as { id: string } | undefined;
        if (owner) throw addressTaken(address, owner.id);
      }
      const { changes } = this.db.stmt(`${INSERT_NODE} ON CONFLICT (id) DO NOTHING`).run(nodeParams(node));
      if (changes === 0) throw capstanError('ERR_NODE_EXISTS', `node ${n.id} already exists`);
      if (key !== null) this.db.stmt('INSERT INTO node_addresses (address, node_id) VALUES (?, ?)').run(key, node.id);
      this.sets(node, null);
      this.history(this.rules.transitions(null, node, now, node.manager === 'manual' ? 'added by an admin' : `added by ${node.manager}`));
      return node;
    });
  }

  /** Read, change with a rule of the domain, write back and record the transitions if anything changed. */
  protected update(what: string, id: string, at: string, cause: string, change: (n: NodeRecord) => NodeRecord): NodeRecord | null {
    const when = toUtcIso(at, 'at');
    return this.db.write(what, () => {
      const node = this.node(id);
      if (!node) return null;
      const next = change(node);
      if (next !== node) {
        this.db.stmt(UPDATE_NODE).run(nodeParams(next));
        this.sets(next, node);
        this.history(this.rules.transitions(node, next, when, cause));
      }
      return next;
    });
  }

  async recordClockSkew(id: string, skewSeconds: number, at: string): Promise<boolean> {
    const when = toUtcIso(at, 'at');
    if (!Number.isSafeInteger(skewSeconds)) throw capstanError('ERR_BAD_REQUEST', 'clock skew must be whole seconds');
    return this.db.write('recordClockSkew', () => this.db.stmt('UPDATE nodes SET clock_skew = ?, clock_skew_at = ? WHERE id = ?').run(skewSeconds, when, id).changes > 0);
  }

  async deleteNode(id: string, at?: string): Promise<boolean> {
    const when = toUtcIso(at ?? this.db.now().toISOString(), 'at');
    // Runs, inventory, history and compliance go with it through ON DELETE CASCADE.
    return this.db.write('deleteNode', () => {
      const node = this.node(id);
      if (!node) return false;
      if (node.certificate_fingerprint) {
        this.db.stmt('INSERT INTO revoked_certificates (fingerprint, node_id, revoked_at) VALUES (?, ?, ?) ON CONFLICT DO NOTHING')
          .run(node.certificate_fingerprint, id, when);
      }
      return this.db.stmt('DELETE FROM nodes WHERE id = ?').run(id).changes > 0;
    });
  }

  async getHistory(nodeId: string, page: number, perPage: number): Promise<Page<HistoryEntry>> {
    const { limit, offset } = checkPaging(page, perPage);
    return this.db.read('getHistory', () => {
      const { n } = this.db.stmt('SELECT count(*) AS n FROM node_history WHERE node_id = ?').get(nodeId) as { n: number };
      const rows = this.db.stmt(`SELECT id, node_id, at, field, from_value, to_value, cause FROM node_history
        WHERE node_id = ? ORDER BY id DESC LIMIT ? OFFSET ?`).all(nodeId, limit, offset) as Record<string, unknown>[];
      return { data: rows.map((r) => historyFromRow(r, sqliteRows)), total: n };
    });
  }

  async getProperties(nodeId: string): Promise<Record<string, JsonValue> | null> {
    return (await this.getNodeLevel(nodeId))?.properties ?? null;
  }

  async getNodeLevel(nodeId: string): Promise<NodePropertyLevel | null> {
    return this.db.read('getNodeLevel', () => {
      if (!this.db.stmt('SELECT 1 FROM nodes WHERE id = ?').get(nodeId)) return null;
      return levelOf(this.db.stmt('SELECT key, value FROM node_properties WHERE node_id = ? ORDER BY key').all(nodeId) as Array<{ key: string; value: string }>);
    });
  }

  async listNodeProperties(page: number, perPage: number): Promise<Page<NodePropertiesRow>> {
    const { limit, offset } = checkPaging(page, perPage);
    return this.db.read('listNodeProperties', () => {
      const { n } = this.db.stmt('SELECT count(DISTINCT node_id) AS n FROM node_properties').get() as { n: number };
      const rows = this.db.stmt(`SELECT p.node_id, p.key, p.value FROM node_properties p
        JOIN (SELECT DISTINCT node_id FROM node_properties ORDER BY node_id LIMIT ? OFFSET ?) s ON s.node_id = p.node_id
        ORDER BY p.node_id, p.key`).all(limit, offset) as Array<{ node_id: string; key: string; value: string }>;
      return { data: propertiesRows(rows), total: n };
    });
  }

  async setProperties(nodeId: string, properties: Record<string, JsonValue>, secrets?: Record<string, string>): Promise<Record<string, JsonValue> | null> {
    if (secrets !== undefined) checkLevel(properties, secrets);
    else checkProperties(properties);
    return this.db.write('setProperties', () => {
      if (!this.db.stmt('SELECT 1 FROM nodes WHERE id = ?').get(nodeId)) return null;
      const stored = levelOf(this.db.stmt('SELECT key, value FROM node_properties WHERE node_id = ?').all(nodeId) as Array<{ key: string; value: string }>);
      const next = nextLevel(stored.secrets, properties, secrets);
      this.db.stmt('DELETE FROM node_properties WHERE node_id = ?').run(nodeId);
      this.db.stmt('DELETE FROM node_property_leaves WHERE node_id = ?').run(nodeId);
      const ins = this.db.stmt('INSERT INTO node_properties (node_id, key, value) VALUES (?, ?, ?)');
      for (const [k, v] of Object.entries(next.properties)) ins.run(nodeId, k, JSON.stringify(v));
      for (const [k, v] of Object.entries(next.secrets)) ins.run(nodeId, k, secretCell(v));
      const leaf = this.db.stmt('INSERT INTO node_property_leaves (node_id, path, value, num) VALUES (?, ?, ?, ?)');
      for (const l of propertyRows(next.properties)) leaf.run(nodeId, l.path, l.value, l.num);
      return next.properties;
    });
  }

  /** A stored run's node fields (the domain's afterRun rule) and their transitions, inside the run's transaction. */
  runStored(node: NodeRecord, startedUtc: string, configId: string | null, receivedAt: string): NodeRecord {
    const next = this.rules.afterRun(node, startedUtc, configId, receivedAt);
    this.db.stmt(this.updateAfterRun).run(...this.rules.afterRunFields.map((f) => next[f]), next.id);
    this.history(this.rules.transitions(node, next, receivedAt, 'run'));
    return next;
  }
}
