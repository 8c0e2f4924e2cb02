// @ts-check
/**
 * The reference pipeline: the least work a run log's ingest can be, on one thread, with no
 * limits, no worker threads, no summary and no compliance — read the file, zstd-decompress it,
 * verify its S/MIME signature, split its 100 reports into fields, insert them as 100 rows in one
 * SQLite transaction, unlink the file. `npm run bench` runs it in the same sitting as Capstan's
 * own pipeline (the floor and its per-stage breakdown), so the two are compared under the same
 * load: it is what each of Capstan's stages is measured against.
 *
 * The verification is Capstan's own `verifySmime` (no smaller S/MIME verifier is at hand without
 * spawning openssl per file); the other stages are the plainest calls of the same libraries.
 *
 *   node bench/reference-pipeline.mjs   (from bench/lib: referencePipeline({ files, certs, dir }))
 */
import { readFileSync, unlinkSync, writeFileSync, mkdirSync } from 'node:fs';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import { decompress } from 'zstd-napi';
import { verifySmime } from '@capstan/shared';

const cpuUs = () => {
  const u = process.cpuUsage();
  return u.user + u.system;
};

/**
 * @param {{ files: { nodeId: string, name: string, body: Buffer }[], certs: Map<string, string>, dir: string }} o
 */
export function referencePipeline(o) {
  const inDir = join(o.dir, 'reference-in');
  mkdirSync(inDir, { recursive: true });
  for (const f of o.files) writeFileSync(join(inDir, f.name), f.body);
  const db = new Database(join(o.dir, `reference-${Date.now()}.db`));
  db.pragma('journal_mode = WAL');
  db.pragma('synchronous = FULL');
  db.exec(`CREATE TABLE reports (node_id TEXT, at TEXT, type TEXT, rule TEXT, directive TEXT, component TEXT, key TEXT, message TEXT)`);
  const ins = db.prepare('INSERT INTO reports VALUES (?, ?, ?, ?, ?, ?, ?, ?)');
  const insertAll = db.transaction((/** @type {string[][]} */ rows) => {
    for (const r of rows) ins.run(r[0], r[1], r[2], r[3], r[4], r[5], r[6], r[7]);
  });
  const us = { read: 0, decompress: 0, verify: 0, parse: 0, insert: 0, unlink: 0 };
  let reports = 0;
  const wall0 = performance.now();
  for (const f of o.files) {
    const path = join(inDir, f.name);
    let t = cpuUs();
    const step = (/** @type {keyof typeof us} */ k) => {
      const now = cpuUs();
      us[k] += now - t;
      t = now;
    };
    const raw = readFileSync(path);
    step('read');
    const signed = decompress(raw);
    step('decompress');
    const text = verifySmime(signed, [/** @type {string} */ (o.certs.get(f.nodeId))]).content.toString('utf8');
    step('verify');
    /** @type {string[][]} */
    const rows = [];
    for (const line of text.split('\n')) {
      const i = line.indexOf(' R: @@');
      if (i < 0) continue;
      const [head, message = ''] = line.slice(i + 6).split('@#', 2);
      const p = /** @type {string} */ (head).split('@@');
      rows.push([f.nodeId, line.slice(0, i), p[1] ?? '', p[2] ?? '', p[3] ?? '', p[5] ?? '', p[6] ?? '', message]);
    }
    reports += rows.length;
    step('parse');
    insertAll(rows);
    step('insert');
    unlinkSync(path);
    step('unlink');
  }
  const seconds = (performance.now() - wall0) / 1000;
  db.close();
  const n = o.files.length;
  return {
    runLogsPerSec: Math.round(n / seconds),
    cpuUsPerRunLog: Math.round(Object.values(us).reduce((a, b) => a + b, 0) / n),
    usPerRunLog: Object.fromEntries(Object.entries(us).map(([k, v]) => [k, Math.round(v / n)])),
    reportsPerRunLog: Math.round(reports / n),
  };
}
