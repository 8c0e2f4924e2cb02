/**
 * Jobs at the server, in process (startServer on port 0, SQLite) with a scripted relay that
 * speaks the real link protocol over HTTP (`GET /remote-run/listen/<id>?relay=1`, then
 * `POST /remote-run/output/<channel>`): target resolution and its coded errors, dispatch to the
 * linked relay, events → task transitions, a task aborted at its job's timeout after its relay
 * vanished, cancel, jobs waiting for a relay, inventory jobs, and retention. The scripted relay
 * is registered as a relay node and shows its relay token, as the real one does.
 */
import http from 'node:http';
import t, { type Test } from 'tap';
import { createNodeIdentity } from '@capstan/shared';
import type { ServerHandle } from '@capstan/server/server';
import { waitFor } from '../helpers/programs.js';
import { collectEvents } from '../helpers/http.js';
import { serverWithApi } from '../helpers/admin-app.js';
import { inventory } from '../server/store-suite.js';
import { setAcceptance, setState, updateNode } from '../helpers/node-changes.js';

/** A node as an agent registers it, accepted (or not). */
async function node(server: ServerHandle, id: string, accept = true): Promise<void> {
  await server.store.upsertFromInventory(inventory(id));
  if (accept) await setAcceptance(server.store, id, 'accepted', new Date().toISOString());
}

interface RunEvent {
  type: string;
  id: string;
  nodes: string[];
  conditions: string[];
  keep_output: boolean;
}

/**
 * A relay linked to the server: registered as a relay node (the first time), holding a relay
 * token from the server's keyring, as the relay-only endpoints require; the events it got, and a
 * way to answer a run.
 */
async function linkRelay(t: Test, server: ServerHandle, id: string) {
  const base = server.url;
  const node = (await server.store.getNode(id)) ?? await server.store.createNode({ id, hostname: `${id}.example.com`, certificate: createNodeIdentity(id, { bits: 1024 }).certPem, relay: true });
  const auth = { authorization: `Bearer ${(await server.identity.issue(node)).token}` };
  const events: Array<Record<string, unknown>> = [];
  const req = http.get(`${base}/remote-run/listen/${id}?relay=1`, { headers: auth });
  const res = await new Promise<http.IncomingMessage>((resolve, reject) => {
    req.once('response', resolve);
    req.once('error', reject);
  });
  t.equal(res.statusCode, 200);
  collectEvents(res, events);
  req.on('error', () => {});
  t.teardown(() => req.destroy());
  await waitFor(async () => (events.some((e) => e.type === 'hello') ? true : undefined), 'the hello');
  return {
    events,
    auth,
    /** The n-th run event (0-based) once it arrived. */
    run: (n = 0) => waitFor(async () => events.filter((e) => e.type === 'run')[n] as unknown as RunEvent | undefined, `run event ${n}`),
    /** Open the output stream of a run; write event lines, then end it. */
    answer(channel: string) {
      const post = http.request(`${base}/remote-run/output/${channel}`, { method: 'POST', headers: { 'content-type': 'application/x-ndjson', ...auth } });
      const status = new Promise<number>((resolve, reject) => {
        post.once('response', (r) => {
          r.resume();
          resolve(r.statusCode ?? 0);
        });
        post.once('error', reject);
      }).catch(() => 0); // the server cut the stream (shutdown, relay gone)
      post.on('error', () => {});
      post.flushHeaders();
      return {
        send: (ev: object) => new Promise<void>((r) => post.write(`${JSON.stringify(ev)}\n`, () => r())),
        end: async () => {
          post.end();
          return status;
        },
      };
    },
    gone: () => req.destroy(),
  };
}

const task = async (api: Awaited<ReturnType<typeof serverWithApi>>['api'], job: string, nodeId: string) =>
  ((await api('GET', `/api/1/jobs/${job}`)).json.data.tasks as Array<Record<string, unknown>>).find((x) => x.node_id === nodeId);

const taskIs = (api: Awaited<ReturnType<typeof serverWithApi>>['api'], job: string, nodeId: string, state: string) =>
  waitFor(async () => {
    const x = await task(api, job, nodeId);
    return x?.state === state ? x : undefined;
  }, `task ${nodeId} ${state}`, 10_000);

