/**
 * The relay API's system routes and /metrics: RUDDER's envelope and field order, status that
 * shows spool, upstream and configuration health, reload that swaps the nodes list (and keeps
 * the old one when the new one is broken), and the loopback-or-token rule.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { CAPSTAN_VERSION } from '@capstan/shared';
import { buildApp } from '@capstan/relayd';
import { CountingUpstream, runName, until } from './helpers/upstream.js';
import { put, startTestRelay } from './helpers/relay.js';
import { programDir } from '../helpers/programs.js';

const API = '/rudder/relay-api/1';
const TOKEN = 'a-token-that-is-long-enough-0123456789';

t.test('system/info answers in RUDDER\'s envelope, data first', async (t) => {
  const r = await startTestRelay(t, { 'general.node_id': 'relay-1' });
  const res = await fetch(`${r.url}${API}/system/info`);
  t.equal(res.status, 200);
  const text = await res.text();
  t.match(text, /^\{"data":\{"major-version":/);
  t.same(JSON.parse(text), {
    data: { 'major-version': CAPSTAN_VERSION.split('.').slice(0, 2).join('.'), 'full-version': CAPSTAN_VERSION, 'node-id': 'relay-1' },
    result: 'success',
    action: 'getSystemInfo',
  });
});

t.test('system/status reports spool, upstream, nodes list and configuration', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  const first = (await (await fetch(`${r.url}${API}/system/status`)).json()) as any;
  t.equal(first.action, 'getStatus');
  t.equal(first.data.upstream.state, 'unknown', 'no contact yet');
  t.equal(first.data.configuration.status, 'success');
  t.same(first.data.spool.incoming, { reports: 0, inventories: 0 });
  t.same(first.data.nodes_list, { status: 'success', configured: false, nodes: 0 });
  await put(r.url, 'reports', runName('n1', 1), 'x');
  await until(() => (up.received.length === 1 ? true : undefined), 'forward');
  const after = (await (await fetch(`${r.url}${API}/system/status`)).json()) as any;
  t.equal(after.data.upstream.state, 'up');
  t.equal(after.data.upstream.status, 'success');
  t.ok(after.data.upstream.last_contact);
});

t.test('reload swaps the nodes list; a broken one is refused and the old one kept', async (t) => {
  const dir = programDir(t, { 'nodes.json': JSON.stringify({ a: { 'policy-server': 'root' } }) });
  const r = await startTestRelay(t, { 'general.nodes_list_file': join(dir, 'nodes.json') }, { dir });
  const nodes = async () => ((await (await fetch(`${r.url}${API}/system/status`)).json()) as any).data.nodes_list.nodes;
  t.equal(await nodes(), 1);
  await writeFile(join(dir, 'nodes.json'), JSON.stringify({ a: { 'policy-server': 'root' }, b: { 'policy-server': 'a' } }));
  const ok = await fetch(`${r.url}${API}/system/reload`, { method: 'POST' });
  t.equal(ok.status, 200);
  t.same(await ok.json(), { result: 'success', action: 'reloadConfiguration' });
  t.equal(await nodes(), 2);

  await writeFile(join(dir, 'nodes.json'), '{ not json');
  const bad = await fetch(`${r.url}${API}/system/reload`, { method: 'POST' });
  t.equal(bad.status, 500);
  const body = (await bad.json()) as any;
  t.equal(body.result, 'error');
  t.equal(body.action, 'reloadConfiguration');
  t.match(body.errorDetails, /not JSON/);
  t.equal(await nodes(), 2, 'the previous list is still in use');
  const status = (await (await fetch(`${r.url}${API}/system/status`)).json()) as any;
  t.equal(status.data.configuration.status, 'error', 'the configuration check sees the broken file');
});

t.test('system and remote-run endpoints answer loopback or the admin token only', async (t) => {
  const dir = programDir(t, { token: `${TOKEN}\n` });
  const r = await startTestRelay(t, { 'general.admin_token_file': join(dir, 'token') }, { dir });
  const app = buildApp({ ...r.handle.context, loopbackIsAdmin: false });
  const remote = { remoteAddress: '10.1.2.3' };
  for (const [method, url] of [
    ['GET', `${API}/system/info`],
    ['GET', `${API}/system/status`],
    ['POST', `${API}/system/reload`],
    ['POST', `${API}/remote-run/all`],
  ] as const) {
    const anon = await app.inject({ method, url, ...remote });
    t.equal(anon.statusCode, 403, `${method} ${url} without a token`);
    t.equal(anon.json().error.code, 'ERR_FORBIDDEN');
    const wrong = await app.inject({ method, url, ...remote, headers: { authorization: `Bearer ${TOKEN}x` } });
    t.equal(wrong.statusCode, 403, 'wrong token');
  }
  const withToken = await app.inject({ method: 'GET', url: `${API}/system/info`, ...remote, headers: { authorization: `Bearer ${TOKEN}` } });
  t.equal(withToken.statusCode, 200);
  // Agent-facing routes stay open to the network.
  t.equal((await app.inject({ method: 'GET', url: '/uuid', ...remote })).statusCode, 200);
  t.equal((await app.inject({ method: 'GET', url: '/metrics', ...remote })).statusCode, 200);
  // And a real loopback client of the real relay needs no token.
  t.equal((await fetch(`${r.url}${API}/system/info`)).status, 200);
});

t.test('/metrics: received, forwarded and failed by kind, spool gauges, forward latency', async (t) => {
  const up = await new CountingUpstream((_req, path) => (path.includes('bad') ? 400 : 201)).start();
  t.teardown(() => up.stop());
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  await put(r.url, 'reports', runName('n1', 1), 'x');
  await put(r.url, 'inventories', 'bad_2026-01-01T00:00:00Z.json', 'y');
  await put(r.url, 'reports', 'not-a-run-log', 'z');
  await until(async () => ((await r.handle.context.spool.depth()).inventories === 0 && up.received.length === 1 ? true : undefined), 'both processed');
  const res = await fetch(`${r.url}/metrics`);
  t.match(res.headers.get('content-type'), /text\/plain/);
  const text = await res.text();
  t.match(text, /capstan_relayd_received_files_total\{kind="reports"\} 1/);
  t.match(text, /capstan_relayd_received_files_total\{kind="inventories"\} 1/);
  t.match(text, /capstan_relayd_forwarded_files_total\{kind="reports"\} 1/);
  t.match(text, /capstan_relayd_failed_files_total\{kind="inventories",code="ERR_UPSTREAM_REJECTED"\} 1/);
  t.match(text, /capstan_relayd_refused_uploads_total\{kind="reports",status="400"\} 1/);
  t.match(text, /capstan_relayd_upstream_errors_total\{kind="inventories",code="400"\} 1/);
  t.match(text, /capstan_relayd_forward_duration_seconds_bucket\{le="\+Inf",kind="reports"\} 1/);
  t.match(text, /capstan_relayd_spool_files\{kind="reports"\} 0/);
  t.match(text, /capstan_relayd_spool_oldest_age_seconds\{kind="reports"\} 0/);
  t.match(text, /capstan_relayd_upstream_up 1/);
  t.match(text, /capstan_relayd_agent_connections 0/);
});
