/**
 * The `nodes` columns and how a NodeRecord maps to them, shared by both backends (and the
 * history rows, which both read the same way). The record carries tags and groups as
 * values, the row as JSON (text in SQLite, jsonb in Postgres). Tags come back sorted by key and
 * groups sorted, so both backends (jsonb reorders keys) answer the same.
 */
import type { AcceptedNodeRow, HistoryEntry, NodeRecord } from './types.js';
import type { RowCodec } from '../row-codec.js';

/** Every column of `nodes`, in one order both backends read and write them in. The certificate
 * lives in `node_certificates` (migration 2) and is joined in as `certificate`. */
export const NODE_COLUMNS = [
  'id', 'hostname', 'status', 'state', 'accepted', 'certificate_fingerprint',
  'os_name', 'os_version', 'agent_version', 'policy_server', 'created_at', 'updated_at',
  'accepted_at', 'last_inventory_at', 'last_run_at', 'last_config_id',
  // added by migration 2
  'name', 'address', 'manager', 'region', 'source_id', 'account_id', 'tags_json', 'groups_json',
  'last_contact_at', 'state_changed_at', 'policy_config_id',
  // added by migration 9 (0/1)
  'relay',
  // added by migration 12
  'conflict_certificate', 'conflict_fingerprint', 'conflict_at',
  // added by migration 13
  'clock_skew', 'clock_skew_at',
] as const;

/** A node row with its certificate, as every read of whole nodes selects it. */
export const SELECT_NODE = `SELECT ${NODE_COLUMNS.map((c) => `n.${c}`).join(', ')}, nc.certificate
  FROM nodes n LEFT JOIN node_certificates nc ON nc.node_id = n.id`;

/**
 * One page of a node list: the page is cut from `nodes` alone, and only its rows get their
 * certificate; joining first would carry 100,000 certificates through the sort of a deep page.
 * The cut selects the page's ids (and its sort key) only, so an index on the sort's columns
 * answers it without reading a row it skips; the page's own rows are read by id after. At
 * 100,000 nodes a page near the end sorted by name took 107 ms on PostgreSQL reading every row
 * it passed, 16–21 ms from the (name, id) index alone. CROSS JOIN keeps SQLite reading the cut
 * first: with its LIMIT a parameter, it would otherwise scan every node and probe the cut.
 */
export function nodePage(where: string, order: string, limit: string, offset: string, complianceKey?: string): string {
  // Sorted by compliance: the key is computed from the node's compliance row in the cut.
  const key = complianceKey ? `, ${complianceKey} AS compliance_key` : '';
  const join = complianceKey ? ' LEFT JOIN node_compliance t ON t.node_id = n.id' : '';
  const cut = `SELECT n.id${key} FROM nodes n${join} ${where} ${order} LIMIT ${limit} OFFSET ${offset}`;
  const columns = NODE_COLUMNS.map((c) => `n.${c}`).join(', ');
  return withCertificates(`SELECT ${columns}${complianceKey ? ', k.compliance_key' : ''} FROM (${cut}) k CROSS JOIN nodes n WHERE n.id = k.id`, order);
}

/** A page of nodes (`page`, a query over `nodes n`) with their certificates, in `order`. */
export function withCertificates(page: string, order: string): string {
  return `SELECT ${NODE_COLUMNS.map((c) => `n.${c}`).join(', ')}, nc.certificate FROM (
    ${page}) n
    LEFT JOIN node_certificates nc ON nc.node_id = n.id ${order}`;
}

type Column = (typeof NODE_COLUMNS)[number];

const sortedTags = (t: Record<string, string>) =>
  Object.fromEntries(Object.entries(t).sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) as Record<string, string>;

export function nodeFromColumns(
  row: Record<string, unknown>,
  scalar: (value: unknown, column: Column) => unknown,
  json: (value: unknown) => unknown,
): NodeRecord {
  const node = { certificate: row.certificate ?? null } as Record<string, unknown>;
  for (const c of NODE_COLUMNS) {
    if (c === 'tags_json') node.tags = sortedTags((json(row[c]) ?? {}) as Record<string, string>);
    else if (c === 'groups_json') node.groups = [...((json(row[c]) ?? []) as string[])].sort();
    else if (c === 'relay') node.relay = Number(row[c]) === 1;
    else node[c] = scalar(row[c], c);
  }
  // Field order as in NodeRecord: certificate after accepted.
  const { certificate, ...rest } = node;
  const { id, hostname, status, state, accepted, ...more } = rest;
  return { id, hostname, status, state, accepted, certificate, ...more } as unknown as NodeRecord;
}