t.test('targets: none is 400 ERR_JOB_NO_TARGETS, unknown static nodes 400, unrunnable nodes fail at once with their reason', async (t) => {
  const { server, api } = await serverWithApi(t);
  t.match(await api('POST', '/api/1/jobs', { name: 'empty', type: 'run' }), { status: 400, json: { error: { code: 'ERR_JOB_NO_TARGETS' } } });
  t.match(await api('POST', '/api/1/jobs', { name: 'typo', type: 'run', nodes: ['nope'] }), { status: 400, json: { error: { code: 'ERR_JOB_UNKNOWN_NODES' } } });
  t.match(await api('POST', '/api/1/jobs', { name: 'x', type: 'reboot', nodes: ['a'] }), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await api('POST', '/api/1/jobs', { name: 'x', type: 'run', nodes: ['a'], conditions: ['bad;rm'] }), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await api('POST', '/api/1/jobs', { name: 'x', type: 'run', nodes: ['a'], timeout: '0s' }), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await api('POST', '/api/1/jobs', { name: 'x', type: 'run', nodes: ['a'], extra: 1 }), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });

  await node(server, 'ok');
  await node(server, 'pend', false);
  await node(server, 'term');
  await setState(server.store, 'term', 'terminated', new Date().toISOString());
  await server.store.createNode({ id: 'manual', hostname: 'manual.example.com' });
  const created = await api('POST', '/api/1/jobs', { name: 'mixed', type: 'run', nodes: ['ok', 'pend', 'term', 'manual', 'ok'] });
  t.equal(created.status, 201);
  t.match(created.json.data, { name: 'mixed', state: 'running', progress: { total: 4, pending: 1, failed: 3 } });
  const tasks = Object.fromEntries(((await api('GET', `/api/1/jobs/${created.json.data.id}`)).json.data.tasks as Array<{ node_id: string; state: string; reason: string }>)
    .map((x) => [x.node_id, `${x.state}/${x.reason}`]));
  t.same(tasks, { ok: 'pending/created', pend: 'failed/not_accepted', term: 'failed/terminated', manual: 'failed/no_agent' });

  // A relay is a node with a certificate but no remote-run agent: named statically, the job is
  // refused as a whole (nothing recorded); an unknown id is still reported first.
  await server.store.createNode({ id: 'relay-9', hostname: 'relay-9.example.com', certificate: createNodeIdentity('relay-9', { bits: 1024 }).certPem, relay: true });
  const jobsBefore = (await api('GET', '/api/1/jobs')).json.data.length;
  const refused = await api('POST', '/api/1/jobs', { name: 'relay', type: 'run', nodes: ['ok', 'relay-9'] });
  t.match(refused, { status: 400, json: { error: { code: 'ERR_JOB_RELAY_NODES', message: /relay-9/ } } });
  t.notMatch(refused.json.error.message, /\bok\b/, 'only the relay is named');
  t.match(await api('POST', '/api/1/jobs', { name: 'relay', type: 'run', nodes: ['relay-9', 'nope'] }), { status: 400, json: { error: { code: 'ERR_JOB_UNKNOWN_NODES' } } });
  t.equal((await api('GET', '/api/1/jobs')).json.data.length, jobsBefore, 'no job recorded');
  t.match(await api('GET', '/api/1/jobs/none'), { status: 404, json: { error: { code: 'ERR_JOB_UNKNOWN' } } });
  t.match(await api('POST', '/api/1/jobs/none/cancel'), { status: 404, json: { error: { code: 'ERR_JOB_UNKNOWN' } } });
});

