// @ts-check
/**
 * The floor: what the chosen libraries allow in one process, with no HTTP and no spool. The
 * server's real run-log pipeline (`RunLogIngest`: name → node → zstd → S/MIME verify → parse →
 * summary on worker threads, inserts grouped per transaction) runs over pre-signed run logs
 * already in the page cache, into the real store, with the server's default workers, batch size,
 * batch window, in-flight count and limits. A second pass times each library step on its own
 * (on one thread), so the report shows where a run log's time goes.
 */
import { createHash } from 'node:crypto';
import { mkdir, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { certificateFingerprint, decompress, parseRunInfo, parseRunLog, summarize, verifySmime, isCompleteRun } from '@capstan/shared';
import { eachLimited } from '@capstan/bench/sim/admin';
import { openRegistry, packOutcomes } from '@capstan/bench/store';
import { loadServerConfig } from '@capstan/server/config';
import { RunLogIngest, runStart } from '@capstan/server/ingest/runlog';
import { prepareRunLog } from '@capstan/server/ingest/runlog-prepare';
import { extractChanges } from '@capstan/server/ingest/changes';
import { freshSchema, PG_URL } from './postgres.mjs';

/**
 * @param {{ kind: 'sqlite' | 'postgres', dir: string }} o
 */
async function open(o) {
  if (o.kind === 'sqlite') {
    const store = await openRegistry({ sqlitePath: join(o.dir, `floor-${Date.now()}.db`) });
    return { store, drop: async () => undefined };
  }
  const s = freshSchema();
  const store = await openRegistry({ databaseUrl: PG_URL, schema: s.schema, poolSize: loadServerConfig({}).database.pool_size });
  return { store, drop: s.drop };
}

/**
 * @param {{ kind: 'sqlite' | 'postgres', dir: string, files: { nodeId: string, name: string, body: Buffer }[],
 *   warmFiles?: { nodeId: string, name: string, body: Buffer }[],
 *   identities: import('@capstan/bench/sim/identities').SimIdentity[], progress?: (m: string) => void }} o
 */
export async function benchFloor(o) {
  const say = o.progress ?? (() => undefined);
  const config = loadServerConfig({});
  const limits = {
    maxDecompressedBytes: config.limits.max_decompressed_size,
    maxReports: config.limits.max_reports,
    maxLineBytes: config.limits.max_line_length,
  };
  // The server's settings (server.ts): parallel batches on PostgreSQL only.
  const batch = {
    workers: config.processing.workers, batchSize: config.processing.batch_size, batchWindowMs: config.processing.batch_window,
    parallelBatches: o.kind === 'postgres' ? Math.max(1, Math.min(4, config.database.pool_size - 1)) : 1,
  };
  const inDir = join(o.dir, 'floor-in');
  await mkdir(inDir, { recursive: true });
  for (const f of o.files) await writeFile(join(inDir, f.name), f.body);

  const { store, drop } = await open(o);
  try {
    // Accepted nodes with pinned certificates, as POST /api/1/nodes makes them.
    say(`floor (${o.kind}): registering ${o.identities.length} nodes`);
    for (const id of o.identities) {
      await store.createNode({ id: id.nodeId, hostname: id.hostname, certificate: id.certPem, certificate_fingerprint: certificateFingerprint(id.certPem) });
    }
    const ingest = new RunLogIngest({ store, limits, ...batch });
    if (o.warmFiles) {
      // Steady state: each node's first run and the settling rounds are in before the clock starts.
      say(`floor (${o.kind}): ${o.warmFiles.length} earlier run logs (first runs and settling rounds, not measured)`);
      for (const f of o.warmFiles) await writeFile(join(inDir, f.name), f.body);
      await eachLimited(o.warmFiles, Math.max(config.processing.concurrency, ingest.inFlightHint), (f) => ingest.ingest(join(inDir, f.name), f.name));
    }
    // As the server's spool processor does: enough run logs in flight to fill a batch while one commits.
    const concurrency = Math.max(config.processing.concurrency, ingest.inFlightHint);
    say(`floor (${o.kind}): ingesting ${o.files.length} run logs, ${concurrency} at a time, batches of ≤ ${batch.batchSize}`);
    let inserted = 0;
    const t0 = performance.now();
    try {
      await eachLimited(o.files, concurrency, async (f) => {
        const r = await ingest.ingest(join(inDir, f.name), f.name);
        if (r.inserted) inserted++;
      });
    } finally {
      await ingest.close();
    }
    const ms = performance.now() - t0;
    if (inserted !== o.files.length) throw new Error(`floor stored ${inserted} of ${o.files.length} run logs`);
    return {
      runLogsPerSec: Math.round((o.files.length / ms) * 1000), ms: Math.round(ms), count: o.files.length, concurrency, ...batch,
      meanBatch: Math.round((ingest.stats.runs / Math.max(1, ingest.stats.batches)) * 10) / 10,
    };
  } finally {
    await store.close();
    await drop();
    await rm(inDir, { recursive: true, force: true });
  }
}

/**
 * Each library step alone over the same run logs: microseconds of CPU per run log. Decompress
 * and verify are timed over all the files; parse, summarize and pack one run log at a time,
 * each step's CPU taken around it (as bench/reference-pipeline.mjs does), the parsed log dropped
 * before the next one, after a warm-up pass: an ingest worker holds one parsed log at a time,
 * and a pass that kept every parsed log alive measured the collector walking thousands of them
 * (parse 358 µs and summarize 187 µs there, against ~100 and ~30 this way).
 *
 * The insert is timed in a fresh store, in batches of the server's batch size (one transaction
 * each) as ingest does it, and again with the runs marked incomplete, for which the store writes
 * no per-directive compliance rows: the difference is what those rows cost. With `warmFiles`
 * (steady state), those earlier runs are inserted before the clock starts, so the timed runs are
 * next runs against their node-day's base and last compliance, as a fleet sends them; without,
 * every timed run would be its node's first (new base, new compliance rows).
 * @param {{ kind: 'sqlite' | 'postgres', dir: string, files: { nodeId: string, name: string, body: Buffer }[],
 *   warmFiles?: { nodeId: string, name: string, body: Buffer }[],
 *   identities: import('@capstan/bench/sim/identities').SimIdentity[] }} o
 */
export async function floorBreakdown(o) {
  const config = loadServerConfig({});
  const maxBytes = config.limits.max_decompressed_size;
  const parseLimits = { maxBytes, maxReports: config.limits.max_reports, maxLineBytes: config.limits.max_line_length };
  const certs = new Map(o.identities.map((id) => [id.nodeId, id.certPem]));
  const n = o.files.length;
  const cpuUs = () => {
    const u = process.cpuUsage();
    return u.user + u.system;
  };
  // CPU time of this process (user + system), not wall time: on a shared machine other work
  // stretches wall time, not the work done. (PostgreSQL's own CPU is the database's, not counted.)
  const step = async (/** @type {() => Promise<void> | void} */ fn) => {
    const t = cpuUs();
    await fn();
    return Math.round((cpuUs() - t) / n);
  };
  /** @type {Buffer[]} */ const signed = [];
  /** @type {Buffer[]} */ const texts = [];
  /** @type {any[]} */ const rows = [];
  let reportsSeen = 0;
  const us = {
    decompress: await step(async () => {
      for (const f of o.files) signed.push(await decompress(f.body, 'zstd', { maxBytes }));
    }),
    verify: await step(() => {
      o.files.forEach((f, i) => texts.push(verifySmime(signed[i], [/** @type {string} */ (certs.get(f.nodeId))], { maxBytes }).content));
    }),
    parse: 0,
    // The summary (outcomes, start, completeness, changes), as the ingest workers make it.
    summarize: 0,
    // The outcomes packed for the compliance row and the file's digest, also in the workers; the
    // log text goes to the store as it is (the store keeps it against the node-day's base).
    pack: 0,
    insert: 0,
    /** The same rows marked incomplete: the store then writes no compliance rows for them. */
    insertIncomplete: 0,
  };
  const prepared = (/** @type {number} */ i, /** @type {boolean} */ timed) => {
    const f = o.files[i];
    let t = cpuUs();
    const lap = (/** @type {'parse' | 'summarize' | 'pack'} */ k) => {
      const now = cpuUs();
      if (timed) us[k] += now - t;
      t = now;
    };
    const info = parseRunInfo(f.name);
    const log = parseRunLog(texts[i], { node_id: info.nodeId, timestamp: info.timestamp }, parseLimits);
    lap('parse');
    const { counts, outcomes } = summarize(log.reports);
    const row = {
      node_id: f.nodeId, started_at: runStart(log), config_id: log.config_id, complete: isCompleteRun(log),
      report_count: log.reports.length, counts, outcomes, changes: extractChanges(log.reports), file_name: f.name,
    };
    lap('summarize');
    const json = Buffer.from(JSON.stringify(outcomes), 'utf8');
    Object.assign(row, { outcomes_json: json, outcomes_packed: packOutcomes(json), sha256: createHash('sha256').update(o.files[i].body).digest('hex') });
    lap('pack');
    if (timed) reportsSeen += log.reports.length;
    return { ...row, log_text: texts[i], received_at: new Date().toISOString() };
  };
  for (let i = 0; i < Math.min(n, 200); i++) prepared(i, false);
  for (let i = 0; i < n; i++) rows.push(prepared(i, true));
  for (const k of /** @type {const} */ (['parse', 'summarize', 'pack'])) us[k] = Math.round(us[k] / n);
  /** @type {any[]} */
  const warmRows = [];
  for (const f of o.warmFiles ?? []) {
    const run = await prepareRunLog({ raw: f.body, compression: 'zstd', nodeId: f.nodeId, timestamp: parseRunInfo(f.name).timestamp,
      certificate: /** @type {string} */ (certs.get(f.nodeId)), limits: { maxDecompressedBytes: maxBytes, maxReports: parseLimits.maxReports, maxLineBytes: parseLimits.maxLineBytes } });
    warmRows.push({ ...run, file_name: f.name, received_at: new Date().toISOString() });
  }
  for (const [key, complete] of /** @type {const} */ ([['insert', true], ['insertIncomplete', false]])) {
    const { store, drop } = await open(o);
    try {
      for (const id of o.identities) await store.createNode({ id: id.nodeId, hostname: id.hostname, certificate: id.certPem, certificate_fingerprint: certificateFingerprint(id.certPem) });
      const size = config.processing.batch_size;
      const insertAll = async (/** @type {any[]} */ all, /** @type {boolean} */ keep) => {
        for (let i = 0; i < all.length; i += size) {
          const results = await store.insertRuns(all.slice(i, i + size).map((r) => ({ ...r, complete: keep && r.complete })));
          const bad = results.find((r) => !r.ok);
          if (bad) throw /** @type {{ error: unknown }} */ (bad).error;
        }
      };
      await insertAll(warmRows, true);
      us[key] = await step(() => insertAll(rows, complete));
    } finally {
      await store.close();
      await drop();
    }
  }
  return {
    usPerRunLog: us,
    avgSignedBytes: Math.round(signed.reduce((s, b) => s + b.length, 0) / n),
    avgReports: Math.round(reportsSeen / n),
  };
}
