/**
 * Each distinct policy text stored once on SQLite (migration 41): a bundle whose text is in
 * `policy_texts` under its config id has `bundle` = '' and is put back together when read.
 * Everything here runs inside the caller's transaction.
 */
import type { SqliteDb } from '../sqlite/db.js';
import { MultiRow } from '../sqlite/multirow.js';
import { bundleTail } from './texts.js';

const TEXT_ROWS = new MultiRow('INSERT INTO policy_texts (config_id, tail)', 2, 'ON CONFLICT (config_id) DO NOTHING');

/** A bundle to write, `when` the time stored in its row. */
export interface BundleWrite {
  node_id: string;
  config_id: string;
  when: string;
  bundle: string;
}

/** What a bundle row is read with: its text when it is kept apart. */
export const BUNDLE_READ = `SELECT b.node_id, b.config_id, b.generated_at, b.bundle, t.tail
  FROM policy_bundles b LEFT JOIN policy_texts t ON b.bundle = '' AND t.config_id = b.config_id`;

/**
 * The rows to write into policy_bundles for `bundles` ([node, config, when, bundle], the bundle
 * '' where its text is kept apart), their new texts written; and the config ids whose texts the
 * nodes' bundles used before, for releaseTexts once the rows are written. A text is kept apart
 * when it is stored already or two of `bundles` have it, and shared only by bundles whose text is
 * that one byte for byte: another under the same config id is stored whole.
 */
export function splitBundles(db: SqliteDb, bundles: readonly BundleWrite[]): { rows: unknown[][]; before: string[] } {
  const before = db.stmt(`SELECT DISTINCT config_id FROM policy_bundles WHERE node_id IN (SELECT value FROM json_each(?)) AND bundle = ''`)
    .pluck().all(JSON.stringify(bundles.map((b) => b.node_id))) as string[];
  const configs = JSON.stringify([...new Set(bundles.map((b) => b.config_id))]);
  const kept = new Map(db.stmt('SELECT config_id, tail FROM policy_texts WHERE config_id IN (SELECT value FROM json_each(?))').raw(true).all(configs) as Array<[string, string]>);
  // A text no other bundle of these has, and not stored yet, stays in its bundle, not even cut
  // out of it: a node's own rendering (its templates read its facts) would cost a second row and
  // gain nothing.
  const uses = new Map<string, number>();
  for (const b of bundles) uses.set(b.config_id, (uses.get(b.config_id) ?? 0) + 1);
  const added = new Map<string, string>();
  const rows = bundles.map((b) => {
    const stored = kept.get(b.config_id);
    const tail = stored === undefined && uses.get(b.config_id)! < 2 ? null : bundleTail(b, b.when);
    if (tail === null) return [b.node_id, b.config_id, b.when, b.bundle];
    const shared = stored ?? added.get(b.config_id) ?? tail;
    if (!kept.has(b.config_id) && !added.has(b.config_id)) added.set(b.config_id, tail);
    return [b.node_id, b.config_id, b.when, shared === tail ? '' : b.bundle];
  });
  TEXT_ROWS.run(db, [...added]);
  return { rows, before };
}

/** The texts of `configIds` that no bundle uses any more, deleted (after the bundles that used them moved). */
export function releaseTexts(db: SqliteDb, configIds: readonly string[]): void {
  if (configIds.length === 0) return;
  db.stmt(`DELETE FROM policy_texts WHERE config_id IN (SELECT value FROM json_each(?))
    AND NOT EXISTS (SELECT 1 FROM policy_bundles b WHERE b.config_id = policy_texts.config_id AND b.bundle = '')`).run(JSON.stringify(configIds));
}
