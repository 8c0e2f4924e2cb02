/**
 * A claim an admin confirmed (docs/providers.md, Claims): the agent's own row — already registered
 * from its inventory — takes the discovered row's cloud identity, address, manager, tags, groups,
 * manager links, pinned host key and history; the discovered row is then deleted. The same
 * statements for both databases (each with its own placeholders, numbered in text order so that
 * SQLite's positional `?` match), inside the caller's transaction.
 */
import type { CloudIdentity } from './types.js';

/** The discovered row with this identity that no agent has joined yet. */
export const FIND_DISCOVERED = (ph: (n: number) => string) =>
  `WHERE n.source_id = ${ph(1)} AND n.region = ${ph(2)} AND n.account_id = ${ph(3)} AND n.last_inventory_at IS NULL AND n.certificate_fingerprint IS NULL`;

export const findParams = (i: CloudIdentity) => [i.source_id, i.region, i.account_id];

/** What the join runs, in order, with its parameters: `newId` takes over `oldId`'s row. */
export function joinStatements(
  ph: (n: number) => string, newId: string,
  old: { id: string; source_id: string | null; region: string | null; account_id: string | null; address: string | null; manager: string; tags: Record<string, string>; groups: string[] },
  mine: { tags: Record<string, string>; groups: string[] }, at: string, cause: string,
): Array<[string, unknown[]]> {
  // The row's copies (tags_json, groups_json) beside the tables: the discovered row's win.
  const tags = { ...mine.tags, ...old.tags };
  const groups = [...new Set([...mine.groups, ...old.groups])];
  const out: Array<[string, unknown[]]> = [
    // The cloud identity is unique: free it on the old row before the new one takes it.
    [`UPDATE nodes SET source_id = NULL, account_id = NULL WHERE id = ${ph(1)}`, [old.id]],
    [`UPDATE nodes SET source_id = ${ph(1)}, region = ${ph(2)}, account_id = ${ph(3)}, address = ${ph(4)}, manager = ${ph(5)}, updated_at = ${ph(6)}, tags_json = ${ph(7)}, groups_json = ${ph(8)} WHERE id = ${ph(9)}`,
      [old.source_id, old.region, old.account_id, old.address, old.manager, at, JSON.stringify(tags), JSON.stringify(groups), newId]],
  ];
  // The discovered row's tags, groups and manager links win over the agent's (it has none, mostly).
  for (const [table, key] of [['node_tags', 'key'], ['node_groups', 'group_id'], ['node_managers', 'manager_id']]) {
    out.push([`DELETE FROM ${table} WHERE node_id = ${ph(1)} AND ${key} IN (SELECT ${key} FROM ${table} WHERE node_id = ${ph(2)})`, [newId, old.id]]);
    out.push([`UPDATE ${table} SET node_id = ${ph(1)} WHERE node_id = ${ph(2)}`, [newId, old.id]]);
  }
  out.push([`DELETE FROM node_host_keys WHERE node_id = ${ph(1)} AND EXISTS (SELECT 1 FROM node_host_keys WHERE node_id = ${ph(2)})`, [newId, old.id]]);
  out.push([`UPDATE node_host_keys SET node_id = ${ph(1)} WHERE node_id = ${ph(2)}`, [newId, old.id]]);
  out.push([`UPDATE node_history SET node_id = ${ph(1)} WHERE node_id = ${ph(2)}`, [newId, old.id]]);
  out.push([`DELETE FROM nodes WHERE id = ${ph(1)}`, [old.id]]);
  out.push([`INSERT INTO node_history (node_id, at, field, from_value, to_value, cause) VALUES (${ph(1)}, ${ph(2)}, ${ph(3)}, ${ph(4)}, ${ph(5)}, ${ph(6)})`,
    [newId, at, 'source_id', null, old.source_id, cause]]);
  return out;
}