t.test('a selector targets the nodes its manager holds, narrowed by its filters; discovered nodes without agent fail no_agent', async (t) => {
  const { server, api } = await serverWithApi(t);
  const at = new Date().toISOString();
  await server.store.managers.createManager({ id: 'm1', name: 'fleet', type: 'static', provider: 'elsewhere', spec: {} }, at);
  await server.store.managers.createManager({ id: 'm2', name: 'other', type: 'static', provider: 'elsewhere', spec: {} }, at);
  for (const id of ['web1', 'web2', 'db1', 'other1']) await node(server, id);
  await updateNode(server.store, 'web1', { tags: { role: 'web' } }, at);
  await updateNode(server.store, 'web2', { tags: { role: 'web' } }, at);
  await server.store.createNode({ id: 'bare', hostname: 'bare.example.com', tags: { role: 'web' } });
  // A relay a selector matches fails no_agent like a bare instance (it has a certificate, no agent).
  await server.store.createNode({ id: 'relay-9', hostname: 'relay-9.example.com', certificate: createNodeIdentity('relay-9', { bits: 1024 }).certPem, relay: true, tags: { role: 'relay' } });
  for (const id of ['web1', 'web2', 'db1', 'bare', 'relay-9']) t.ok(await server.store.managers.linkNode(id, 'm1', at));
  t.ok(await server.store.managers.linkNode('other1', 'm2', at));

  const all = (await api('POST', '/api/1/jobs', { name: 'fleet', type: 'run', node_selectors: [{ manager_id: 'm1' }] })).json.data;
  const tasks = async (id: string) => Object.fromEntries(((await api('GET', `/api/1/jobs/${id}`)).json.data.tasks as Array<{ node_id: string; state: string; reason: string }>)
    .map((x) => [x.node_id, `${x.state}/${x.reason}`]));
  t.same(await tasks(all.id), { web1: 'pending/created', web2: 'pending/created', db1: 'pending/created', bare: 'failed/no_agent', 'relay-9': 'failed/no_agent' });
  const relayTask = ((await api('GET', `/api/1/jobs/${all.id}`)).json.data.tasks as Array<{ node_id: string; message: string }>).find((x) => x.node_id === 'relay-9');
  t.match(relayTask, { message: /relay/ }, 'the message says why');
  const web = (await api('POST', '/api/1/jobs', {
    name: 'web', type: 'run', nodes: ['other1', 'web1'],
    node_selectors: [{ manager_id: 'm1', filters: [{ key: 'tag:role', values: ['web'] }, { key: 'id', values: ['web2'], exclude: true }] }],
  })).json.data;
  t.same(await tasks(web.id), { other1: 'pending/created', web1: 'pending/created', bare: 'failed/no_agent' }, 'static nodes plus the selector, deduplicated');
  t.match(await api('POST', '/api/1/jobs', { name: 'x', type: 'run', node_selectors: [{ manager_id: 'm1', filters: [{ key: 'nope', values: ['1'] }] }] }),
    { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await api('POST', '/api/1/jobs', { name: 'x', type: 'run', node_selectors: [{ manager_id: 'm9' }] }), { status: 400, json: { error: { code: 'ERR_JOB_NO_TARGETS' } } });
});

t.test('a job waits pending until a relay links, then its run reaches the relay and the events become transitions', async (t) => {
  const { server, api } = await serverWithApi(t);
  for (const id of ['a', 'b', 'c', 'd', 'e']) await node(server, id);
  const job = (await api('POST', '/api/1/jobs', { name: 'run it', type: 'run', nodes: ['a', 'b', 'c', 'd', 'e'], conditions: ['from_job'], keep_output: true })).json.data;
  t.match((await api('GET', `/api/1/jobs/${job.id}`)).json.data.progress, { pending: 5 }, 'no relay linked: the tasks wait');

  const relay = await linkRelay(t, server, 'relay-1');
  const run = await relay.run();
  t.match(run, { type: 'run', conditions: ['from_job'], keep_output: true });
  t.same([...run.nodes].sort(), ['a', 'b', 'c', 'd', 'e']);
  t.match(await taskIs(api, job.id, 'a', 'scheduled'), { reason: 'dispatched', relay: 'relay-1' });

  const out = relay.answer(run.id);
  await out.send({ type: 'started', node: 'a' });
  await out.send({ type: 'line', node: 'a', text: 'first line' });
  await out.send({ type: 'line', node: 'a', text: 'config x: 3 success' });
  await out.send({ type: 'done', node: 'a', code: 0 });
  await out.send({ type: 'started', node: 'b' });
  await out.send({ type: 'done', node: 'b', code: 4 });
  await out.send({ type: 'busy', node: 'c' });
  await out.send({ type: 'started', node: 'not-in-this-run' });
  await out.send({ type: 'offline', node: 'd' });
  await out.send({ type: 'done', node: 'e', code: 0 });
  t.equal(await out.end(), 200);

  t.match(await taskIs(api, job.id, 'a', 'done'), { reason: 'completed', exit_code: 0, relay: 'relay-1', output: 'first line\nconfig x: 3 success' });
  t.match(await taskIs(api, job.id, 'b', 'failed'), { reason: 'exit_code', exit_code: 4 });
  t.match(await taskIs(api, job.id, 'c', 'failed'), { reason: 'busy' });
  t.match(await taskIs(api, job.id, 'd', 'failed'), { reason: 'offline' });
  t.match(await taskIs(api, job.id, 'e', 'done'), { reason: 'completed' }, 'a done without a started before it still completes');
  const done = (await api('GET', `/api/1/jobs/${job.id}`)).json.data;
  t.match(done, { state: 'finished', progress: { total: 5, done: 2, failed: 3 } });
  t.notOk(done.tasks.some((x: { node_id: string }) => x.node_id === 'not-in-this-run'), 'a relay speaks only for the nodes it was handed');
  const history = (await api('GET', `/api/1/jobs/${job.id}/tasks/a`)).json.data.transitions as Array<{ from: string | null; to: string; reason: string; at: string }>;
  t.same(history.map((h) => `${h.from}>${h.to}:${h.reason}`), ['null>pending:created', 'pending>scheduled:dispatched', 'scheduled>in_progress:started', 'in_progress>done:completed']);
  t.ok(history.every((h) => !Number.isNaN(Date.parse(h.at))), 'every transition has its time');
  t.equal((await fetch(`${server.url}/remote-run/output/${run.id}`, { method: 'POST', body: '', headers: relay.auth })).status, 404, 'a channel answers once');
  t.equal((await fetch(`${server.url}/remote-run/output/${run.id}`, { method: 'POST', body: '' })).status, 401, 'and never without the relay\'s token');
});

t.test('a task whose relay vanished after taking it is aborted at the job timeout, not left hanging', async (t) => {
  const { server, api } = await serverWithApi(t);
  await node(server, 'n1');
  const relay = await linkRelay(t, server, 'relay-1');
  const started = Date.now();
  const job = (await api('POST', '/api/1/jobs', { name: 'stuck', type: 'run', nodes: ['n1'], timeout: 1 })).json.data;
  const run = await relay.run();
  const out = relay.answer(run.id);
  await out.send({ type: 'started', node: 'n1' });
  await taskIs(api, job.id, 'n1', 'in_progress');
  // The relay dies: its link goes, and its output stream is never finished.
  relay.gone();
  const aborted = await taskIs(api, job.id, 'n1', 'aborted');
  t.match(aborted, { reason: 'timeout' });
  t.ok(Date.now() - started >= 1000, 'not before the deadline');
  t.match((await api('GET', `/api/1/jobs/${job.id}`)).json.data, { state: 'finished', progress: { aborted: 1 } });
  await out.send({ type: 'done', node: 'n1', code: 0 }).catch(() => undefined);
  t.match(await task(api, job.id, 'n1'), { state: 'aborted' }, 'a late answer changes nothing');
});

t.test('a relay that takes a run and never answers fails its tasks after answer_wait', async (t) => {
  const { server, api } = await serverWithApi(t, { 'jobs.answer_wait': '300ms' });
  await node(server, 'n1');
  const relay = await linkRelay(t, server, 'relay-1');
  const job = (await api('POST', '/api/1/jobs', { name: 'silent', type: 'run', nodes: ['n1'] })).json.data;
  await relay.run();
  t.match(await taskIs(api, job.id, 'n1', 'failed'), { reason: 'no_answer' });
});

t.test('cancel aborts the tasks not final yet; later events change nothing', async (t) => {
  const { server, api } = await serverWithApi(t);
  for (const id of ['a', 'b', 'c']) await node(server, id);
  const relay = await linkRelay(t, server, 'relay-1');
  const job = (await api('POST', '/api/1/jobs', { name: 'to cancel', type: 'run', nodes: ['a', 'b', 'c'] })).json.data;
  const run = await relay.run();
  const out = relay.answer(run.id);
  await out.send({ type: 'started', node: 'a' });
  await out.send({ type: 'done', node: 'a', code: 0 });
  await out.send({ type: 'started', node: 'b' });
  await taskIs(api, job.id, 'a', 'done');
  await taskIs(api, job.id, 'b', 'in_progress');
  const cancelled = await api('POST', `/api/1/jobs/${job.id}/cancel`);
  t.match(cancelled, { status: 200, json: { data: { state: 'cancelled', progress: { done: 1, aborted: 2 } } } });
  await out.send({ type: 'done', node: 'b', code: 0 });
  await out.send({ type: 'started', node: 'c' });
  t.equal(await out.end(), 200);
  const after = (await api('GET', `/api/1/jobs/${job.id}`)).json.data;
  t.same(after.tasks.map((x: { node_id: string; state: string; reason: string }) => `${x.node_id}:${x.state}/${x.reason}`), ['a:done/completed', 'b:aborted/cancelled', 'c:aborted/cancelled']);
  t.match((await api('GET', '/api/1/jobs?state=cancelled')).json, { total: 1, page: 1, per_page: 50, data: [{ id: job.id, state: 'cancelled' }] });
  t.match(await api('GET', '/api/1/jobs?state=bogus'), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await api('GET', '/api/1/jobs?sort=name'), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } }, 'an unknown parameter is a typo reported');
});

