/**
 * The server with damaged values in its registry (docs/faults.md, "A damaged value in the
 * registry"): a node whose stored outcomes are damaged answers its compliance (200, as a run that
 * reported nothing), and a page of its runs with their reports lists a run whose stored log is
 * damaged without its reports, beside the others; the server's log says which node (and run) and
 * why, as warnings without a stack trace. The console's node page says why that run's messages
 * are not shown (in a real browser).
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { formatReport, runLogFileName } from '@capstan/shared';
import { openRegistry } from '@capstan/server/registry/open';
import { inventory, run } from '../server/store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { programDir, startServer, waitFor } from '../helpers/programs.js';
import { chromiumAbsent, openBrowser } from '../helpers/browser.js';

const ITEMS = [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' }, { rule_id: 'r1', directive_id: 'd1', component: 'Service sshd' }];

/** A run log's text as the ingest stores it: its reports, each component a success. */
function logText(nodeId: string, stamp: string): Buffer {
  const line = (type: string, component: string, key: string) => formatReport({
    policy: 'p', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: key, msg: 'm',
    node_id: nodeId, start_datetime: stamp, execution_datetime: stamp,
  });
  return Buffer.from([line('control', 'start', 'cfg-a'), ...ITEMS.map((i) => line('result_success', i.component, 'k')), line('control', 'end', 'cfg-a')].join('\n') + '\n');
}

t.test('damaged values: the node still answers, and the server says what it could not read', async (t) => {
  const dir = programDir(t);
  const now = Math.floor(Date.now() / 1000) * 1000;
  const times = [now - 120_000, now - 60_000].map((ms) => new Date(ms));
  const stamps = times.map((d) => `${d.toISOString().slice(0, 19)}+00:00`);
  // The registry made as the server would have it: two runs of n1, the last its compliance run.
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  await store.upsertFromInventory(inventory('n1', { received_at: stamps[0] }));
  await setAcceptance(store, 'n1', 'accepted', stamps[0]!);
  await store.setExpectations('n1', 'cfg-a', ITEMS, stamps[0]!);
  const ids: number[] = [];
  for (const [i, at] of stamps.entries()) {
    const r = await store.insertRun(run('n1', at, {
      config_id: 'cfg-a', received_at: at, outcomes: ITEMS.map((c) => ({ ...c, outcome: 'result_success', count: 1 })),
      log_compressed: undefined, log_text: logText('n1', at), file_name: runLogFileName('n1', times[i]!, 'zstd'),
    }));
    ids.push(r.id);
  }
  await store.close();
  // Then damaged: the node's packed outcomes, and its last run's stored log (both cut short).
  const [older, last] = ids as [number, number];
  const db = new Database(join(dir, 'capstan.db'));
  const cut = (sql: string) => {
    const bytes = db.prepare(sql).pluck().get() as Buffer;
    t.ok(bytes?.length > 8, 'the value to damage is there');
    return bytes.subarray(0, bytes.length - 8);
  };
  db.prepare("UPDATE node_compliance SET outcomes_packed = ? WHERE node_id = 'n1'").run(cut("SELECT outcomes_packed FROM node_compliance WHERE node_id = 'n1'"));
  db.prepare('UPDATE runs SET log_compressed = ? WHERE id = ?').run(cut(`SELECT log_compressed FROM runs WHERE id = ${last}`), last);
  db.close();

  const { server, api, token } = await startServer(t, dir, { logLevel: 'info' });
  const c = await api('GET', '/api/1/nodes/n1/compliance');
  t.equal(c.status, 200, 'the node page answers');
  const states = (c.json.data.components as Array<{ component: string; state: string }>).map((i) => [i.component, i.state]);
  t.same(states, ITEMS.map((i) => [i.component, 'missing']), 'every component missing, as a run that reported nothing', { data: c.json.data });
  const line = await waitFor(async () => server.output.find((l) => l.includes('stored run outcomes cannot be read')), 'the warning', 10_000);
  t.match(JSON.parse(line) as Record<string, unknown>, { level: 'warn', node: 'n1', reason: /zstd/ }, 'a warning naming the node and the reason');

  const r = await api('GET', '/api/1/nodes/n1/runs?reports=true');
  t.equal(r.status, 200, 'a page of runs with their reports answers');
  const listed = r.json.data as Array<{ id: number; reports: Array<{ component: string }>; reports_unreadable?: string }>;
  t.same(listed.map((x) => x.id), [last, older], 'both runs listed, newest first');
  t.same(listed[1]!.reports.map((x) => x.component), ['start', ...ITEMS.map((i) => i.component), 'end'], 'the whole run with its reports');
  t.notOk('reports_unreadable' in listed[1]!, 'and nothing said unreadable of it');
  t.same(listed[0]!.reports, [], 'the damaged run without reports');
  t.match(listed[0]!.reports_unreadable, new RegExp(`run ${last}'s stored log cannot be read: .*zstd`), 'and why');
  const warned = await waitFor(async () => server.output.find((l) => l.includes("a run's stored log cannot be read")), 'the run warning', 10_000);
  t.match(JSON.parse(warned) as Record<string, unknown>, { level: 'warn', node: 'n1', run: last }, 'a warning naming the node and the run');
  t.notMatch(server.output.join('\n'), /"stack"/, 'no stack trace for either');

  // The console's node page: the components, and why the run's messages are not there.
  const skip = chromiumAbsent();
  if (skip) return void t.comment(`browser part skipped: ${skip}`);
  const { page, problems } = await openBrowser(t, 'registry-unreadable');
  await page.goto(`${server.url}/`);
  await page.getByLabel('Admin token').fill(token);
  await page.getByRole('button', { name: 'Sign in' }).click();
  await page.getByRole('heading', { name: 'Dashboard' }).waitFor();
  await page.goto(`${server.url}/#/nodes/n1`);
  const compliance = page.locator('#compliance');
  await compliance.getByRole('note').filter({ hasText: "This run's messages cannot be shown: its stored log cannot be read" }).waitFor();
  t.match(await compliance.getByRole('note').textContent(), new RegExp(`run ${last}'s stored log cannot be read: .*zstd`), 'the console says why');
  t.same(problems, [], 'no page error');
});
