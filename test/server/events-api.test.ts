/**
 * The event stream's API with the whole server in process: a read after an id, a long-poll that
 * returns when the next event is written, a Server-Sent Events stream that carries events as they
 * come and resumes after Last-Event-ID, the filter language choosing nodes, bad queries refused
 * with their codes, and the readers' limit. What node changes, admin actions and deployments emit
 * is checked on the mapping itself.
 */
import t from 'tap';
import type { EventInsert, NodeRecord } from '@capstan/server/store/index';
import { adminActionEvent, deployedEvent, nodeChangeEvents } from '@capstan/server/events/sources';
import { serverWithApi } from '../helpers/admin-app.js';
import { inventory } from './store-suite.js';

const ev = (node: string | null, type = 'node.no_answer'): EventInsert => ({ at: new Date().toISOString(), type, severity: 'warning', node_id: node, data: { n: node } });

t.test('read after an id; a long-poll returns with the next event; bad queries are refused', async (t) => {
  const { server, api } = await serverWithApi(t, { 'events.poll_interval': '50ms' });
  await server.store.upsertFromInventory(inventory('web1'));
  await server.store.upsertFromInventory(inventory('db1'));
  const ids = await server.store.insertEvents([ev('web1'), ev('db1'), ev(null, 'job.finished')]);
  let r = await api('GET', `/api/1/events?after=${ids[0]}`);
  t.same(r.json.data.map((e: { id: number }) => e.id), ids.slice(1));
  t.equal(r.json.next_after, ids[2]);
  r = await api('GET', `/api/1/events?q=${encodeURIComponent('hostname = db1*')}`);
  t.same(r.json.data.map((e: { node_id: string }) => e.node_id), ['db1'], 'nodes chosen with the filter language');
  r = await api('GET', '/api/1/events?type=job.*&limit=1');
  t.same(r.json.data.map((e: { type: string }) => e.type), ['job.finished']);

  const t0 = Date.now();
  const waiting = api('GET', `/api/1/events?after=${ids[2]}&wait=10&type=node.*`);
  setTimeout(() => void server.store.insertEvents([ev(null, 'job.finished'), ev('web1')]), 300);
  r = await waiting;
  t.equal(r.json.data.length, 1, 'only the reader\'s kind of event');
  t.equal(r.json.data[0].node_id, 'web1');
  t.ok(Date.now() - t0 < 5000, 'answered when it came, not at the end of the wait');
  r = await api('GET', `/api/1/events?after=${r.json.next_after}&wait=1`);
  t.same(r.json.data, [], 'nothing within the wait: an empty answer');

  for (const [q, code] of [['after=-1', 'ERR_BAD_REQUEST'], ['type=node.exploded', 'ERR_BAD_REQUEST'], ['min_severity=loud', 'ERR_BAD_REQUEST'],
    ['q=hostname%20%3D', 'ERR_FILTER_SYNTAX'], ['wait=100000', 'ERR_BAD_REQUEST'], ['limit=0', 'ERR_BAD_REQUEST'], ['bogus=1', 'ERR_BAD_REQUEST']] as const) {
    t.equal((await api('GET', `/api/1/events?${q}`)).json.error.code, code, q);
  }
});

t.test('a Server-Sent Events stream carries events as they come and resumes after Last-Event-ID', async (t) => {
  const { server } = await serverWithApi(t, { 'events.poll_interval': '50ms' });
  const [first] = await server.store.insertEvents([ev('a')]);
  const ac = new AbortController();
  t.teardown(() => ac.abort());
  const res = await fetch(`${server.url}/api/1/events?after=0`, { headers: { authorization: `Bearer ${server.adminToken}`, accept: 'text/event-stream' }, signal: ac.signal });
  t.equal(res.status, 200);
  t.match(res.headers.get('content-type'), /^text\/event-stream/);
  const reader = res.body!.getReader();
  let text = '';
  const until = async (pattern: RegExp) => {
    while (!pattern.test(text)) {
      const { value, done } = await reader.read();
      if (done) throw new Error(`stream ended before ${pattern}: ${text}`);
      text += Buffer.from(value).toString('utf8');
    }
  };
  await until(new RegExp(`id: ${first}\\nevent: node\\.no_answer\\ndata: \\{`));
  const [second] = await server.store.insertEvents([ev('b')]);
  await until(new RegExp(`id: ${second}\\n`));
  const data = JSON.parse(/id: \d+\nevent: [^\n]+\ndata: (.*)\n\n$/.exec(text)![1]!);
  t.match(data, { id: second, type: 'node.no_answer', node_id: 'b', data: { n: 'b' } });
  ac.abort();

  // Resumed: a new stream after the last id seen starts with what came next.
  const [third] = await server.store.insertEvents([ev('c')]);
  const ac2 = new AbortController();
  t.teardown(() => ac2.abort());
  const again = await fetch(`${server.url}/api/1/events`, {
    headers: { authorization: `Bearer ${server.adminToken}`, accept: 'text/event-stream', 'last-event-id': String(second) }, signal: ac2.signal,
  });
  const r2 = again.body!.getReader();
  let text2 = '';
  while (!/id: \d+\n/.test(text2)) text2 += Buffer.from((await r2.read()).value!).toString('utf8');
  t.match(text2, new RegExp(`^: capstan event stream\\n\\nid: ${third}\\n`), 'the first event after Last-Event-ID');
  ac2.abort();
});

