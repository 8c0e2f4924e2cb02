/**
 * The admin API over the registry, in process (buildApp + inject) on a real SQLite store: filters
 * in both query spellings, coded errors, manual nodes by address, state changes and history,
 * deletion with revocation, runs by time range, compliance, lifecycle counts and /metrics.
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { capstanError, silentLogger } from '@capstan/shared';
import { Spool, type ProcessedEvent } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { ServerMetrics } from '@capstan/server/metrics';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { lifecyclePolicy } from '@capstan/server/registry/lifecycle';
import { zeroCounts } from '@capstan/shared';
import { inventory, run } from './store-suite.js';
import { programDir } from '../helpers/programs.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { composeDomain } from '@capstan/server/domain';

const TOKEN = 'x'.repeat(32);

async function setup(t: Test) {
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db'), now: () => new Date('2024-05-01T08:00:00Z') });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const metrics = new ServerMetrics({ depth: () => spool.depth(), counts: () => store.counts() });
  const app = buildApp({
    config, store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: TOKEN, metrics,
    lifecycle: { policy: lifecyclePolicy(config), last: () => null },
    status: async () => ({}),
    // Compliance is read at a fixed time, shortly after the runs below.
    now: () => new Date('2024-05-01T12:06:00Z'),
  });
  t.teardown(async () => {
    await app.close();
    await store.close();
  });
  const api = async (method: string, url: string, body?: unknown) => {
    const res = await app.inject({
      method: method as 'GET', url, headers: { authorization: `Bearer ${TOKEN}`, ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { payload: JSON.stringify(body) }),
    });
    const json = res.headers['content-type']?.toString().startsWith('application/json') ? JSON.parse(res.body) : null;
    return { status: res.statusCode, json, text: res.body };
  };
  const list = async (qs: string) => {
    const r = await api('GET', `/api/1/nodes?${qs}`);
    return r.status === 200 ? r.json.data.map((n: { id: string }) => n.id) : r.json.error.code;
  };
  return { app, api, list, store, metrics };
}

async function fleet(store: Store) {
  await store.createNode({ id: 'a1', hostname: 'web-1', region: 'eu-west-1', tags: { env: 'prod', team: "o'brien" }, groups: ['web'] });
  await store.createNode({ id: 'a2', hostname: 'web-2', region: 'us-east-1', tags: { env: '50%' } });
  await store.createNode({ id: 'a3', hostname: 'db-1', region: 'eu-west-2', tags: { env: 'prod' }, state: 'stopped' });
  await store.insertRun(run('a1', '2024-05-01T10:00:00Z'));
}

const enc = encodeURIComponent;
const filter = (f: unknown) => `filter=${enc(JSON.stringify(f))}`;

t.test('GET nodes: key=value and filter=JSON spellings, conflicts, escaping, sorting, totals', async (t) => {
  const { api, list, store } = await setup(t);
  await fleet(store);
  t.same(await list('name=web*'), ['a1', 'a2']);
  t.same(await list('name=web*&region=eu-*'), ['a1'], 'keys ANDed');
  t.same(await list('region=us-*&region=eu-west-2'), ['a3', 'a2'], 'values of one key ORed');
  t.same(await list(`${enc('tag:env')}=${enc('50%')}`), ['a2'], 'a % in a value is literal');
  t.same(await list(`tag:team=${enc("o'brien")}`), ['a1'], "a ' in a value is literal");
  t.same(await list(`tag:env=${enc('5%')}`), []);
  t.same(await list(filter({ key: 'region', values: ['eu-*'], exclude: true })), ['a2']);
  t.same(await list(`state=running&${filter({ key: 'tag:env', values: 'prod', exclude: true })}`), ['a2']);
  t.same(await list(`last_run=${enc('2024-05-01T09:00:00Z..')}`), ['a1']);
  t.same(await list(`last_run=${enc('2024-05-01T12:00:00+02:00..')}`), ['a1'], 'a + must be sent as %2B');
  t.equal(await list(`name=web*&${filter({ key: 'name', values: ['db*'], exclude: true })}`), 'ERR_FILTER_CONFLICT');
  const conflict = await api('GET', `/api/1/nodes?status=reachable&${filter({ key: 'status', values: ['unknown'], exclude: true })}`);
  t.equal(conflict.status, 400);
  t.equal(conflict.json.error.code, 'ERR_FILTER_CONFLICT');
  for (const bad of ['colour=red', 'status=asleep', 'filter=nope', `${filter({ key: 'name', values: ['x'], extra: 1 })}`, 'sort=colour',
    'order=up', 'page=0', 'per_page=1001', 'page=1&page=2', `last_run=yesterday`]) {
    t.equal(await list(bad), 'ERR_BAD_REQUEST', bad);
  }
  t.same(await list('sort=region&order=desc'), ['a2', 'a3', 'a1']);
  t.same(await list('hostname=web'), ['a1', 'a2'], 'the first API\'s hostname is a prefix');
  const page = await api('GET', '/api/1/nodes?per_page=1&page=2&name=*');
  t.match(page.json, { total: 3, page: 2, per_page: 1, totals: { reachable: 1, unknown: 1, unreachable: 1 } });
  t.equal(page.json.data[0].certificate, undefined, 'lists leave the certificate out');
  const filtered = await api('GET', '/api/1/nodes?state=running');
  t.same(filtered.json.totals, { unknown: 1, reachable: 1, unreachable: 0 }, 'totals respect the filters');
});

t.test('POST nodes by address and by id; PATCH state and fields; terminated is final; history', async (t) => {
  const { api } = await setup(t);
  const made = await api('POST', '/api/1/nodes', { host: '10.0.0.7', name: 'db primary', tags: { env: 'prod' }, groups: ['db'] });
  t.equal(made.status, 201);
  t.match(made.json.data, { hostname: '10.0.0.7', address: '10.0.0.7', name: 'db primary', manager: 'manual', accepted: 'accepted', status: 'unknown', tags: { env: 'prod' }, groups: ['db'] });
  t.match(made.json.data.id, /^[0-9a-f-]{36}$/, 'an id is made up');
  const id = made.json.data.id as string;
  t.equal((await api('POST', '/api/1/nodes', { id: 'web1', hostname: 'web1.example.com' })).status, 201, 'the first API\'s form still works');
  t.equal((await api('POST', '/api/1/nodes', { id: 'web1', hostname: 'x' })).json.error.code, 'ERR_NODE_EXISTS');
  for (const body of [{ host: 'bad host' }, { host: 'x', colour: 1 }, { host: 'x', tags: { 'a=b': 'c' } }, { name: 'no host' }, [1], { host: 'x', id: '../etc' }]) {
    const r = await api('POST', '/api/1/nodes', body);
    t.equal(r.status, 400, JSON.stringify(body));
  }
  const stopped = await api('PATCH', `/api/1/nodes/${id}`, { state: 'stopped', tags: { env: 'dev' } });
  t.match(stopped.json.data, { state: 'stopped', status: 'unreachable', tags: { env: 'dev' } });
  t.equal((await api('PATCH', `/api/1/nodes/${id}`, { state: 'terminated' })).status, 200);
  const again = await api('PATCH', `/api/1/nodes/${id}`, { state: 'running' });
  t.equal(again.status, 409);
  t.equal(again.json.error.code, 'ERR_NODE_TERMINATED');
  t.equal((await api('PATCH', `/api/1/nodes/${id}`, {})).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await api('PATCH', `/api/1/nodes/${id}`, { state: 'Running!' })).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await api('PATCH', '/api/1/nodes/ghost', { state: 'stopped' })).status, 404);
  const hist = await api('GET', `/api/1/nodes/${id}/history?per_page=2`);
  t.equal(hist.json.total, 6);
  const line = (h: { field: string; from: string | null; to: string; cause: string }) => `${h.field}:${h.from}→${h.to}:${h.cause}`;
  t.same(hist.json.data.map(line), ['state:stopped→terminated:admin admin', 'status:unknown→unreachable:admin admin'], 'newest first, the admin who acted named');
  t.same((await api('GET', `/api/1/nodes/${id}/history?page=2&per_page=4`)).json.data.map(line), [
    'state:null→running:added by an admin', 'accepted:null→accepted:added by an admin',
  ]);
  t.equal((await api('GET', '/api/1/nodes/ghost/history')).status, 404);
});

t.test('DELETE removes the node and revokes its certificate; pending and refused flows', async (t) => {
  const { api, store } = await setup(t);
  await store.upsertFromInventory(inventory('n1', { auto_accept: 'auto-accept: node id matches n*' }));
  t.equal((await api('GET', '/api/1/nodes/n1')).json.data.accepted, 'accepted');
  t.equal((await api('DELETE', '/api/1/nodes/n1')).status, 204);
  t.equal((await api('DELETE', '/api/1/nodes/n1')).status, 404);
  await store.upsertFromInventory(inventory('n1', { auto_accept: 'auto-accept: node id matches n*' }));
  const pending = await api('GET', '/api/1/nodes/pending');
  t.same(pending.json.data.map((n: { id: string }) => n.id), ['n1'], 'a deleted node that sends again is pending');
  t.equal((await api('POST', '/api/1/nodes/n1/refuse')).json.data.accepted, 'refused');
  t.equal((await api('GET', '/api/1/nodes/pending')).json.total, 0);
  t.equal((await api('POST', '/api/1/nodes/ghost/accept')).status, 404);
  t.equal((await api('POST', '/api/1/nodes/n1/accept')).json.data.accepted, 'accepted', 'only an admin decides');
});

t.test('changes: filtered, paged, as CSV, and counted per hour; compliance exports as CSV', async (t) => {
  const { app, api, store } = await setup(t);
  await store.upsertFromInventory(inventory('n1', { hostname: 'h1' }));
  await setAcceptance(store, 'n1', 'accepted', '2024-05-01T08:30:00Z');
  await store.setExpectations('n1', 'c1', [{ rule_id: 'r1', directive_id: 'd1', component: 'File' }], '2024-05-01T09:00:00Z');
  const repaired = (at: string, message: string) => ({
    rule_id: 'r1', directive_id: 'd1', component: 'File', key_value: '/etc/motd', event_type: 'result_repaired', message, at,
    diff: '--- a/etc/motd\n+++ b/etc/motd\n-old\n+new\n', diff_truncated: false,
  });
  await store.insertRun(run('n1', '2024-05-01T11:00:00Z', { config_id: 'c1', received_at: '2024-05-01T11:00:05Z', changes: [repaired('2024-05-01T11:00:01Z', 'repaired, "quoted", =1+1')] }));
  await store.insertRun(run('n1', '2024-05-01T12:00:00Z', { config_id: 'c1', received_at: '2024-05-01T12:00:05Z', changes: [repaired('2024-05-01T12:00:01Z', 'drift repaired')],
    outcomes: [{ rule_id: 'r1', directive_id: 'd1', component: 'File', outcome: 'result_repaired', count: 1 }] }));
  const all = await api('GET', '/api/1/changes');
  t.equal(all.json.total, 2);
  t.match(all.json.data[0], { node_id: 'n1', label: 'corrective', message: 'drift repaired', has_diff: true, diff: /\+new/ });
  t.match(all.json.data[1], { label: 'intentional' });
  t.same((await api('GET', '/api/1/changes?label=corrective&diff=false')).json.data.map((c: { diff: unknown; has_diff: boolean }) => [c.diff, c.has_diff]), [[null, true]]);
  t.equal((await api('GET', `/api/1/changes?from=${enc('2024-05-01T11:30:00Z')}&node=n1`)).json.total, 1);
  t.equal((await api('GET', '/api/1/changes?node=other')).json.total, 0);
  t.equal((await api('GET', '/api/1/changes?per_page=1&page=2')).json.data[0].label, 'intentional');
  for (const bad of ['label=drift', 'from=yesterday', 'colour=red', 'per_page=1001', 'diff=maybe', 'format=xml']) {
    t.equal((await api('GET', `/api/1/changes?${bad}`)).json?.error.code, 'ERR_BAD_REQUEST', bad);
  }
  t.equal((await api('GET', '/api/1/changes?group=nope')).json.error.code, 'ERR_NOT_FOUND');
  const tooMany = Array.from({ length: 10_001 }, (_, i) => `n${i}`).join(',');
  t.equal((await app.inject({ method: 'GET', url: `/api/1/changes?node=${tooMany}`, headers: { authorization: `Bearer ${TOKEN}` } })).json().error.code, 'ERR_BAD_REQUEST');
  const csv = await api('GET', '/api/1/changes?format=csv');
  const lines = csv.text.trim().split('\r\n');
  t.equal(lines[0], 'at,node_id,label,rule_id,directive_id,component,key,event_type,message,run_id,config_id,diff');
  t.match(lines[2], /"repaired, ""quoted"", =1\+1"/, 'fields with commas and quotes are quoted');
  t.same((await api('GET', '/api/1/changes/histogram?by=hour')).json.data, [
    { at: '2024-05-01T11:00:00.000Z', intentional: 1, corrective: 0, total: 1 },
    { at: '2024-05-01T12:00:00.000Z', intentional: 0, corrective: 1, total: 1 },
  ]);
  t.equal((await api('GET', '/api/1/changes/histogram?by=week')).json.error.code, 'ERR_BAD_REQUEST');
  // Exports: JSON like any list, or CSV by parameter or Accept header.
  const nodes = await api('GET', '/api/1/compliance/nodes');
  t.match(nodes.json, { total: 1, data: [{ node_id: 'n1', class: 'agent', compliance: 100, counts: { repaired: 1 } }] });
  const nodesCsv = (await api('GET', '/api/1/compliance/nodes?format=csv')).text.split('\r\n');
  t.equal(nodesCsv[0], 'node_id,hostname,class,status,state,last_run_at,policy_config_id,compliance,items,success,repaired,error,non_compliant,audit_compliant,not_applicable,unexpected,missing,applying,no_answer');
  t.match(nodesCsv[1], /^n1,h1,agent,reachable,running,2024-05-01T12:00:00\.000Z,c1,100,1,0,1,/);
  t.match((await api('GET', '/api/1/compliance/rules?format=csv')).text, /^rule_id,nodes,compliance,items,/);
  const byAccept = await app.inject({ method: 'GET', url: '/api/1/compliance/directives', headers: { authorization: `Bearer ${TOKEN}`, accept: 'text/csv' } });
  t.match(byAccept.headers['content-type'], /^text\/csv/);
  t.match(byAccept.body, /^rule_id,directive_id,nodes,/);
  // Only the built-in groups: every server has them (no node is accepted here).
  const groups = (await api('GET', '/api/1/compliance/groups')).json;
  t.same(groups.data.map((g: { group_id?: string; id?: string }) => g.group_id ?? g.id), ['all-nodes', 'all-nodes-with-agent', 'all-relays']);
});

t.test('runs by time range; compliance per node, global, per rule and per directive; lifecycle; metrics', async (t) => {
  const { api, store, metrics } = await setup(t);
  await store.upsertFromInventory(inventory('n1', { hostname: 'h1' }));
  await setAcceptance(store, 'n1', 'accepted', '2024-05-01T08:30:00Z');
  await store.setExpectations('n1', 'c1', [{ rule_id: 'r1', directive_id: 'd1', component: 'File' }, { rule_id: 'r1', directive_id: 'd2', component: 'Pkg' }], '2024-05-01T09:00:00Z');
  for (const h of [10, 11, 12]) {
    await store.insertRun(run('n1', `2024-05-01T${h}:00:00Z`, {
      config_id: 'c1', received_at: `2024-05-01T${h}:00:05Z`, outcomes: [{ rule_id: 'r1', directive_id: 'd1', component: 'File', outcome: 'result_success', count: 1 }],
    }));
  }
  const runs = await api('GET', `/api/1/nodes/n1/runs?from=${enc('2024-05-01T10:30:00Z')}&to=${enc('2024-05-01T12:00:00Z')}`);
  t.same(runs.json.data.map((r: { started_at: string }) => r.started_at), ['2024-05-01T11:00:00Z']);
  t.equal(runs.json.total, 1);
  t.equal((await api('GET', '/api/1/nodes/n1/runs?from=soon')).json.error.code, 'ERR_BAD_REQUEST');
  const node = (await api('GET', '/api/1/nodes/n1/compliance')).json.data;
  t.match(node, { node_id: 'n1', policy_config_id: 'c1', expected: true, compliance: 50, run: { started_at: '2024-05-01T12:00:00Z', config_id: 'c1' } });
  t.same(node.summary.counts, { ...zeroCounts(), success: 1, missing: 1 });
  t.same(node.directives.map((d: { directive_id: string; compliance: number }) => `${d.directive_id}:${d.compliance}`), ['d1:100', 'd2:0']);
  t.same(node.components.map((c: { component: string; state: string }) => `${c.component}:${c.state}`), ['File:success', 'Pkg:missing']);
  const global = (await api('GET', '/api/1/compliance')).json.data;
  t.match(global, { nodes: 1, nodes_with_data: 1, total: 2, compliance: 50, percent: { success: 50, missing: 50 } });
  t.match((await api('GET', '/api/1/compliance?name=nothing')).json.data, { nodes: 0, total: 0, compliance: null });
  t.equal((await api('GET', '/api/1/compliance?colour=red')).json.error.code, 'ERR_BAD_REQUEST');
  t.match((await api('GET', '/api/1/compliance/rules')).json, { total: 1, data: [{ rule_id: 'r1', nodes: 1, compliance: 50 }] });
  t.match((await api('GET', '/api/1/compliance/directives')).json, { total: 2, data: [{ directive_id: 'd1', compliance: 100 }, { directive_id: 'd2', compliance: 0 }] });
  const lc = (await api('GET', '/api/1/lifecycle')).json.data;
  t.match(lc, { nodes: { by_status: { reachable: 1 } }, purged_nodes: 0, deleted_runs: 0, policy: { missedRuns: 3, runsRetentionMs: 7 * 86_400_000 }, last_sweep: null });

  metrics.onProcessed({ kind: 'reports', name: 'x', outcome: 'done', ms: 12 } as ProcessedEvent);
  metrics.onProcessed({ kind: 'reports', name: 'y', outcome: 'failed', ms: 3, error: capstanError('ERR_SMIME_DIGEST', 'bad') } as ProcessedEvent);
  metrics.onProcessed({ kind: 'reports', name: 'z', outcome: 'failed', ms: 3, error: Object.assign(new Error('bad'), { code: 'EWHAT' }) } as ProcessedEvent);
  const res = await api('GET', '/metrics');
  t.equal(res.status, 200);
  t.match(res.text, /capstan_server_ingested_files_total\{kind="reports",outcome="done"\} 1/);
  t.match(res.text, /capstan_server_ingest_duration_seconds_count\{kind="reports"\} 3/);
  t.match(res.text, /capstan_server_failed_files_total\{kind="reports",reason="ERR_SMIME_DIGEST"\} 1/);
  t.match(res.text, /capstan_server_failed_files_total\{kind="reports",reason="ERR_INTERNAL"\} 1/, 'an uncoded error is ERR_INTERNAL');
  t.match(res.text, /capstan_server_nodes\{status="reachable"\} 1/);
  t.match(res.text, /capstan_server_nodes\{status="unknown"\} 0/);
  t.match(res.text, /capstan_server_queue_depth\{kind="reports"\} 0/);
});

// Relays route by the chain of policy servers the nodes list gives: a sub-relay registered by an
// admin is told which relay it is under (agents say so in their inventory).
t.test('POST and PATCH nodes take policy_server (a node id, or null for the server); the relays\' nodes list gives it', async (t) => {
  const { app, api } = await setup(t);
  t.equal((await api('POST', '/api/1/nodes', { id: 'relay-sub', hostname: 'sub.example.com', policy_server: 'relay-top' })).status, 201);
  t.equal((await api('GET', '/api/1/nodes/relay-sub')).json.data.policy_server, 'relay-top');
  for (const bad of ['../x', '', 7, 'a b']) {
    const r = await api('POST', '/api/1/nodes', { id: 'n9', hostname: 'n9', policy_server: bad });
    t.match(r, { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } }, JSON.stringify(bad));
  }
  t.equal((await api('PATCH', '/api/1/nodes/relay-sub', { policy_server: 'relay-dc2' })).json.data.policy_server, 'relay-dc2');
  const listed = async () => JSON.parse((await app.inject({ method: 'GET', url: '/rudder/relay-api/1/nodes' })).body).data.nodes['relay-sub']['policy-server'];
  t.equal(await listed(), 'relay-dc2');
  t.equal((await api('PATCH', '/api/1/nodes/relay-sub', { policy_server: null })).json.data.policy_server, null);
  t.equal(await listed(), loadServerConfig({}).general.node_id, 'null: directly under the server');
  t.equal((await api('PATCH', '/api/1/nodes/relay-sub', { policy_server: '../x' })).status, 400);
});
