/**
 * Nodes on PostgreSQL: the node rows with their certificates, the filterable copies of tags and
 * groups, history, properties and listing. Every read-modify-write of a node locks its row first
 * (`FOR NO KEY UPDATE`, which does not block the foreign-key checks of other runs' inserts), so
 * two servers changing one node queue on it, and a node cannot be deleted between a check and a write.
 */
import type pg from 'pg';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { addressKey } from '@capstan/shared/filter/parse';
import { type PostgresDb, postgresRows } from '../postgres/db.js';
import { checkNodeCreate, checkPaging } from '../input.js';
import type { Page } from '../store.js';
import { toUtcIso } from '../time.js';
import { listRows, type LinkRow } from '../managers/rows.js';
import { complianceKeySql, filterWhere, orderBy } from './filters/query.js';
import { postgresDialect } from './filters/postgres.js';
import { addressTaken, checkProperties, propertyRows } from './inventory/indexing.js';
import type { JsonValue } from '@capstan/shared/filter/properties';
import { checkLevel, levelOf, nextLevel, propertiesRows, secretCell, type NodePropertiesRow, type NodePropertyLevel } from './properties.js';
import { acceptedPageSql, acceptedRow, historyFromRow, NODE_COLUMNS, nodeFromRow, nodePage, nodeValues, SELECT_NODE, TRUST } from './records.js';
import { nodePageByCompliance } from './compliance-page.js';
import { postgresSwept, snapshot } from '../compliance/kept-postgres.js';
import { NodeChanges } from './changes.js';
import type { StoreRules } from '../rules.js';
import type { AcceptedNodeRow, HistoryEntry, HistoryInsert, NodeCreate, NodeFilter, NodeListQuery, NodePage, NodeRecord, NodeStore, NodeTrust } from './types.js';

export const INSERT_NODE = `INSERT INTO nodes (${NODE_COLUMNS.join(', ')}) VALUES (${NODE_COLUMNS.map((_, i) => `$${i + 1}`).join(', ')})`;
export const UPDATE_NODE = `UPDATE nodes SET ${NODE_COLUMNS.slice(1).map((c, i) => `${c} = $${i + 2}`).join(', ')} WHERE id = $1`;

const ACCEPTED_PAGE_POSTGRES = acceptedPageSql(false, true);
const ACCEPTED_PAGE_POSTGRES_BARE = acceptedPageSql(false, false);

export class PostgresNodes extends NodeChanges implements NodeStore {
  private readonly updateAfterRun: string;

  constructor(private readonly db: PostgresDb, readonly storeRules: StoreRules) {
    super(storeRules.nodes);
    this.updateAfterRun = `UPDATE nodes SET ${storeRules.nodes.afterRunFields.map((c, i) => `${c} = $${i + 2}`).join(', ')} WHERE id = $1`;
  }

  /** The node, its row locked until the caller's transaction ends (FOR NO KEY UPDATE). */
  async lockNode(what: string, c: pg.PoolClient, id: string): Promise<NodeRecord | null> {
    const { rows } = await this.db.query(what, c, { name: 'node_lock', text: `${SELECT_NODE} WHERE n.id = $1 FOR NO KEY UPDATE OF n`, values: [id] });
    return rows[0] ? nodeFromRow(rows[0], postgresRows) : null;
  }

  /**
   * Several nodes, each row locked until the caller's transaction ends, in id order (the order
   * every batch takes them in, so two batches cannot deadlock). Unknown ids are left out.
   */
  async lockNodes(what: string, c: pg.PoolClient, ids: readonly string[]): Promise<Map<string, NodeRecord>> {
    const { rows } = await this.db.query(what, c, {
      name: 'node_lock_many', text: `${SELECT_NODE} WHERE n.id = ANY($1::text[]) ORDER BY n.id FOR NO KEY UPDATE OF n`, values: [ids],
    });
    return new Map(rows.map((r) => {
      const n = nodeFromRow(r, postgresRows);
      return [n.id, n];
    }));
  }

  /** Record transitions, inside the caller's transaction. */
  async history(what: string, c: pg.PoolClient, entries: HistoryInsert[]): Promise<void> {
    if (entries.length === 0) return;
    await this.db.query(what, c, {
      name: 'history_insert',
      text: `INSERT INTO node_history (node_id, at, field, from_value, to_value, cause)
        SELECT * FROM unnest($1::text[], $2::timestamptz[], $3::text[], $4::text[], $5::text[], $6::text[])`,
      values: [entries.map((h) => h.node_id), entries.map((h) => h.at), entries.map((h) => h.field),
        entries.map((h) => h.from), entries.map((h) => h.to), entries.map((h) => h.cause)],
    });
  }

