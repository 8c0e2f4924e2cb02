/**
 * Version 41: on SQLite, each policy text that nodes share stored once.
 *
 * A node's bundle is its id, its config id and when it was generated, around the text of its
 * directives (with its properties and sealed secrets when it has any): everything after
 * `"directives":`. Nodes with the same groups get the same text, and each bundle stored it
 * again. With ten directives of 3 KB each, 99,000 bundles took 1.8 GB, and a policy change
 * reaching every node wrote all of it again: the policy bench's first generation at 100,000 nodes
 * took 34.5–35.7 s with those bundles, 23.6 s when their texts were not stored at all, and 22.4 s
 * with this.
 *
 * `policy_texts (config_id, tail)` holds a text once, by the config id the generator derives
 * from it (a digest of the same content). A bundle whose text is there has `bundle` = '' and is
 * read back as the same bytes (`policy/sqlite-texts.ts`). A text is kept apart when two bundles
 * have it (or it is stored already), and only for the bundles whose text is that one, byte for
 * byte: a node's own rendering stays in its bundle, and so does a bundle whose config id names
 * another text. A text goes with the last bundle that uses it (`policy_texts_release` for
 * deletions, cascades included; a write that moves bundles to another config releases the old
 * one's itself).
 *
 * The bundles stored before are split here the same way, each only where its text cuts out of
 * it exactly; the others stay whole. `policy_bundles_config_idx` finds a text's bundles (it holds
 * only the bundles without their text: one stored whole costs no index entry).
 *
 * PostgreSQL: nothing here; it keeps its shared texts once since migration 42.
 */
import type { Migration } from './index.js';

/** The bytes of bundle row `b` up to its text (the columns as JSON strings, in the bundle's key order). */
const head = (b: string) => `'{"node_id":' || json_quote(${b}.node_id) || ',"config_id":' || json_quote(${b}.config_id)
  || ',"generated_at":' || json_quote(${b}.generated_at) || ',"directives":'`;

const sqlite = `CREATE TABLE policy_texts (
  config_id TEXT PRIMARY KEY,
  tail TEXT NOT NULL
) STRICT;
CREATE INDEX policy_bundles_config_idx ON policy_bundles (config_id) WHERE bundle = '';
INSERT INTO policy_texts (config_id, tail)
  SELECT b.config_id, substr(b.bundle, length(${head('b')}) + 1, length(b.bundle) - length(${head('b')}) - 1)
  FROM policy_bundles b
  WHERE substr(b.bundle, 1, length(${head('b')})) = ${head('b')} AND substr(b.bundle, -1) = '}'
    AND b.config_id IN (SELECT config_id FROM policy_bundles GROUP BY config_id HAVING count(*) > 1)
  ON CONFLICT (config_id) DO NOTHING;
UPDATE policy_bundles AS b SET bundle = ''
  WHERE b.bundle = ${head('b')} || (SELECT t.tail FROM policy_texts t WHERE t.config_id = b.config_id) || '}';
DELETE FROM policy_texts WHERE NOT EXISTS (SELECT 1 FROM policy_bundles b WHERE b.config_id = policy_texts.config_id AND b.bundle = '');
CREATE TRIGGER policy_texts_release AFTER DELETE ON policy_bundles WHEN OLD.bundle = ''
BEGIN
  DELETE FROM policy_texts WHERE config_id = OLD.config_id
    AND NOT EXISTS (SELECT 1 FROM policy_bundles b WHERE b.config_id = OLD.config_id AND b.bundle = '');
END;`;

export const bundleTexts: Migration = { version: 41, name: 'bundle_texts', sqlite, postgres: 'SELECT 1;' };
