/**
 * A node's bundle as bytes: its id, config id and generation time, then the text of its
 * directives (with its properties and sealed secrets when it has any) as the generator wrote it.
 * The text is what nodes with the same groups share; SQLite stores each text once
 * (migration 41) and the bundle is put back together from its columns when it is read.
 */

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