t.test('an inventory job asks the agents for their inventory (force_inventory)', async (t) => {
  const { server, api } = await serverWithApi(t);
  await node(server, 'a');
  const relay = await linkRelay(t, server, 'relay-1');
  await api('POST', '/api/1/jobs', { name: 'inv', type: 'inventory', nodes: ['a'] });
  const run = await relay.run();
  t.same(run.conditions, ['force_inventory']);
  t.same(run.nodes, ['a']);
});

t.test('a big job goes down as several run events, each shorter than a relay reads (64 KiB), every node once', async (t) => {
  const { server, api } = await serverWithApi(t);
  const ids = Array.from({ length: 500 }, (_, i) => `${String(i).padStart(4, '0')}-${'n'.repeat(140)}`);
  for (const id of ids) await node(server, id);
  const relay = await linkRelay(t, server, 'relay-1');
  const job = (await api('POST', '/api/1/jobs', { name: 'big', type: 'run', nodes: ids })).json.data;
  t.equal(job.progress.total, 500);
  await waitFor(async () => ((await api('GET', `/api/1/jobs/${job.id}`)).json.data.progress.scheduled === 500 ? true : undefined), 'all tasks scheduled');
  const runs = relay.events.filter((e) => e.type === 'run') as unknown as RunEvent[];
  t.ok(runs.length >= 2, `${runs.length} run events`);
  for (const r of runs) t.ok(Buffer.byteLength(JSON.stringify(r)) < 64 * 1024, 'each event line fits a relay\'s line reader');
  t.same(runs.flatMap((r) => r.nodes).sort(), [...ids].sort(), 'every node exactly once');
  t.equal(new Set(runs.map((r) => r.id)).size, runs.length, 'one channel per event');
});

t.test('finished jobs are deleted after jobs.retention, running ones are kept', async (t) => {
  const { server, api } = await serverWithApi(t, { 'jobs.retention': '1s' });
  await node(server, 'ok');
  await node(server, 'pend', false);
  const ended = (await api('POST', '/api/1/jobs', { name: 'ends at once', type: 'run', nodes: ['pend'] })).json.data;
  const running = (await api('POST', '/api/1/jobs', { name: 'waits for a relay', type: 'run', nodes: ['ok'] })).json.data;
  t.equal((await api('GET', `/api/1/jobs/${ended.id}`)).json.data.state, 'finished');
  await waitFor(async () => ((await api('GET', `/api/1/jobs/${ended.id}`)).status === 404 ? true : undefined), 'the finished job to go', 10_000);
  t.equal((await api('GET', `/api/1/jobs/${running.id}`)).status, 200, 'the running job is still there');
});
