/**
 * POST /api/1/policy/plan holds at most [policy] plan_memory_limit bytes (policy/plan-memory.ts):
 * counted in bytes, not nodes (two plans reaching the same nodes, one under the limit and one
 * over it); the results it keeps and what it renders are both counted; past it 413
 * ERR_PLAN_TOO_LARGE while other requests are answered, and the caller's next plan runs.
 */
import t, { type Test } from 'tap';
import { adminApp, type Answer } from '../helpers/admin-app.js';
import { inventory } from './store-suite.js';

const LIMIT = 64 * 1024;
const NODES = 200;

async function setup(t: Test, limit?: string) {
  const app = await adminApp(t, { overrides: limit ? { 'policy.plan_memory_limit': limit } : {} });
  for (let i = 0; i < NODES; i++) {
    const id = `node-${String(i).padStart(3, '0')}`;
    const r = await app.api('POST', '/api/1/nodes', { host: `10.0.${i >> 8}.${i & 255}`, id, hostname: `${id}.test` });
    if (r.status !== 201) throw new Error(JSON.stringify(r.json));
  }
  return app;
}

/** `n` directives with ids of `len` characters in one rule on every node. */
function planOf(n: number, len: number) {
  const ids = Array.from({ length: n }, (_, i) => `${String(i)}-${'d'.repeat(len)}`.slice(0, len));
  return {
    directives: ids.map((id, i) => ({ id, method: 'file_content', params: { path: `/etc/capstan-${i}`, content: 'x\n' } })),
    rules: [{ id: 'r'.repeat(len), directives: ids, groups: ['all-nodes'] }],
  };
}

const code = (r: Answer) => `${r.status} ${r.code ?? ''}`.trim();

t.test('a plan is bounded by the bytes it holds, not by how many nodes it reaches', async (t) => {
  const bounded = await setup(t, `${LIMIT}`);
  const small = planOf(1, 1);
  const big = planOf(4, 60);
  const a = await bounded.api('POST', '/api/1/policy/plan', small);
  t.equal(code(a), '200', `a plan reaching ${NODES} nodes under the limit is answered`);
  t.equal(a.json.data.nodes.length, NODES);
  const keptSmall = Buffer.byteLength(JSON.stringify(a.json.data.nodes));
  t.ok(keptSmall < LIMIT, `its listed nodes are ${keptSmall} bytes as JSON`);

  // The same nodes, longer ids: the results it would keep pass the limit.
  let stop = false;
  let slowest = 0;
  let answered = 0;
  const other = (async () => {
    while (!stop) {
      const s = performance.now();
      if ((await bounded.api('GET', '/api/1/system/status')).status === 200) answered++;
      slowest = Math.max(slowest, performance.now() - s);
      await new Promise((r) => setTimeout(r, 10));
    }
  })();
  const b = await bounded.api('POST', '/api/1/policy/plan', big);
  stop = true;
  await other;
  t.equal(code(b), '413 ERR_PLAN_TOO_LARGE', 'the same nodes with more bytes to keep are refused');
  t.match(b.json.error.message, /plan_memory_limit \(65536 bytes\).*the impact on node node-\d+/, 'the message names the limit and where it was reached');
  t.ok(answered > 0 && slowest < 2000, `other requests were answered meanwhile (${answered}, the slowest in ${Math.round(slowest)} ms)`);
  // The results kept are what passed the limit: fewer listed nodes fit.
  const few = await bounded.api('POST', '/api/1/policy/plan?max_nodes=20', big);
  t.equal(code(few), '200', 'the same plan listing 20 nodes is answered');
  t.match(few.json.data, { nodes_total: NODES, nodes_truncated: true });
  t.equal(few.json.data.nodes.length, 20);

  // Under the default limit, the refused plan is answered, and the small one as before.
  const open = await setup(t);
  const full = await open.api('POST', '/api/1/policy/plan', big);
  t.equal(code(full), '200', 'the refused plan is answered under the default limit');
  const keptBig = Buffer.byteLength(JSON.stringify(full.json.data.nodes));
  t.ok(keptBig > LIMIT, `its listed nodes are ${keptBig} bytes as JSON, over ${LIMIT}`);
  const same = await open.api('POST', '/api/1/policy/plan', small);
  t.same(same.json.data, a.json.data, 'the plan under the limit gives the same answer with either limit');
});

