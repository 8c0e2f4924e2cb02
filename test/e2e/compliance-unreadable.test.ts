/**
 * The server with a node whose stored outcomes are damaged (docs/faults.md, "A damaged value in
 * the registry"): the node's compliance answers 200, as a run that reported nothing, and the
 * server's log says which node and why, as a warning without a stack trace.
 */
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { openRegistry } from '@capstan/server/registry/open';
import { inventory, run } from '../server/store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { programDir, startServer, waitFor } from '../helpers/programs.js';

t.test("a node's damaged outcomes: its compliance still answers, and the server's log names it", async (t) => {
  const dir = programDir(t);
  const at = new Date(Date.now() - 60_000).toISOString();
  const items = [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' }, { rule_id: 'r1', directive_id: 'd1', component: 'Service sshd' }];
  // The registry made as the server would have it, then the node's packed outcomes damaged.
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  await store.upsertFromInventory(inventory('n1', { received_at: at }));
  await setAcceptance(store, 'n1', 'accepted', at);
  await store.setExpectations('n1', 'cfg-a', items, at);
  await store.insertRun(run('n1', at, { config_id: 'cfg-a', received_at: at, outcomes: items.map((c) => ({ ...c, outcome: 'result_success', count: 1 })) }));
  await store.close();
  const db = new Database(join(dir, 'capstan.db'));
  const packed = db.prepare("SELECT outcomes_packed FROM node_compliance WHERE node_id = 'n1'").pluck().get() as Buffer;
  t.ok(packed?.length > 8, 'the node holds its packed outcomes');
  db.prepare("UPDATE node_compliance SET outcomes_packed = ? WHERE node_id = 'n1'").run(packed.subarray(0, packed.length - 8));
  db.close();

  const { server, api } = await startServer(t, dir, { logLevel: 'info' });
  const r = await api('GET', '/api/1/nodes/n1/compliance');
  t.equal(r.status, 200, 'the node page answers');
  const states = (r.json.data.components as Array<{ component: string; state: string }>).map((i) => [i.component, i.state]);
  t.same(states, items.map((i) => [i.component, 'missing']), 'every component missing, as a run that reported nothing', { data: r.json.data });
  const line = await waitFor(async () => server.output.find((l) => l.includes('stored run outcomes cannot be read')), 'the warning', 10_000);
  const entry = JSON.parse(line) as Record<string, unknown>;
  t.match(entry, { level: 'warn', node: 'n1', reason: /zstd/ }, 'a warning naming the node and the reason');
  t.notMatch(server.output.join('\n'), /"stack"/, 'no stack trace for it');
});
