/**
 * NodeRecord ↔ `nodes` columns, shared by both backends: the record carries tags and groups as
 * values, the row as JSON (text in SQLite, jsonb in Postgres). Tags come back sorted by key and
 * groups sorted, so both backends (jsonb reorders keys) answer the same.
 */
import type { NodeRecord } from './store.js';
import { NODE_COLUMNS } from './query.js';

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
