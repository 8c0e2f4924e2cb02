/**
 * Keeps the benchmarks and the fleet simulator from rotting: each runs end to end with tiny
 * numbers against the real programs. Figures are not judged here (speed is measured by
 * `npm run bench`, never by a timed test); what must hold is that every step really happened:
 * run logs stored, counted, visible through the admin API, and the reports well formed.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import t from 'tap';
import { certificateNodeId, createNodeIdentity, decompress, parseRunInfo, parseRunLog, verifySmime } from '@capstan/shared';
import { loadIdentities, simNodeId } from '@capstan/bench/sim/identities';
import { nodeProfile, signedRunLog } from '@capstan/bench/sim/runlog';
import { percentiles } from '@capstan/bench/sim/stats';
import { BIN, ROOT, startProgram, runProgram, programDir, serverAndRelay } from '../helpers/programs.js';

const SIM = resolve(ROOT, 'bench/dist/sim/cli.js');

// `npm run bench --quick` is a chain of program starts and waits that keeps about half a core
// busy for a minute or more; the other tests, each on directories and databases of their own,
// run beside it.
t.jobs = 2;

/** A bench script run to its end; `env` is added to this process's environment. */
function run(args: string[], env: NodeJS.ProcessEnv = {}, timeoutMs = 200_000) {
  return runProgram(args[0]!, args.slice(1), timeoutMs, { ...process.env, ...env });
}