t.test('what a plan renders for a node counts: a template that grows past the limit is refused', async (t) => {
  const bounded = await setup(t, `${LIMIT}`);
  // A small input (a list of 40 numbers) rendered into ~80 kB for every node.
  t.equal((await bounded.api('PUT', '/api/1/properties/items', { value: Array.from({ length: 40 }, (_, i) => i) })).status, 201);
  const directive = (size: number) => ({
    directives: [{ id: 'motd', method: 'file_content', params: { path: '/etc/motd', content: `{{#node.properties.items}}${'y'.repeat(size)}{{/node.properties.items}}\n` } }],
    rules: [{ id: 'base', directives: ['motd'], groups: ['all-nodes'] }],
  });
  const a = await bounded.api('POST', '/api/1/policy/plan?max_nodes=1', directive(10));
  t.equal(code(a), '200', `a rendering of ~400 bytes per node is answered: ${JSON.stringify(a.json.error ?? '')}`);
  t.equal(a.json.data.nodes_total, NODES);
  const b = await bounded.api('POST', '/api/1/policy/plan?max_nodes=1', directive(2000));
  t.equal(code(b), '413 ERR_PLAN_TOO_LARGE', 'a rendering of ~80 kB per node is refused, though one node is listed');
  t.match(b.json.error.message, /the rendered policy of node node-000/, 'at the first node rendered');
  const again = await bounded.api('POST', '/api/1/policy/plan?max_nodes=1', directive(10));
  t.equal(code(again), '200', 'the caller\'s next plan runs');
});

t.test('a change request\'s impact and its node diff are plans under the same bound', async (t) => {
  const bounded = await setup(t, `${LIMIT}`);
  const big = await bounded.api('POST', '/api/1/change-requests', { title: 'long ids', ...planOf(4, 60) });
  t.equal(code(big), '413 ERR_PLAN_TOO_LARGE', 'a proposal whose impact would not fit is refused');
  t.equal((await bounded.api('GET', '/api/1/change-requests')).json.total, 0, 'and not recorded');
  // A template over a list that is empty when proposed, long when a node's diff is asked for.
  t.equal((await bounded.api('PUT', '/api/1/properties/items', { value: [] })).status, 201);
  const cr = await bounded.api('POST', '/api/1/change-requests', {
    title: 'motd', directives: [{ id: 'motd', method: 'file_content', params: { path: '/etc/motd', content: `{{#node.properties.items}}${'y'.repeat(2000)}{{/node.properties.items}}\n` } }],
    rules: [{ id: 'base', directives: ['motd'], groups: ['all-nodes'] }],
  });
  t.equal(code(cr), '201', `proposed: ${JSON.stringify(cr.json?.error ?? '')}`);
  const url = `/api/1/change-requests/${cr.json.data.id}/nodes/node-007`;
  t.equal(code(await bounded.api('GET', url)), '200', 'its node diff is answered');
  t.equal((await bounded.api('PUT', '/api/1/properties/items', { value: Array.from({ length: 40 }, (_, i) => i) })).status, 200);
  const diff = await bounded.api('GET', url);
  t.equal(code(diff), '413 ERR_PLAN_TOO_LARGE', 'once every node renders ~80 kB, the node diff is refused');
});

t.test('the inventories a template reads are counted while their nodes are rendered', async (t) => {
  const { api, store } = await adminApp(t, { overrides: { 'policy.plan_memory_limit': '64KiB' } });
  // Three nodes, one with 100 kB of custom facts: its inventory alone is over the limit.
  for (const [id, notes] of [['n1', 'a'], ['n2', 'b'], ['n3', 'x'.repeat(100_000)]] as const) {
    await store.upsertFromInventory(inventory(id, { inventory: { node_id: id, hostname: id, os: { name: 'debian' }, facts: { role: 'web', notes } } }));
    t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  }
  const plan = (nodes: string[]) => api('POST', '/api/1/policy/plan', {
    directives: [{ id: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'role {{facts.role}} on {{os.name}}\n' } }],
    groups: [{ id: 'g', nodes }], rules: [{ id: 'r', directives: ['motd'], groups: ['g'] }],
  });
  const small = await plan(['n1', 'n2']);
  t.equal(code(small), '200', 'nodes with small inventories are planned');
  t.same(small.json.data.nodes.map((n: { node_id: string }) => n.node_id), ['n1', 'n2']);
  const big = await plan(['n1', 'n2', 'n3']);
  t.equal(code(big), '413 ERR_PLAN_TOO_LARGE', 'a node whose inventory is over the limit stops the plan');
  t.match(big.json.error.message, /the inventory of node n3/);
});