t.test('readers beyond [events] max_readers are refused with ERR_TOO_MANY_READERS', async (t) => {
  const { server, api } = await serverWithApi(t, { 'events.max_readers': 1 });
  const last = (await server.store.insertEvents([ev('a')]))[0]!;
  const first = api('GET', `/api/1/events?after=${last}&wait=3`);
  await new Promise((r) => setTimeout(r, 300));
  const r = await api('GET', `/api/1/events?after=${last}&wait=1`);
  t.equal(r.status, 429);
  t.equal(r.json.error.code, 'ERR_TOO_MANY_READERS');
  t.same((await first).json.data, []);
});

const node = (over: Partial<NodeRecord>): NodeRecord => ({ id: 'n1', hostname: 'n1.example.com', policy_server: 'relay-1', accepted: 'accepted', status: 'reachable', ...over }) as NodeRecord;

t.test('node changes, admin actions and deployments are events with who and what', async (t) => {
  const admin = { kind: 'admin' as const, name: 'alice', role: 'admin' as const };
  const at = '2024-05-01T10:00:00.000Z';
  const base = { id: 'n1', at, actor: admin };
  t.match(nodeChangeEvents({ ...base, kind: 'inventory', before: null, after: node({ accepted: 'pending' }), actor: { kind: 'node', name: 'n1' } }),
    [{ type: 'node.pending', severity: 'warning', node_id: 'n1', data: { hostname: 'n1.example.com', relay: 'relay-1' } }]);
  t.same(nodeChangeEvents({ ...base, kind: 'inventory', before: node({ accepted: 'pending' }), after: node({ accepted: 'pending' }) }), [], 'a pending node sending another inventory: nothing new');
  t.match(nodeChangeEvents({ ...base, kind: 'accept', before: node({ accepted: 'pending' }), after: node({}) }), [{ type: 'node.accepted', data: { by: 'admin alice' } }]);
  t.match(nodeChangeEvents({ ...base, kind: 'refuse', before: node({}), after: node({ accepted: 'refused' }) }), [{ type: 'node.refused' }]);
  t.match(nodeChangeEvents({ ...base, kind: 'remove', before: node({}), after: null }), [{ type: 'node.deleted', node_id: 'n1' }]);
  t.match(nodeChangeEvents({ ...base, kind: 'contact', before: node({ status: 'unreachable', last_contact_at: '2024-05-01T08:00:00.000Z' }), after: node({}) }),
    [{ type: 'node.answering', data: { silent_since: '2024-05-01T08:00:00.000Z' } }]);
  const swept = (step: 'unreachable' | 'missing' | 'purge') => nodeChangeEvents({
    ...base, kind: 'sweep', before: null, after: null, actor: { kind: 'system', name: 'sweep' },
    swept: { step, node: { id: 'n1', hostname: 'n1.example.com', policy_server: 'relay-1', last_contact_at: at, before: { state: 'running', status: 'reachable' }, after: null } },
  });
  t.match(swept('unreachable'), [{ type: 'node.no_answer', severity: 'warning', data: { relay: 'relay-1', last_contact_at: at } }]);
  t.match(swept('missing'), [{ type: 'node.missing', data: { state_was: 'running' } }]);
  t.match(swept('purge'), [{ type: 'node.deleted', data: { by: 'sweep' } }]);
  const rec = {
    at, admin: 'alice', role: 'admin' as const, actor_kind: 'admin' as const, actor: 'alice', action: 'node.accept', target: 'n1',
    method: 'POST', path: '/api/1/nodes/n1/accept', address: '127.0.0.1', status: 200, error: null, before: null, after: null,
  };
  t.match(adminActionEvent(rec), { type: 'admin.action', node_id: 'n1', data: { admin: 'alice', action: 'node.accept', target: 'n1' } });
  t.equal(adminActionEvent({ ...rec, status: 403 }), null, 'a refused request changed nothing');
  t.equal(adminActionEvent({ ...rec, actor_kind: 'system', admin: null }), null, 'the server\'s own changes tell their own events');
  t.match(deployedEvent(Array.from({ length: 30 }, (_, i) => `n${i}`), at), { type: 'policy.deployed', node_id: null, data: { nodes: 30, node_ids: { length: 20 } } });
  t.equal(deployedEvent([], at), null);
});

t.test('findings: JSON with paging and filters, CSV whole; bad queries are refused', async (t) => {
  const { api } = await serverWithApi(t);
  let r = await api('GET', '/api/1/findings?status=open');
  t.same(r.json, { data: [], total: 0 });
  for (const [q, code] of [['status=maybe', 'ERR_BAD_REQUEST'], ['kind=bad', 'ERR_BAD_REQUEST'], ['min_age=soon', 'ERR_BAD_REQUEST'],
    ['q=hostname%20%3D', 'ERR_FILTER_SYNTAX'], ['format=csv&page=2', 'ERR_BAD_REQUEST'], ['from=yesterday', 'ERR_BAD_REQUEST']] as const) {
    r = await api('GET', `/api/1/findings?${q}`);
    t.equal(r.json?.error?.code, code, q);
  }
});