  /** Write a node changed by a rule (a new one when `prev` is null) with its transitions, inside the caller's transaction. */
  async saveNode(c: pg.PoolClient, next: NodeRecord, prev: NodeRecord | null, at: string, cause: string): Promise<void> {
    const what = 'saveNode';
    if (prev) await this.db.query(what, c, { name: 'node_update', text: UPDATE_NODE, values: nodeValues(next) });
    else await this.db.query(what, c, { name: 'node_insert', text: INSERT_NODE, values: nodeValues(next) });
    await this.sets(what, c, next, prev);
    await this.history(what, c, this.rules.transitions(prev, next, at, cause));
  }

  /** Rewrite the certificate (kept beside the row) and the filterable copies of tags and groups when they changed. */
  async sets(what: string, c: pg.PoolClient, next: NodeRecord, prev: NodeRecord | null): Promise<void> {
    if (!prev || prev.certificate !== next.certificate) {
      if (next.certificate === null) {
        await this.db.query(what, c, { name: 'certificate_delete', text: 'DELETE FROM node_certificates WHERE node_id = $1', values: [next.id] });
      } else {
        await this.db.query(what, c, {
          name: 'certificate_upsert',
          text: `INSERT INTO node_certificates (node_id, certificate) VALUES ($1, $2)
            ON CONFLICT (node_id) DO UPDATE SET certificate = excluded.certificate`,
          values: [next.id, next.certificate],
        });
      }
    }
    if (!prev || JSON.stringify(prev.tags) !== JSON.stringify(next.tags)) {
      if (prev) await this.db.query(what, c, { text: 'DELETE FROM node_tags WHERE node_id = $1', values: [next.id] });
      const tags = Object.entries(next.tags);
      if (tags.length) {
        await this.db.query(what, c, {
          text: 'INSERT INTO node_tags (node_id, key, value) SELECT $1, * FROM unnest($2::text[], $3::text[])',
          values: [next.id, tags.map(([k]) => k), tags.map(([, v]) => v)],
        });
      }
    }
    if (!prev || JSON.stringify(prev.groups) !== JSON.stringify(next.groups)) {
      if (prev) await this.db.query(what, c, { text: 'DELETE FROM node_groups WHERE node_id = $1', values: [next.id] });
      if (next.groups.length) {
        await this.db.query(what, c, { text: 'INSERT INTO node_groups (node_id, group_id) SELECT $1, unnest($2::text[])', values: [next.id, next.groups] });
      }
    }
  }

  async acceptedNodesPage(after: string, limit: number, withCertificates = true): Promise<AcceptedNodeRow[]> {
    const [name, text] = withCertificates ? ['accepted_nodes_page', ACCEPTED_PAGE_POSTGRES] : ['accepted_nodes_page_bare', ACCEPTED_PAGE_POSTGRES_BARE];
    const { rows } = await this.db.query('acceptedNodesPage', this.db.pool, { name, text, values: [after, checkPaging(1, limit).limit] });
    return rows.map(acceptedRow);
  }

  async getNodeTrust(id: string): Promise<NodeTrust | null> {
    const { rows } = await this.db.query('getNodeTrust', this.db.pool, { name: 'node_trust', text: TRUST.replace('?', '$1'), values: [id] });
    return (rows[0] as NodeTrust | undefined) ?? null;
  }

  async getNode(id: string): Promise<NodeRecord | null> {
    const { rows } = await this.db.query('getNode', this.db.pool, { name: 'node_get', text: `${SELECT_NODE} WHERE n.id = $1`, values: [id] });
    return rows[0] ? nodeFromRow(rows[0], postgresRows) : null;
  }

  async listNodes(q: NodeListQuery): Promise<NodePage> {
    return this.list(q, true);
  }

  async listNodesFresh(q: NodeListQuery): Promise<NodePage> {
    return this.list(q, false);
  }

