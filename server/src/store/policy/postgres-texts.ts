/**
 * Each policy text that nodes share stored once on PostgreSQL (migration 42): a bundle whose
 * text is in `policy_texts` under its config id has `bundle` = '' and is put back together when
 * read (texts.ts). A write's shared texts are stored, or taken back into use, by a statement
 * committed before the write's transaction (storeTexts); the sweep deletes a text no bundle uses
 * once nobody has taken it into use for two hours (deleteUnusedTexts).
 */
import type pg from 'pg';
import type { PostgresDb } from '../postgres/db.js';
import { bundleTail } from './texts.js';

/** A bundle about to be written; `when` is its generated_at as stored. */
export interface TextBundle {
  node_id: string;
  config_id: string;
  when: string;
  bundle: string;
}

/** generated_at as a bundle row reads it back (PostgreSQL keeps the instant, not the text). */
const readBack = (when: string) => new Date(when).toISOString();

/**
 * The text of `b` as its row would be put back together (its columns as read, around it); null
 * when `b` is not its columns around a text, byte for byte (it is then stored whole).
 */
export function textOf(b: TextBundle): string | null {
  return bundleTail(b, readBack(b.when));
}

/**
 * The texts that two or more of `bundles` have under the same config id, by config id: the
 * first such bundle's text. Another bundle under that config id shares it only if its own text
 * is the same byte for byte; a node's own rendering (one bundle per config id) stays whole.
 */
export function sharedTexts(bundles: readonly TextBundle[]): Map<string, string> {
  const uses = new Map<string, number>();
  for (const b of bundles) uses.set(b.config_id, (uses.get(b.config_id) ?? 0) + 1);
  const out = new Map<string, string>();
  for (const b of bundles) {
    if (uses.get(b.config_id)! < 2 || out.has(b.config_id)) continue;
    const text = textOf(b);
    if (text !== null) out.set(b.config_id, text);
  }
  return out;
}

/**
 * `texts` stored, or taken back into use, in config id order, committed on their own (`pool`):
 * the texts as the table holds them afterwards, by config id (one stored before under the same
 * config id keeps its bytes; a bundle shares it only where they are its own). A text stored here
 * by a write that then fails is deleted by the sweep like any unused one. Every call brings its
 * texts' `used_at` to now, so none of them can be collected while the write that follows runs.
 */
export async function storeTexts(db: PostgresDb, texts: ReadonlyMap<string, string>): Promise<Map<string, string>> {
  if (texts.size === 0) return new Map();
  const ids = [...texts.keys()].sort();
  // The texts as one JSON array: node-pg escapes each element of a text[] in JavaScript.
  const { rows } = await db.query<{ config_id: string; tail: string }>('putPolicies', db.pool, {
    name: 'policy_texts_store',
    text: `INSERT INTO policy_texts AS t (config_id, tail, used_at)
        SELECT u.config_id, x.tail, now() FROM unnest($1::text[]) WITH ORDINALITY AS u(config_id, i)
        JOIN json_array_elements_text($2::json) WITH ORDINALITY AS x(tail, i) ON x.i = u.i
        ORDER BY u.config_id
      ON CONFLICT (config_id) DO UPDATE SET used_at = excluded.used_at
      RETURNING t.config_id, t.tail`,
    values: [ids, JSON.stringify(ids.map((k) => texts.get(k)!))],
  });
  return new Map(rows.map((r) => [r.config_id, r.tail]));
}

/** What bundle `b`'s row stores: '' when `stored` holds its text byte for byte, else the bundle whole. */
export function storedBundle(b: TextBundle, stored: ReadonlyMap<string, string>): string {
  const text = stored.get(b.config_id);
  return text !== undefined && textOf(b) === text ? '' : b.bundle;
}

/** What a bundle row is read with: its text when it is kept apart. */
export const BUNDLE_READ_PG = `SELECT b.node_id, b.config_id, b.generated_at, b.bundle, t.tail
  FROM policy_bundles b LEFT JOIN policy_texts t ON b.bundle = '' AND t.config_id = b.config_id`;

/**
 * Up to `limit` texts no bundle uses and nobody has taken into use for two hours, deleted; a
 * text a writer is taking back into use (locked by its storeTexts) is skipped.
 */
export async function deleteUnusedTexts(db: PostgresDb, c: pg.Pool | pg.PoolClient, limit: number): Promise<number> {
  const res = await db.query('deleteUnusedPolicyTexts', c, {
    text: `DELETE FROM policy_texts WHERE config_id IN (SELECT t.config_id FROM policy_texts t
      WHERE t.used_at < now() - interval '2 hours' AND NOT EXISTS (SELECT 1 FROM policy_bundles b WHERE b.config_id = t.config_id AND b.bundle = '')
      LIMIT $1 FOR UPDATE SKIP LOCKED)`,
    values: [limit],
  });
  return res.rowCount ?? 0;
}
