/**
 * Two capstan-server processes on one PostgreSQL database ingest 2,000 signed run logs together:
 * every run is stored exactly once, including the 200 that are sent to both servers at once,
 * and each node's last run is its newest. Skipped with the reason when PostgreSQL is unreachable.
 */
import { appendFile, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { compressSync, createNodeIdentity, formatReport, runLogFileName, signSmime } from '@capstan/shared';
import { adminClient, BIN, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';
import { freshSchemaUrl, postgresOrSkipFile } from '../server/pg.js';
import pg from 'pg';

const NODES = 8;
const RUNS_PER_NODE = 250;
/** The runs start two days ago at midnight UTC: in the past (the server refuses runs dated ahead of it) and within run retention. */
const BASE = Math.floor(Date.now() / 86_400_000 - 2) * 86_400_000;
const TOTAL = NODES * RUNS_PER_NODE;
const IN_FLIGHT = 16;

if (await postgresOrSkipFile(t)) {
  t.test('two servers on one database store 2,000 run logs exactly once', { timeout: 120_000 }, async (t) => {
    const url = await freshSchemaUrl(t);
    const dir = programDir(t, { 'server.toml': '[lifecycle]\nsweep_interval = "1h"\n[processing]\nconcurrency = 4\n' });
    // Servers sharing a database share the secret sealing its signing keys.
    await appendFile(join(dir, 'server.toml'), `[identity]\nsecret_file = "${join(dir, 'identity.secret')}"\n`);
    const start = (name: string) => startServer(t, join(dir, name), { config: join(dir, 'server.toml'), logLevel: 'error', args: ['--database', url] });
    // Both start together: the migration runs once under its advisory lock.
    const [{ server: a, api: apiA }, { server: b, api: apiB }] = await Promise.all([start('a'), start('b')]);

    // Pre-signed run logs of a few test identities (signing is the slow part, not the ingest).
    const ids = Array.from({ length: NODES }, (_, i) => `c0ffee00-0000-4000-8000-00000000000${i}`);
    const files: Array<{ name: string; body: Buffer }> = [];
    for (const id of ids) {
      const identity = createNodeIdentity(id, { bits: 1024 });
      t.equal((await apiA('POST', '/api/1/nodes', { id, hostname: `${id}.test`, certificate: identity.certPem })).status, 201);
      for (let r = 0; r < RUNS_PER_NODE; r++) {
        const startAt = new Date(BASE + r * 5 * 60_000);
        const stamp = `${startAt.toISOString().slice(0, 19)}+00:00`;
        const line = (type: string, component: string, key = 'k') => formatReport({ policy: 'p', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: key, msg: 'm', node_id: id, start_datetime: stamp, execution_datetime: stamp });
        const text = [line('control', 'start', `cfg-${r % 3}`), line('result_success', 'File'), line('result_repaired', 'Service'), line('control', 'end', `cfg-${r % 3}`)].join('\n') + '\n';
        files.push({ name: runLogFileName(id, startAt, 'zstd'), body: compressSync(signSmime(Buffer.from(text), identity), 'zstd') });
      }
    }
    t.equal(files.length, TOTAL);

    // Split across both servers; every tenth file goes to both at the same time.
    const sends: Array<{ url: string; file: { name: string; body: Buffer } }> = [];
    files.forEach((file, i) => {
      sends.push({ url: i % 2 ? a.url : b.url, file });
      if (i % 10 === 0) sends.push({ url: i % 2 ? b.url : a.url, file });
    });
    const t0 = Date.now();
    let next = 0;
    await Promise.all(Array.from({ length: IN_FLIGHT }, async () => {
      while (next < sends.length) {
        const { url: base, file } = sends[next++]!;
        const res = await fetch(`${base}/reports/${encodeURIComponent(file.name)}`, { method: 'PUT', body: file.body });
        if (res.status !== 201) throw new Error(`PUT ${file.name} answered ${res.status}`);
      }
    }));
    const processed = async () => {
      let done = 0;
      for (const api of [apiA, apiB]) {
        const p = (await api('GET', '/api/1/system/status')).json.data.processed;
        if ((p.reports_failed ?? 0) > 0) throw new Error(`a run log failed: ${JSON.stringify(p)}`);
        done += p.reports_done ?? 0;
      }
      return done;
    };
    await waitFor(async () => ((await processed()) >= sends.length ? true : undefined), 'every file to be processed', 90_000);
    t.comment(`${sends.length} files ingested by two servers in ${((Date.now() - t0) / 1000).toFixed(1)} s`);

    const db = new pg.Client({ connectionString: url });
    await db.connect();
    t.teardown(() => db.end());
    const { rows } = await db.query<{ n: string; distinct_runs: string }>(
      'SELECT count(*) AS n, count(DISTINCT (node_id, started_at_utc)) AS distinct_runs FROM runs');
    t.same(rows[0], { n: String(TOTAL), distinct_runs: String(TOTAL) }, 'every run once, none lost');
    for (const id of ids) {
      const runs = await apiB('GET', `/api/1/nodes/${id}/runs?per_page=1`);
      t.equal(runs.json.total, RUNS_PER_NODE, `${id}: all its runs`);
      const node = (await apiB('GET', `/api/1/nodes/${id}`)).json.data;
      t.equal(node.last_run_at, new Date(BASE + (RUNS_PER_NODE - 1) * 5 * 60_000).toISOString(), 'the newest run is the last run');
    }
    const compliance = (await apiA('GET', '/api/1/compliance')).json.data;
    t.match(compliance, { nodes: NODES, nodes_with_data: NODES, counts: { success: NODES, repaired: NODES } });
  });
}