  /** listNodes; `kept`: sorted by compliance at a moment from the kept shares (compliance-page.ts), else every key computed. */
  private async list(q: NodeListQuery, kept: boolean): Promise<NodePage> {
    const { limit, offset } = checkPaging(q.page, q.per_page);
    const filters = this.storeRules.filters.check(q);
    const values: unknown[] = [];
    const d = await postgresDialect(this.db, values, filters, this.storeRules.filters.check);
    const where = filterWhere(filters, d);
    const order = orderBy(q.sort, q.order, d);
    const [lim, off] = [`$${values.length + 1}`, `$${values.length + 2}`];
    // One statement, so the totals and the page describe one snapshot; the lateral join keeps
    // the totals row even when the page is past the end.
    // The whole registry's totals are kept (kept_node_counts and its log not folded yet,
    // migration 25) instead of counted for every unfiltered page.
    const counted = kept && filters.length === 0
      ? `SELECT value AS status, sum(nodes) AS c FROM (SELECT value, nodes FROM kept_node_counts WHERE field = 'status'
          UNION ALL SELECT value, nodes FROM kept_node_counts_log WHERE field = 'status') k GROUP BY value`
      : `SELECT n.status, count(*) AS c FROM nodes n ${where} GROUP BY n.status`;
    const statement = (page: string) => `SELECT t.totals, p.* FROM
          (SELECT coalesce(json_object_agg(s.status, s.c), '{}') AS totals FROM (${counted}) s) t
        LEFT JOIN LATERAL (${page}) p ON true`;
    const byKept = kept && q.sort === 'compliance' && q.compliance_at !== undefined;
    // Sorted by compliance from the kept shares: in the snapshot of the thresholds it reads.
    const { rows } = byKept
      ? await snapshot(this.db, 'listNodes', async (c) => this.db.query('listNodes', c, {
        text: statement(nodePageByCompliance(where, order, q.order, q.compliance_at!, await postgresSwept(c),
          { cut: `(${lim}::bigint + ${off}::bigint)`, limit: lim, offset: off }, d.collate)),
        values: [...values, limit, offset],
      }))
      : await this.db.query('listNodes', this.db.pool, {
        text: statement(nodePage(where, order, lim, off, q.sort === 'compliance' ? complianceKeySql(q.compliance_at) : undefined)),
        values: [...values, limit, offset],
      });
    const raw = (rows[0]?.totals ?? {}) as Record<string, number | string>;
    const totals = { unknown: Number(raw.unknown ?? 0), reachable: Number(raw.reachable ?? 0), unreachable: Number(raw.unreachable ?? 0) };
    const nodes = rows.filter((r) => r.id !== null).map((r) => nodeFromRow(r, postgresRows));
    const links = nodes.length === 0 ? [] : (await this.db.query<LinkRow>('listNodes', this.db.pool, {
      name: 'node_managers_of', text: 'SELECT node_id, manager_id FROM node_managers WHERE node_id = ANY($1)', values: [nodes.map((n) => n.id)],
    })).rows;
    return {
      data: listRows(nodes, links),
      total: totals.unknown + totals.reachable + totals.unreachable,
      totals,
    };
  }

  async listNodeIds(filters: NodeFilter[]): Promise<string[]> {
    const checked = this.storeRules.filters.check({ filters });
    const values: unknown[] = [];
    const where = filterWhere(checked, await postgresDialect(this.db, values, checked, this.storeRules.filters.check));
    const { rows } = await this.db.query('listNodeIds', this.db.pool, { text: `SELECT n.id FROM nodes n ${where}`, values });
    return rows.map((r) => r.id as string);
  }

  async createNode(input: NodeCreate): Promise<NodeRecord> {
    const n = checkNodeCreate(input);
    const now = this.db.now().toISOString();
    const node = this.rules.manualNode(n, now);
    const what = 'createNode';
    try {
      return await this.db.tx(what, async (c) => {
        const address = node.manager === 'manual' ? node.address : null;
        const key = address === null ? null : addressKey(address);
        if (address !== null) {
          // Two admins adding the same address at once: the second waits and sees the first.
          await this.db.query(what, c, { name: 'address_lock', text: 'SELECT pg_advisory_xact_lock(hashtext($1))', values: [key ?? address.toLowerCase()] });
          const { rows } = await this.db.query(what, c, {
            name: 'address_owner',
            text: `SELECT id FROM nodes WHERE lower(address) = lower($1) UNION ALL SELECT node_id FROM node_addresses WHERE address = $2 LIMIT 1`,
            values: [address, key ?? ''],
          });
          if (rows.length > 0) throw addressTaken(address, (rows[0] as { id: string }).id);
        }
        const ins = await this.db.query(what, c, { name: 'node_insert_new', text: `${INSERT_NODE} ON CONFLICT (id) DO NOTHING`, values: nodeValues(node) });
        if (ins.rowCount === 0) throw capstanError('ERR_NODE_EXISTS', `node ${n.id} already exists`);
        if (key !== null) await this.db.query(what, c, { name: 'address_add', text: 'INSERT INTO node_addresses (address, node_id) VALUES ($1, $2)', values: [key, node.id] });
        await this.sets(what, c, node, null);
        await this.history(what, c, this.rules.transitions(null, node, now, node.manager === 'manual' ? 'added by an admin' : `added by ${node.manager}`));
        return node;
      });
    } catch (err) {
      // The cloud identity is unique: a second row for one instance is the same node again.
      const cause = (err as { cause?: { code?: string; constraint?: string } }).cause;
      if (isCapstanError(err) && cause?.code === '23505' && cause.constraint === 'nodes_cloud_idx') {
        throw capstanError('ERR_NODE_EXISTS', `a node with cloud identity ${node.source_id}/${node.region}/${node.account_id} already exists`);
      }
      throw err;
    }
  }

