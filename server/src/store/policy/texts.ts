/**
 * A node's bundle as bytes: its id, config id and generation time, then the text of its
 * directives (with its properties and sealed secrets when it has any) as the generator wrote it.
 * The text is what nodes with the same groups share; both stores keep each shared text once
 * (SQLite since migration 41, PostgreSQL since 42) and put the bundle back together from its
 * columns when it is read.
 */
import type { PolicyBundleRecord } from './types.js';

/** The bundle's bytes up to its text: the columns as JSON strings, in the bundle's key order. */
export const bundleHead = (nodeId: string, configId: string, generatedAt: string): string =>
  `{"node_id":${JSON.stringify(nodeId)},"config_id":${JSON.stringify(configId)},"generated_at":${JSON.stringify(generatedAt)},"directives":`;

/** The bundle a node is served: its head, then `tail` (everything after `"directives":`). */
export const bundleText = (nodeId: string, configId: string, generatedAt: string, tail: string): string =>
  `${bundleHead(nodeId, configId, generatedAt)}${tail}}`;

/**
 * The text of bundle `b` when it is its columns around a text, byte for byte (so that
 * bundleText gives it back); null when it is anything else (it is then stored whole).
 */
export function bundleTail(b: { node_id: string; config_id: string; bundle: string }, generatedAt: string): string | null {
  const head = bundleHead(b.node_id, b.config_id, generatedAt);
  if (b.bundle.length <= head.length || !b.bundle.startsWith(head) || !b.bundle.endsWith('}')) return null;
  return b.bundle.slice(head.length, -1);
}

/** A bundle row read with its text (`tail`, null when the row holds its bundle whole), its bytes put back together. */
export function bundleFromRow(r: PolicyBundleRecord & { tail: string | null }): PolicyBundleRecord {
  const { tail, ...row } = r;
  if (row.bundle !== '') return row;
  if (tail === null) throw new Error(`the policy text of node ${row.node_id} (config ${row.config_id}) is missing`);
  return { ...row, bundle: bundleText(row.node_id, row.config_id, row.generated_at, tail) };
}
