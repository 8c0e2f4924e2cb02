/**
 * Version 42: on PostgreSQL too, each policy text that nodes share stored once.
 *
 * PostgreSQL kept every bundle whole and compressed each where it stored it (TOAST). With the
 * policy bench's technique (three directives of thirty lines), the bundles' insert was the
 * largest statement of a generation: at 50,000 nodes 10.5 s of the first generation's database
 * time and 12.3 s of a directive added to every node's rule, most of it parsing each text out
 * of the batch's JSON and compressing it again, though the batch's nodes share a handful of
 * texts.
 *
 * `policy_texts (config_id, tail, used_at)` holds a text once, by the config id the generator
 * derives from it, as on SQLite since migration 41, with when a writer last took it into use.
 * A bundle whose text is there has `bundle` = '' and is read back as the same bytes
 * (`policy/texts.ts`). A writer stores the texts of a write, each used by two of its bundles
 * or more, in a statement committed before its transaction, which brings their `used_at` to
 * now; a bundle is stored without its text only when the stored text is its own byte for byte.
 * The sweep deletes a text no bundle uses once it has not been taken into use for two hours
 * (SweepStore.deleteUnusedPolicyTexts), so a text is never collected while a transaction that
 * is about to name it runs (as expectation lists, migration 30).
 *
 * The bundles stored before stay whole, and are read as they are; the next generation that
 * moves a node writes its bundle the new way. `policy_bundles_config_idx` finds a text's
 * bundles (only those without their text).
 *
 * SQLite: nothing (migration 41).
 */
import type { Migration } from './index.js';

const postgres = `CREATE TABLE policy_texts (
  config_id text COLLATE "C" PRIMARY KEY,
  tail text NOT NULL,
  used_at timestamptz NOT NULL
);
CREATE INDEX policy_bundles_config_idx ON policy_bundles (config_id) WHERE bundle = '';`;

export const policyTextsPostgres: Migration = { version: 42, name: 'policy_texts_postgres', sqlite: 'SELECT 1;', postgres };