  /** Lock, change with a rule of the domain, write back and record the transitions if anything changed. */
  protected async update(what: string, id: string, at: string, cause: string, change: (n: NodeRecord) => NodeRecord): Promise<NodeRecord | null> {
    const when = toUtcIso(at, 'at');
    return this.db.tx(what, async (c) => {
      const node = await this.lockNode(what, c, id);
      if (!node) return null;
      const next = change(node);
      if (next !== node) {
        await this.db.query(what, c, { name: 'node_update', text: UPDATE_NODE, values: nodeValues(next) });
        await this.sets(what, c, next, node);
        await this.history(what, c, this.rules.transitions(node, next, when, cause));
      }
      return next;
    });
  }

  async recordClockSkew(id: string, skewSeconds: number, at: string): Promise<boolean> {
    const when = toUtcIso(at, 'at');
    if (!Number.isSafeInteger(skewSeconds)) throw capstanError('ERR_BAD_REQUEST', 'clock skew must be whole seconds');
    const r = await this.db.query('recordClockSkew', this.db.pool, { text: 'UPDATE nodes SET clock_skew = $2, clock_skew_at = $3 WHERE id = $1', values: [id, skewSeconds, when] });
    return (r.rowCount ?? 0) > 0;
  }

  async deleteNode(id: string, at?: string): Promise<boolean> {
    const when = toUtcIso(at ?? this.db.now().toISOString(), 'at');
    // Runs, inventory, history and compliance go with it through ON DELETE CASCADE.
    return this.db.tx('deleteNode', async (c) => {
      const node = await this.lockNode('deleteNode', c, id);
      if (!node) return false;
      if (node.certificate_fingerprint) {
        await this.db.query('deleteNode', c, {
          text: 'INSERT INTO revoked_certificates (fingerprint, node_id, revoked_at) VALUES ($1, $2, $3) ON CONFLICT DO NOTHING',
          values: [node.certificate_fingerprint, id, when],
        });
      }
      const res = await this.db.query('deleteNode', c, { text: 'DELETE FROM nodes WHERE id = $1', values: [id] });
      return (res.rowCount ?? 0) > 0;
    });
  }

  async getHistory(nodeId: string, page: number, perPage: number): Promise<Page<HistoryEntry>> {
    const { limit, offset } = checkPaging(page, perPage);
    const { rows } = await this.db.query('getHistory', this.db.pool, {
      name: 'history_list',
      text: `SELECT t.total, h.* FROM (SELECT count(*) AS total FROM node_history WHERE node_id = $1) t
        LEFT JOIN LATERAL (SELECT id, node_id, at, field, from_value, to_value, cause FROM node_history
          WHERE node_id = $1 ORDER BY id DESC LIMIT $2 OFFSET $3) h ON true`,
      values: [nodeId, limit, offset],
    });
    return { data: rows.filter((r) => r.id !== null).map((r) => historyFromRow(r, postgresRows)), total: Number(rows[0]?.total ?? 0) };
  }

  async getProperties(nodeId: string): Promise<Record<string, JsonValue> | null> {
    return (await this.getNodeLevel(nodeId))?.properties ?? null;
  }

  async getNodeLevel(nodeId: string): Promise<NodePropertyLevel | null> {
    const { rows } = await this.db.query('getNodeLevel', this.db.pool, {
      name: 'properties_get',
      text: `SELECT p.key, p.value FROM nodes n LEFT JOIN node_properties p ON p.node_id = n.id WHERE n.id = $1 ORDER BY p.key`,
      values: [nodeId],
    });
    if (rows.length === 0) return null;
    return levelOf((rows as Array<{ key: string | null; value: string }>).filter((r): r is { key: string; value: string } => r.key !== null));
  }