t.test('simulated identities share keys but each certificate names its own node', async (t) => {
  const ids = await loadIdentities({ count: 5, keys: 2, bits: 1024, seed: 'smoke', cacheDir: programDir(t) });
  t.equal(new Set(ids.map((i) => i.nodeId)).size, 5);
  t.equal(new Set(ids.map((i) => i.keyPem)).size, 2, 'two keys for five nodes');
  for (const id of ids) {
    t.equal(certificateNodeId(id.certPem), id.nodeId);
    t.equal(id.nodeId, simNodeId('smoke', id.index), 'node ids come from the seed');
  }
  // A run log signed with a shared key verifies against its own node's certificate only.
  const profile = nodeProfile(ids[2]!.nodeId, 100);
  const file = signedRunLog(ids[2]!, profile, new Date(Date.UTC(2025, 0, 1, 12, 0, 0)), 0);
  const signed = await decompress(file.body, parseRunInfo(file.name).compression, { maxBytes: 1 << 24 });
  const text = verifySmime(signed, [ids[2]!.certPem]).content;
  t.throws(() => verifySmime(signed, [ids[3]!.certPem]), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' }, 'another node of the same key cannot claim it');
  const log = parseRunLog(text, { node_id: ids[2]!.nodeId, timestamp: parseRunInfo(file.name).timestamp });
  t.equal(log.reports.length, 100, 'the asked number of reports');
  const types = new Set(log.reports.map((r) => r.event_type));
  for (const ty of ['control', 'result_success', 'log_info']) t.ok(types.has(ty), `has ${ty}`);
  t.equal(log.config_id, profile.configId);
  // The shared key option refuses what is not a readable RSA key, with a code.
  t.throws(() => createNodeIdentity('n', { keyPem: 'not a key' }), { code: 'ERR_KEY' });
  // The cache hands back the same fleet.
  const again = await loadIdentities({ count: 5, keys: 2, bits: 1024, seed: 'smoke', cacheDir: t.testdirName });
  t.same(again.map((i) => i.certPem), ids.map((i) => i.certPem));
  // The certificates are cached a node per line; a damaged line and those after it are made again.
  const name = (await readdir(t.testdirName)).find((f) => f.startsWith('certs-') && f.endsWith('.jsonl'));
  t.ok(name, 'a JSON Lines certificate cache');
  const path = join(t.testdirName, name!);
  const lines = (await readFile(path, 'utf8')).trimEnd().split('\n');
  t.equal(lines.length, 5, 'one line per node');
  t.same(lines.map((l) => (JSON.parse(l) as { i: number }).i), [0, 1, 2, 3, 4]);
  await writeFile(path, `${lines.slice(0, 3).join('\n')}\n{"i": 3, "nodeId"\n`);
  const grown = await loadIdentities({ count: 7, keys: 2, bits: 1024, seed: 'smoke', cacheDir: t.testdirName });
  t.same(grown.slice(0, 3).map((i) => i.certPem), ids.slice(0, 3).map((i) => i.certPem), 'the lines before the damage are kept');
  t.equal(grown.length, 7);
  for (const id of grown) t.equal(certificateNodeId(id.certPem), id.nodeId);
  t.equal((await readFile(path, 'utf8')).trimEnd().split('\n').length, 7, 'the cache holds the grown fleet');
});

t.test('percentiles are nearest-rank', async (t) => {
  t.same(percentiles([]), { count: 0, p50: 0, p90: 0, p99: 0, max: 0 });
  const p = percentiles(Array.from({ length: 100 }, (_, i) => i + 1));
  t.same(p, { count: 100, p50: 50, p90: 90, p99: 99, max: 100 });
});

t.test('package benchmark results become figures with their targets', async (t) => {
  const { figuresFrom } = (await import(pathToFileURL(resolve(ROOT, 'bench/lib/external.mjs')).href)) as {
    figuresFrom: (bench: string, r: unknown) => Array<{ id: string; value: number; unit: string; target: { op: string; value: number } | null }>;
  };
  const reg = figuresFrom('registry', [
    { store: 'sqlite', nodes: 100000, list: { 'name=web*': { median_ms: 12, max_ms: 20, total: 9 } }, compliance: { global: { median_ms: 300, max_ms: 310 } }, targets: { list_ms: 12, list_ok: true } },
    { store: 'postgres', nodes: 100000, compliance: { global: { median_ms: 900, max_ms: 950 } } },
  ]);
  const by = new Map(reg.map((f) => [f.id, f]));
  t.same(by.get('registry.sqlite.list.name=web*.median_ms')?.target, { op: '<=', value: 100 });
  // Fleet compliance read from the kept counters: 300 ms on both stores.
  t.same(by.get('registry.sqlite.compliance.global.median_ms')?.target, { op: '<=', value: 300 });
  t.same(by.get('registry.postgres.compliance.global.median_ms')?.target, { op: '<=', value: 300 }, 'the same target for PostgreSQL');
  t.equal(by.get('registry.sqlite.list.name=web*.median_ms')?.unit, 'ms');
  t.notOk(reg.some((f) => f.id.endsWith('list_ok')), 'booleans are not figures');
  const relay = figuresFrom('relay', { putPerSec: 1200, peakRssMb: 140 });
  t.same(relay.map((f) => [f.id, f.unit, f.target]), [
    ['relay.putPerSec', '/s', { op: '>=', value: 3000 }],
    ['relay.peakRssMb', 'MB', { op: '<=', value: 150 }],
  ]);
  const explicit = figuresFrom('agent', { figures: [{ name: 'wall', value: 500, unit: 'ms', target: { op: '<=', value: 1000 } }, { name: 'bad' }] });
  t.same(explicit.map((f) => f.id), ['agent.wall'], 'explicit figures are taken as given; malformed ones dropped');
});

t.test('npm run bench --quick measures floor, ingest and a profile with the real programs', async (t) => {
  const out = programDir(t);
  // Three nodes: every run log still goes through one batch of the relay and the server, and
  // each node is a key pair generated afresh (the cache is the test's own).
  const r = await run(['scripts/bench.mjs', '--quick', '--nodes', '3', '--out', out], { CAPSTAN_BENCH_CACHE: join(out, 'cache') });
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr.slice(-3000) });
  const names = await readdir(out);
  const json = names.find((n) => /^\d{4}-\d\d-\d\d\.json$/.test(n));
  t.ok(json, 'results JSON written');
  t.ok(names.some((n) => /^\d{4}-\d\d-\d\d\.md$/.test(n)), 'Markdown written');
  const res = JSON.parse(await readFile(join(out, json!), 'utf8')) as {
    figures: Array<{ id: string; value: number | null; ratio: number | null }>;
    sections: { ingest: Record<string, { count?: number; skipped?: string }>; profile: { sqlite: { server: { areas: Array<{ area: string }> } } } };
  };
  const fig = (id: string) => res.figures.find((f) => f.id === id);
  t.ok((fig('floor.sqlite')?.value ?? 0) > 0, 'SQLite floor measured');
  t.ok((fig('ingest.sqlite')?.value ?? 0) > 0, 'SQLite ingest measured');
  t.ok((fig('ingest.sqlite')?.ratio ?? 0) > 0, 'ingest is compared with the floor');
  t.equal(res.sections.ingest.sqlite?.count, 3, 'every run log reached the registry');
  if (res.sections.ingest.postgres?.skipped) t.comment(`PostgreSQL part skipped: ${res.sections.ingest.postgres.skipped}`);
  else t.equal(res.sections.ingest.postgres?.count, 3);
  t.ok(res.sections.profile.sqlite.server.areas.length > 0, 'the server profile is summarized', { profile: res.sections.profile });
  const md = await readFile(join(out, json!.replace('.json', '.md')), 'utf8');
  t.match(md, /\| figure \| value \| unit \| floor \/ target \| ratio \|/);
  t.match(md, /Where the time goes/);
});

