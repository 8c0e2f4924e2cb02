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
import { eachLimited } from '@capstan/agent/sim/admin';
import { loadServerConfig } from '@capstan/server/config';
import { RunLogIngest, runStart } from '@capstan/server/ingest/runlog';
import { openStore } from '@capstan/server/store/index';
import { packOutcomes } from '@capstan/server/store/outcomes';
import { freshSchema, PG_URL } from './postgres.mjs';

/**
 * @param {{ kind: 'sqlite' | 'postgres', dir: string }} o
 */
async function open(o) {
  if (o.kind === 'sqlite') {
    const store = await openStore({ sqlitePath: join(o.dir, `floor-${Date.now()}.db`) });
    return { store, drop: async () => undefined };
  }
  const s = freshSchema();
  const store = await openStore({ databaseUrl: PG_URL, schema: s.schema, poolSize: loadServerConfig({}).database.pool_size });
  return { store, drop: s.drop };
}

/**
 * @param {{ kind: 'sqlite' | 'postgres', dir: string, files: { nodeId: string, name: string, body: Buffer }[],
 *   warmFiles?: { nodeId: string, name: string, body: Buffer }[],
 *   identities: import('@capstan/agent/sim/identities').SimIdentity[], progress?: (m: string) => void }} o
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
      // Steady state: each node's first run is in before the clock starts.
      say(`floor (${o.kind}): first runs of ${o.warmFiles.length} nodes (not measured)`);
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
 * Each library step alone over the same run logs: microseconds of CPU per run log. The insert is timed
 * in a fresh store, in batches of the server's batch size (one transaction each) as ingest does
 * it, and again with the runs marked incomplete, for which the store writes no per-directive
 * compliance rows: the difference is what those rows cost.
 * @param {{ kind: 'sqlite' | 'postgres', dir: string, files: { nodeId: string, name: string, body: Buffer }[],
 *   identities: import('@capstan/agent/sim/identities').SimIdentity[] }} o
 */
export async function floorBreakdown(o) {
  const config = loadServerConfig({});
  const maxBytes = config.limits.max_decompressed_size;
  const certs = new Map(o.identities.map((id) => [id.nodeId, id.certPem]));
  const n = o.files.length;
  // CPU time of this process (user + system), not wall time: on a shared machine other work
  // stretches wall time, not the work done. (PostgreSQL's own CPU is the database's, not counted.)
  const step = async (/** @type {() => Promise<void> | void} */ fn) => {
    const t = process.cpuUsage();
    await fn();
    const d = process.cpuUsage(t);
    return Math.round((d.user + d.system) / n);
  };
  /** @type {Buffer[]} */ const signed = [];
  /** @type {Buffer[]} */ const texts = [];
  /** @type {import('@capstan/shared').RunLog[]} */ const logs = [];
  /** @type {any[]} */ const rows = [];
  const us = {
    decompress: await step(async () => {
      for (const f of o.files) signed.push(await decompress(f.body, 'zstd', { maxBytes }));
    }),
    verify: await step(() => {
      o.files.forEach((f, i) => texts.push(verifySmime(signed[i], [/** @type {string} */ (certs.get(f.nodeId))], { maxBytes }).content));
    }),
    parse: await step(() => {
      o.files.forEach((f, i) => {
        const info = parseRunInfo(f.name);
        logs.push(parseRunLog(texts[i], { node_id: info.nodeId, timestamp: info.timestamp }, { maxBytes, maxReports: config.limits.max_reports, maxLineBytes: config.limits.max_line_length }));
      });
    }),
    // The summary and the outcomes packed for the compliance row, as the ingest workers do; the
    // log text goes to the store as it is (the store keeps it against the node-day's base).
    summarize: await step(() => {
      o.files.forEach((f, i) => {
        const { counts, outcomes } = summarize(logs[i].reports);
        rows.push({
          node_id: f.nodeId, started_at: runStart(logs[i]), config_id: logs[i].config_id, complete: isCompleteRun(logs[i]),
          report_count: logs[i].reports.length, counts, outcomes, outcomes_packed: packOutcomes(JSON.stringify(outcomes)), file_name: f.name,
          sha256: createHash('sha256').update(f.body).digest('hex'), log_text: texts[i], received_at: new Date().toISOString(),
        });
      });
    }),
    insert: 0,
    /** The same rows marked incomplete: the store then writes no compliance rows for them. */
    insertIncomplete: 0,
  };
  for (const [key, complete] of /** @type {const} */ ([['insert', true], ['insertIncomplete', false]])) {
    const { store, drop } = await open(o);
    try {
      for (const id of o.identities) await store.createNode({ id: id.nodeId, hostname: id.hostname, certificate: id.certPem, certificate_fingerprint: certificateFingerprint(id.certPem) });
      const size = config.processing.batch_size;
      us[key] = await step(async () => {
        for (let i = 0; i < rows.length; i += size) {
          const results = await store.insertRuns(rows.slice(i, i + size).map((r) => ({ ...r, complete: complete && r.complete })));
          const bad = results.find((r) => !r.ok);
          if (bad) throw /** @type {{ error: unknown }} */ (bad).error;
        }
      });
    } finally {
      await store.close();
      await drop();
    }
  }
  return {
    usPerRunLog: us,
    avgSignedBytes: Math.round(signed.reduce((s, b) => s + b.length, 0) / n),
    avgReports: Math.round(logs.reduce((s, l) => s + l.reports.length, 0) / n),
  };
}