  async listNodeProperties(page: number, perPage: number): Promise<Page<NodePropertiesRow>> {
    const { limit, offset } = checkPaging(page, perPage);
    const what = 'listNodeProperties';
    const total = await this.db.query(what, this.db.pool, { name: 'node_properties_count', text: 'SELECT count(DISTINCT node_id)::int AS n FROM node_properties' });
    const { rows } = await this.db.query(what, this.db.pool, {
      name: 'node_properties_page',
      text: `SELECT p.node_id, p.key, p.value FROM node_properties p
        JOIN (SELECT DISTINCT node_id FROM node_properties ORDER BY node_id LIMIT $1 OFFSET $2) s ON s.node_id = p.node_id
        ORDER BY p.node_id, p.key`,
      values: [limit, offset],
    });
    return { data: propertiesRows(rows as Array<{ node_id: string; key: string; value: string }>), total: Number(total.rows[0]?.n ?? 0) };
  }

  async setProperties(nodeId: string, properties: Record<string, JsonValue>, secrets?: Record<string, string>): Promise<Record<string, JsonValue> | null> {
    if (secrets !== undefined) checkLevel(properties, secrets);
    else checkProperties(properties);
    const what = 'setProperties';
    return this.db.tx(what, async (c) => {
      const known = await this.db.query(what, c, { name: 'properties_node', text: 'SELECT 1 FROM nodes WHERE id = $1 FOR UPDATE', values: [nodeId] });
      if ((known.rowCount ?? 0) === 0) return null;
      const stored = await this.db.query(what, c, { name: 'properties_stored', text: 'SELECT key, value FROM node_properties WHERE node_id = $1', values: [nodeId] });
      const next = nextLevel(levelOf(stored.rows as Array<{ key: string; value: string }>).secrets, properties, secrets);
      const leaves = propertyRows(next.properties);
      await this.db.query(what, c, { name: 'properties_clear', text: 'DELETE FROM node_properties WHERE node_id = $1', values: [nodeId] });
      await this.db.query(what, c, { name: 'property_leaves_clear', text: 'DELETE FROM node_property_leaves WHERE node_id = $1', values: [nodeId] });
      const rows = [...Object.entries(next.properties).map(([k, v]) => [k, JSON.stringify(v)]), ...Object.entries(next.secrets).map(([k, v]) => [k, secretCell(v)])];
      if (rows.length > 0) {
        await this.db.query(what, c, {
          name: 'properties_add',
          text: 'INSERT INTO node_properties (node_id, key, value) SELECT $1, * FROM unnest($2::text[], $3::text[])',
          values: [nodeId, rows.map((r) => r[0]), rows.map((r) => r[1])],
        });
      }
      if (leaves.length > 0) {
        await this.db.query(what, c, {
          name: 'property_leaves_add',
          text: 'INSERT INTO node_property_leaves (node_id, path, value, num) SELECT $1, * FROM unnest($2::text[], $3::text[], $4::float8[])',
          values: [nodeId, leaves.map((l) => l.path), leaves.map((l) => l.value), leaves.map((l) => l.num)],
        });
      }
      return next.properties;
    });
  }

  /** A stored run's node fields (the domain's afterRun rule) and their transitions, inside the run's transaction. */
  /**
   * runStored for several runs of distinct nodes, one UPDATE for all (the rows typed by the table
   * itself through jsonb_populate_recordset): each node's record after its run.
   */
  async runsStored(what: string, c: pg.PoolClient, runs: ReadonlyArray<{ node: NodeRecord; startedUtc: string; configId: string | null; receivedAt: string }>): Promise<NodeRecord[]> {
    const fields = this.rules.afterRunFields;
    const next = runs.map((r) => this.rules.afterRun(r.node, r.startedUtc, r.configId, r.receivedAt));
    if (next.length === 0) return next;
    await this.db.query(what, c, {
      name: 'node_after_runs',
      text: `UPDATE nodes n SET ${fields.map((f) => `${f} = v.${f}`).join(', ')}
        FROM jsonb_populate_recordset(NULL::nodes, $1::jsonb) AS v WHERE n.id = v.id`,
      values: [JSON.stringify(next.map((n) => Object.fromEntries([['id', n.id], ...fields.map((f) => [f, n[f]])])))],
    });
    await this.history(what, c, runs.flatMap((r, i) => this.rules.transitions(r.node, next[i]!, r.receivedAt, 'run')));
    return next;
  }

  async runStored(what: string, c: pg.PoolClient, node: NodeRecord, startedUtc: string, configId: string | null, receivedAt: string): Promise<NodeRecord> {
    const next = this.rules.afterRun(node, startedUtc, configId, receivedAt);
    await this.db.query(what, c, { name: 'node_after_run', text: this.updateAfterRun, values: [next.id, ...this.rules.afterRunFields.map((f) => next[f])] });
    await this.history(what, c, this.rules.transitions(node, next, receivedAt, 'run'));
    return next;
  }
}