export function nodeToColumns(n: NodeRecord): Record<Column, unknown> {
  const out = {} as Record<Column, unknown>;
  for (const c of NODE_COLUMNS) {
    if (c === 'tags_json') out[c] = JSON.stringify(sortedTags(n.tags));
    else if (c === 'groups_json') out[c] = JSON.stringify([...n.groups].sort());
    else if (c === 'relay') out[c] = n.relay ? 1 : 0;
    else out[c] = n[c as keyof NodeRecord];
  }
  return out;
}

const TIME_COLUMNS: ReadonlySet<string> = new Set([
  'created_at', 'updated_at', 'accepted_at', 'last_inventory_at', 'last_run_at', 'last_contact_at', 'state_changed_at', 'conflict_at', 'clock_skew_at',
]);

/** A `nodes` row (SELECT_NODE: with its certificate) as a record. */
export function nodeFromRow(row: Record<string, unknown>, codec: RowCodec): NodeRecord {
  return nodeFromColumns(row, (v, c) => (TIME_COLUMNS.has(c) ? codec.time(v) : (v ?? null)), codec.json);
}

export function historyFromRow(row: Record<string, unknown>, codec: RowCodec): HistoryEntry {
  return {
    id: Number(row.id),
    node_id: row.node_id as string,
    at: codec.time(row.at)!,
    field: row.field as HistoryEntry['field'],
    from: (row.from_value as string | null) ?? null,
    to: row.to_value as string,
    cause: row.cause as string,
  };
}

/** Named parameters for writing a whole node row (better-sqlite3 binds `@name` from an object). */
export function nodeParams(n: NodeRecord): Record<string, unknown> {
  const cols = nodeToColumns(n);
  const p: Record<string, unknown> = {};
  for (const c of NODE_COLUMNS) p[c] = cols[c];
  return p;
}

/** Positional values for writing a whole node row, in NODE_COLUMNS order (node-pg binds `$n`). */
export function nodeValues(n: NodeRecord): unknown[] {
  const cols = nodeToColumns(n);
  return NODE_COLUMNS.map((c) => cols[c]);
}

/**
 * acceptedNodesPage's statement: the accepted nodes after a key, by key (parameters: after,
 * limit), with their certificates or without (NULL: the join left out, about 60 % of a walk of
 * 300,000 nodes). On SQLite, which plans without statistics, the unary `+` keeps it from taking
 * nodes_accepted_idx and sorting every accepted node for each page: the primary key is walked
 * from `after`. At 300,000 nodes the offset pages of the node list, each counted, made the
 * relays' sync minutes of the server's event loop.
 */
export function acceptedPageSql(sqlite: boolean, withCertificates: boolean): string {
  const [accepted, after, limit] = sqlite ? ['+n.accepted', '?', '?'] : ['n.accepted', '$1', '$2'];
  const [certificate, join] = withCertificates
    ? ['nc.certificate', 'LEFT JOIN node_certificates nc ON nc.node_id = n.id']
    : ['NULL AS certificate', ''];
  return `SELECT n.id, n.hostname, n.policy_server, n.relay, n.certificate_fingerprint, ${certificate}
  FROM nodes n ${join}
  WHERE ${accepted} = 'accepted' AND n.id > ${after} ORDER BY n.id LIMIT ${limit}`;
}

/** A row of acceptedPageSql as the store answers it. */
export function acceptedRow(r: Record<string, unknown>): AcceptedNodeRow {
  return {
    id: r.id as string, hostname: r.hostname as string, policy_server: (r.policy_server as string | null) ?? '',
    relay: Number(r.relay) === 1 || r.relay === true, certificate_fingerprint: (r.certificate_fingerprint as string | null) ?? null,
    certificate: (r.certificate as string | null) ?? null,
  };
}

/** A node's acceptance and pinned certificate (NodeStore.getNodeTrust), `?` its id. */
export const TRUST = 'SELECT n.accepted, nc.certificate FROM nodes n LEFT JOIN node_certificates nc ON nc.node_id = n.id WHERE n.id = ?';