t.test('capstan-sim enrolls its nodes and every run log it sends reaches the registry', async (t) => {
  const dir = programDir(t);
  const { server, relay } = await serverAndRelay(t, dir);
  const r = await run([
    SIM, '--relay', relay.url, '--watch-relay', relay.url, '--server', server.url, '--token-file', join(dir, 'server', 'admin.token'),
    '--nodes', '8', '--keys', '2', '--time-scale', '300', '--duration', '2s', '--reports', '30', '--sample', '500ms',
    '--visibility-poll', '200ms', '--drain-timeout', '60s', '--cache-dir', join(dir, 'cache'),
    '--pid', `relay=${relay.proc.pid}`, '--pid', `server=${server.proc.pid}`, '--json', '--out', join(dir, 'sim.json'),
  ]);
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr.slice(-3000) });
  const rep = JSON.parse(r.stdout) as {
    enrollment: { inventories: number; accepted: number; errors: Record<string, number> };
    runs: { scheduled: number; acked: number; failed: number; skipped: number };
    visibility: { visible: number; of: number; probeLatencyMs: { count: number; p50: number; max: number }; slowestProbes: Array<{ sentMs: number; ms: number }> };
    processes: Record<string, { peakRssMb: number }>;
    deepestSpools: { relays: Array<number | null>; watched: Array<number | null>; server: number | null };
    notes: string[];
  };
  t.same(rep.enrollment.errors, {});
  t.equal(rep.enrollment.inventories, 8);
  t.equal(rep.enrollment.accepted, 8);
  t.ok(rep.runs.scheduled >= 8, 'every node runs at least once');
  t.equal(rep.runs.acked, rep.runs.scheduled, 'every run log acknowledged by the relay');
  t.equal(rep.runs.failed, 0);
  t.equal(rep.runs.skipped, 0, 'none left unsent: the simulator kept up');
  t.equal(rep.visibility.visible, rep.runs.acked, 'and visible in the registry');
  t.equal(rep.visibility.probeLatencyMs.count, rep.runs.acked, 'with 8 nodes every node is a probe: each run timed to visible');
  const slowest = rep.visibility.slowestProbes;
  t.equal(slowest.length, Math.min(10, rep.runs.acked), 'the ten slowest probe runs listed');
  t.ok(slowest.every((p, i) => i === 0 || slowest[i - 1]!.ms >= p.ms), 'slowest first');
  t.ok(Math.abs(slowest[0]!.ms - rep.visibility.probeLatencyMs.max) <= 1, 'the first is the slowest run timed');
  t.ok(slowest.every((p) => p.sentMs >= 0), 'each placed in time from the first run sent');
  // The relay sent to, watched as well: both read its spool at every sample.
  const spools = rep.deepestSpools;
  t.ok(spools.relays.length === 1 && typeof spools.relays[0] === 'number' && spools.relays[0] >= 0, `the relay's spool read (deepest ${spools.relays[0]})`);
  t.ok(spools.watched.length === 1 && typeof spools.watched[0] === 'number', 'the watched relay\'s too');
  t.ok(typeof spools.server === 'number', "and the server's");
  t.ok(rep.processes.relay!.peakRssMb > 0 && rep.processes.server!.peakRssMb > 0, 'relay and server memory sampled');
  t.match(rep.notes.join('\n'), /policy fetching is not simulated/);
  const full = JSON.parse(await readFile(join(dir, 'sim.json'), 'utf8')) as { samples: unknown[] };
  t.ok(full.samples.length > 0, 'samples over time in the --out file');

  // Bad arguments are a configuration error, with a message.
  const bad = await run([SIM, '--nodes', '0']);
  t.equal(bad.code, 2);
  t.match(bad.stderr, /--nodes/);
});

