/**
 * The server with a node-day's run base damaged on disk (docs/faults.md, "A damaged value in the
 * registry"): that node's next runs of the day are still taken and stored, on their own, and read
 * back whole; the run stored against the damaged base is listed without its reports and says why;
 * the server's log says once which node, day and base it could not read, as a warning without a
 * stack trace.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { compressSync, createNodeIdentity, formatReport, runLogFileName, signSmime } from '@capstan/shared';
import { programDir, startServer, waitFor } from '../helpers/programs.js';

const NODE = 'base-node-1';
const node = createNodeIdentity(NODE, { bits: 1024 });
const COMPONENTS = ['File /etc/motd', 'Service sshd', 'Package openssh-server'];

/**
 * The runs' day: two minutes ago, moved back a little when the three runs would not fall on one
 * UTC day. Recent, so that no retention sweep of a server running longer than its first minute
 * deletes them.
 */
const BASE_MS = (() => {
  const t = Math.floor(Date.now() / 1000) * 1000 - 120_000;
  return new Date(t).getUTCDate() === new Date(t + 3000).getUTCDate() ? t : t - 10_000;
})();

/** A signed, compressed run log of NODE started <second> seconds after BASE_MS. */
function runLog(second: number): { name: string; body: Buffer } {
  const start = new Date(BASE_MS + second * 1000);
  const stamp = `${start.toISOString().slice(0, 19)}+00:00`;
  const line = (type: string, component: string, key: string) => formatReport({
    policy: 'Common', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: key, msg: `run ${second}`,
    node_id: NODE, start_datetime: stamp, execution_datetime: stamp,
  });
  const text = [line('control', 'start', 'cfg1'), ...COMPONENTS.map((c) => line('result_success', c, 'k')), line('control', 'end', 'cfg1')].join('\n') + '\n';
  return { name: runLogFileName(NODE, start, 'zstd'), body: compressSync(signSmime(Buffer.from(text), node), 'zstd') };
}

t.test("a damaged run base: the node's next runs are stored on their own, and the server says so once", async (t) => {
  const dir = programDir(t);
  const data = join(dir, 'data');
  type Listed = { id: number; reports: Array<{ component: string; msg: string }>; reports_unreadable?: string };
  const put = async (url: string, second: number) => {
    const f = runLog(second);
    const res = await fetch(`${url}/reports/${encodeURIComponent(f.name)}`, { method: 'PUT', body: f.body });
    await res.arrayBuffer();
    return res.status;
  };

  // The node's first run of the day: stored as the day's base.
  const first = await startServer(t, data, { logLevel: 'info' });
  t.equal((await first.api('POST', '/api/1/nodes', { id: NODE, hostname: 'base1', certificate: node.certPem })).status, 201, 'the node registered with its certificate');
  t.equal(await put(first.server.url, 1), 201, 'the first run taken');
  const runsOf = async (api: typeof first.api, n: number) => waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${NODE}/runs?reports=true`);
    return r.status === 200 && (r.json.data as Listed[]).length === n ? r.json.data as Listed[] : undefined;
  }, `${n} runs stored`, 20_000);
  const [stored] = await runsOf(first.api, 1);
  t.equal(stored!.reports.length, COMPONENTS.length + 2, 'and read back with its reports');
  t.equal(await first.server.stop(), 0, 'the server stopped');

  // Damaged while the server was down (no copy of it in any process's memory): cut short.
  const db = new Database(join(data, 'capstan.db'));
  const base = db.prepare('SELECT id, day, log_compressed FROM run_bases WHERE node_id = ?').get(NODE) as { id: number; day: string; log_compressed: Buffer } | undefined;
  t.ok(base && base.log_compressed.length > 8, 'the node-day has a stored base');
  t.equal(db.prepare('SELECT base_id FROM runs WHERE id = ?').pluck().get(stored!.id), base!.id, 'the first run is stored against it');
  db.prepare('UPDATE run_bases SET log_compressed = ? WHERE id = ?').run(base!.log_compressed.subarray(0, base!.log_compressed.length - 8), base!.id);
  db.close();

  // The same node-day's next runs, to a server started again on the same data.
  const again = await startServer(t, data, { logLevel: 'info' });
  t.same([await put(again.server.url, 2), await put(again.server.url, 3)], [201, 201], "the day's next runs taken");
  const listed = await runsOf(again.api, 3);
  const [third, second, firstRun] = listed as [Listed, Listed, Listed];
  for (const [r, n] of [[third, 3], [second, 2]] as const) {
    t.same(r.reports.map((x) => x.component), ['start', ...COMPONENTS, 'end'], `run ${n} read back with its reports`);
    t.ok(r.reports.every((x) => x.msg === `run ${n}`), `run ${n}'s own messages`);
    t.notOk('reports_unreadable' in r, `nothing said unreadable of run ${n}`);
  }
  t.same(firstRun.reports, [], 'the run stored against the damaged base listed without its reports');
  t.match(firstRun.reports_unreadable, new RegExp(`run ${stored!.id}'s stored log cannot be read`), 'and why');
  const check = new Database(join(data, 'capstan.db'), { readonly: true });
  t.same(check.prepare('SELECT base_id FROM runs WHERE node_id = ? ORDER BY id').pluck().all(NODE), [base!.id, null, null], 'the next runs stored on their own');
  check.close();

  const said = (text: string) => again.server.output.filter((l) => l.includes(text));
  const warned = await waitFor(async () => said("stored run base cannot be read")[0], 'the base warning', 10_000);
  t.match(JSON.parse(warned) as Record<string, unknown>, { level: 'warn', node: NODE, day: base!.day, base: base!.id, reason: /\w/ }, 'a warning naming the node, the day and the base');
  t.equal(said('stored run base cannot be read').length, 1, 'said once for both runs');
  t.notMatch(again.server.output.join('\n'), /"stack"/, 'no stack trace');
});
