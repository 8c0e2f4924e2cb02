/**
 * RUDDER's reference run logs through a real capstan-server, on SQLite and on PostgreSQL, with
 * the counts MANIFEST.md gives for each: the two signed e745… logs as RUDDER signed them, and the
 * other three reference logs (two of the root server, the Windows one of e745…) signed here — the
 * root's with a test identity for node `root`, e745's with its published test key. Both stores
 * must answer exactly the same.
 */
import { existsSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { createNodeIdentity, signSmime } from '@capstan/shared';
import { adminClient, BIN, CONFORMANCE, fixturesAbsent, startProgram, waitFor, programDir } from '../helpers/programs.js';
import { freshSchemaUrl, pgUnavailable } from '../server/pg.js';

const E745 = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const RUNLOGS = join(CONFORMANCE, 'files/runlogs');
const KEYS = join(CONFORMANCE, 'files/keys');

/** MANIFEST.md: reports per type of each reference parse (the 2017 log has the 2018 one's shape). */
const EXPECTED: Record<string, { node: string; config: string; reports: number; counts: Record<string, number> }> = {
  '2017-08-24T15_55_01+00_00': { node: E745, config: '20180824-130007-3ad37587', reports: 72, counts: {} },
  '2018-08-24T15_55_01+00_00': {
    node: E745, config: '20180824-130007-3ad37587', reports: 72,
    counts: { control: 2, result_success: 35, log_info: 19, result_na: 6, log_warn: 4, log_repaired: 3, audit_noncompliant: 2, result_repaired: 1 },
  },
  '2019-12-02T14_24_20+00_00': {
    node: 'root', config: '20191202-150503-68b01c0f', reports: 104,
    counts: { log_info: 53, result_success: 33, log_warn: 7, result_na: 6, control: 2, log_repaired: 1, result_repaired: 1, result_error: 1 },
  },
  '2020-03-24T12_29_54+00_00': {
    node: 'root', config: '20200324-102421-f6947255', reports: 107,
    counts: { log_info: 58, result_success: 37, result_na: 9, control: 2, result_repaired: 1 },
  },
  '2020-04-07T11_20_58+00_00': { node: E745, config: '20200407-053748-e976e8d5', reports: 9, counts: { control: 2, result_success: 7 } },
};

/** Signed once, so both stores receive the very same bytes. */
const root = createNodeIdentity('root');
const bodies = new Map<string, Buffer>();
async function body(stamp: string, node: string): Promise<Buffer> {
  if (!bodies.has(stamp)) {
    const base = join(RUNLOGS, `${stamp}@${node}`);
    const e745 = { certPem: await readFile(join(KEYS, `${E745}.cert`), 'utf8'), keyPem: await readFile(join(KEYS, `${E745}.nopass.priv`), 'utf8') };
    bodies.set(stamp, existsSync(`${base}.signed`) ? await readFile(`${base}.signed`) : signSmime(await readFile(`${base}.log`), node === 'root' ? root : e745));
  }
  return bodies.get(stamp)!;
}

async function ingestAll(t: Test, database: string | undefined) {
  const dir = programDir(t, { 'server.toml': '[lifecycle]\nsweep_interval = "1h"\n' });
  const server = await startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', '127.0.0.1:0',
    '--data-dir', join(dir, 'server'), '--log-level', 'warn', ...(database ? ['--database', database] : [])]);
  t.teardown(() => server.stop());
  const api = adminClient(server.url, (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim());
  const e745Cert = await readFile(join(KEYS, `${E745}.cert`), 'utf8');
  t.equal((await api('POST', '/api/1/nodes', { id: E745, hostname: 'node1.rudder.local', certificate: e745Cert })).status, 201);
  t.equal((await api('POST', '/api/1/nodes', { id: 'root', hostname: 'server.rudder.local', certificate: root.certPem })).status, 201);
  for (const [stamp, want] of Object.entries(EXPECTED)) {
    const res = await fetch(`${server.url}/reports/${encodeURIComponent(`${stamp}@${want.node}.log`)}`, { method: 'PUT', body: await body(stamp, want.node) });
    t.equal(res.status, 201, stamp);
  }
  await waitFor(async () => {
    const p = (await api('GET', '/api/1/system/status')).json.data.processed;
    return (p.reports_done ?? 0) + (p.reports_failed ?? 0) >= 5 ? true : undefined;
  }, 'the five run logs to be processed');
  const runs: Record<string, unknown> = {};
  for (const node of [E745, 'root']) {
    const r = await api('GET', `/api/1/nodes/${node}/runs?per_page=10`);
    for (const run of r.json.data) {
      const { id: _id, received_at: _r, ...rest } = run;
      runs[run.file_name.slice(0, 25)] = rest;
    }
  }
  const compliance = (await api('GET', '/api/1/compliance')).json.data;
  const nodeCompliance = (await api('GET', `/api/1/nodes/root/compliance`)).json.data;
  // When the run arrived differs between the two ingests; the rest must not.
  return { runs, compliance, nodeCompliance: { ...nodeCompliance, run: { ...nodeCompliance.run, id: 0 }, last_answer_at: typeof nodeCompliance.last_answer_at } };
}

const absent = fixturesAbsent();
if (absent) {
  t.comment(`skipping: ${absent}`);
  t.pass('skipped: fixtures absent', { skip: absent });
} else {
  let sqlite: Awaited<ReturnType<typeof ingestAll>> | undefined;
  t.test('the reference run logs are stored with MANIFEST.md\'s counts (SQLite)', async (t) => {
    sqlite = await ingestAll(t, undefined);
    t.equal(Object.keys(sqlite.runs).length, 5, 'five runs stored');
    for (const [stamp, want] of Object.entries(EXPECTED)) {
      const run = sqlite.runs[stamp] as { report_count: number; counts: Record<string, number>; config_id: string; node_id: string; complete: boolean };
      t.ok(run, `${stamp} stored`);
      t.equal(run.node_id, want.node);
      t.equal(run.report_count, want.reports, `${stamp}: ${want.reports} reports`);
      t.equal(run.config_id, want.config);
      t.equal(run.complete, true);
      if (Object.keys(want.counts).length) t.same(run.counts, want.counts, `${stamp}: reports by type`);
    }
    // The root's last complete run (2020-03-24): 37 success, 1 repaired, 9 n/a components at most.
    t.match(sqlite.nodeCompliance, { node_id: 'root', expected: false, run: { config_id: '20200324-102421-f6947255' } });
    t.equal(sqlite.nodeCompliance.summary.counts.error, 0);
    t.equal(sqlite.compliance.nodes, 2);
  });

  t.test('PostgreSQL stores exactly the same', async (t) => {
    const why = await pgUnavailable();
    if (why) {
      t.comment(`skipping: ${why}`);
      return;
    }
    const pg = await ingestAll(t, await freshSchemaUrl(t));
    t.ok(sqlite, 'the SQLite run went first');
    t.same(pg, sqlite, 'runs, node compliance and global compliance are identical');
  });
}