t.test('the registry benchmark loads a fleet with the current schema and queries it, on SQLite and PostgreSQL', async (t) => {
  const { benchRegistry } = await import('@capstan/bench/registry');
  const { PG_URL, pgUnavailable } = await import('../server/pg.js');
  const noPg = await pgUnavailable();
  if (noPg) t.comment(`PostgreSQL part skipped: ${noPg}`);
  // Its bulk loaders write every node column directly: a migration that adds one must update them
  // (a smallint column once broke the PostgreSQL load, and only `npm run bench` showed it).
  const results = await benchRegistry({ nodes: 400, rounds: 1, ...(noPg ? {} : { databaseUrl: PG_URL }) });
  t.same(results.map((r) => r.store), noPg ? ['sqlite'] : ['sqlite', 'postgres']);
  for (const r of results) {
    t.equal(r.nodes, 400, `${r.store}: loaded`);
    const totals = Object.values(r.list).map((l) => l.total);
    t.ok(totals.length > 0 && totals.every((n) => Number.isInteger(n) && n >= 0 && n <= 400), `${r.store}: every list case answered`);
    t.ok(totals.some((n) => n > 0), `${r.store}: some list case found nodes`);
    // Kept counters, the same summed afresh, a read between sweeps, and the sweep itself.
    t.same(Object.keys(r.compliance).sort(), [
      'by directive', 'by directive, 10 min after the sweep', 'by directive, summed afresh', 'by rule', 'by rule, summed afresh',
      'global', 'global, summed afresh', 'global, tag:env=prod', 'sweep after the load',
    ], `${r.store}: compliance queries ran`);
  }
});

t.test('the changes benchmark generates a history, queries it and exports compliance, on SQLite and PostgreSQL', async (t) => {
  const { benchChanges } = await import('@capstan/bench/changes');
  const { PG_URL, pgUnavailable } = await import('../server/pg.js');
  const noPg = await pgUnavailable();
  if (noPg) t.comment(`PostgreSQL part skipped: ${noPg}`);
  const results = await benchChanges({ nodes: 300, days: 2, runsPerDay: 2, rounds: 1, ...(noPg ? {} : { databaseUrl: PG_URL }) });
  t.same(results.map((r) => r.store), noPg ? ['sqlite'] : ['sqlite', 'postgres']);
  for (const r of results) {
    t.equal(r.changes, 300 * 2 * 2, `${r.store}: one change per repairing run`);
    t.ok(r.queries['one node, 7 days']!.total > 0, `${r.store}: a node's changes are found`);
    t.ok(r.queries['histogram by hour, last 24 h']!.total > 0, `${r.store}: the histogram counts`);
    // Every accepted node of the registry fleet, plus the header line.
    t.ok(r.export_csv.lines > 250 && r.export_csv.lines <= 301, `${r.store}: the export lists the fleet (${r.export_csv.lines} lines)`);
  }
});
