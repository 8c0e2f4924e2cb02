/**
 * What only a relay may do at the server, in process (startServer on port 0, SQLite): the
 * remote-run link (plain and upgraded), its output posts, and the providers endpoints need a
 * relay's own token naming the relay in the path. None or a malformed one → 401, another relay's
 * → 403 ERR_TOKEN_WRONG_NODE, an agent's or a node no longer a relay → 403 ERR_TOKEN_NOT_RELAY;
 * taking the flag away refuses the relay's tokens at once; `require_relay_token = false` opens
 * them again for old relays. A registered relay is heard from like an agent (it sends no
 * inventory nor run): its renewal, its requests and its link make it reachable, and a held link
 * keeps it so across sweeps.
 */
import http from 'node:http';
import { connect } from 'node:net';
import t, { type Test } from 'tap';
import { createNodeIdentity, generateSigningKey, issueNodeToken, makeRenewRequest, RELAY_ROLE } from '@capstan/shared';
import type { ServerHandle } from '@capstan/server/server';
import { waitFor } from '../helpers/programs.js';
import { serverWithApi } from '../helpers/admin-app.js';
import { collectEvents, statusAndCode } from '../helpers/http.js';
import { inventory } from './store-suite.js';
import { setAcceptance } from '../helpers/node-changes.js';

const cert = (id: string) => createNodeIdentity(id, { bits: 1024 }).certPem;

async function setup(t: Test, overrides: Record<string, unknown> = {}) {
  const { server, api: admin } = await serverWithApi(t, overrides);
  // Two relays and an agent, registered as an admin does it.
  for (const id of ['relay-1', 'relay-2']) t.equal((await admin('POST', '/api/1/nodes', { id, hostname: `${id}.lan`, certificate: cert(id), relay: true })).status, 201);
  await server.store.upsertFromInventory(inventory('agent-1'));
  await setAcceptance(server.store, 'agent-1', 'accepted', new Date().toISOString());
  const token = async (id: string) => (await server.identity.issue((await server.store.getNode(id))!)).token;
  return { server, admin, token };
}

const bearer = (token: string) => ({ authorization: `Bearer ${token}` });

/** GET or POST a relay path; the status and the error code. */
async function call(base: string, method: 'GET' | 'POST', path: string, headers: Record<string, string> = {}, body?: string) {
  return statusAndCode(await fetch(`${base}${path}`, { method, headers: { ...headers, ...(body !== undefined && { 'content-type': 'application/json' }) }, ...(body !== undefined && { body }) }));
}

/** An upgraded link attempt: the status line and the body of a refusal. */
function upgrade(base: string, id: string, headers: Record<string, string> = {}): Promise<{ status: number; body: string }> {
  const url = new URL(base);
  return new Promise((resolve, reject) => {
    const s = connect(Number(url.port), url.hostname, () => {
      s.write(`GET /remote-run/listen/${id}?relay=1 HTTP/1.1\r\nhost: x\r\nconnection: Upgrade\r\nupgrade: capstan-remote-run\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`);
    });
    let buf = '';
    s.on('data', (d: Buffer) => {
      buf += d.toString();
      const status = Number(/^HTTP\/1\.1 (\d{3})/.exec(buf)?.[1]);
      if (status === 101 && buf.includes('"hello"')) {
        s.destroy();
        resolve({ status, body: buf });
      }
    });
    s.on('end', () => resolve({ status: Number(/^HTTP\/1\.1 (\d{3})/.exec(buf)?.[1]), body: buf.slice(buf.indexOf('\r\n\r\n') + 4) }));
    s.on('error', reject);
  });
}

const MANAGERS = '/relay-api/1/providers/relay-1/managers';

t.test('the providers endpoints take only relay-1\'s own relay token', async (t) => {
  const { server, token } = await setup(t);
  await server.store.managers.createManager({ id: 'm1', name: 'lan', type: 'static', provider: 'relay-1', spec: {} }, new Date().toISOString());
  const discovery = `${MANAGERS}/m1/discovery`;
  const none = JSON.stringify({ instances: [] });
  for (const [what, headers, status, code] of [
    ['no token', {}, 401, 'ERR_TOKEN_INVALID'],
    ['a malformed header', { authorization: 'Bearer' }, 401, 'ERR_TOKEN_INVALID'],
    ['another scheme', { authorization: `Basic ${Buffer.from('relay-1:x').toString('base64')}` }, 401, 'ERR_TOKEN_INVALID'],
    ['garbage', bearer('a.b.c'), 401, 'ERR_TOKEN_INVALID'],
    ['an agent\'s token', bearer(await token('agent-1')), 403, 'ERR_TOKEN_NOT_RELAY'],
    ['another relay\'s token', bearer(await token('relay-2')), 403, 'ERR_TOKEN_WRONG_NODE'],
  ] as const) {
    t.match(await call(server.url, 'GET', MANAGERS, headers), { status, code }, `list: ${what}`);
    t.match(await call(server.url, 'POST', discovery, headers, none), { status, code }, `discovery: ${what}`);
  }
  // Signed by a key the server never had, claiming the relay role.
  const forged = await issueNodeToken({ key: generateSigningKey(), nodeId: 'relay-1', group: 'default', role: RELAY_ROLE, ttlSeconds: 600 });
  t.match(await call(server.url, 'POST', discovery, bearer(forged.token), none), { status: 401, code: 'ERR_TOKEN_UNKNOWN_KEY' });
  // Expired beyond the clock skew, signed by the real key.
  const old = await issueNodeToken({ key: await server.identity.activeKey(), nodeId: 'relay-1', group: 'default', role: RELAY_ROLE, ttlSeconds: 60, now: new Date(Date.now() - 3600_000) });
  t.match(await call(server.url, 'GET', MANAGERS, bearer(old.token)), { status: 401, code: 'ERR_TOKEN_EXPIRED' });

  const mine = bearer(await token('relay-1'));
  const list = await fetch(`${server.url}${MANAGERS}`, { headers: mine });
  t.equal(list.status, 200);
  t.same(((await list.json()) as { data: Array<{ id: string }> }).data.map((m) => m.id), ['m1']);
  t.match(await call(server.url, 'POST', discovery, mine, none), { status: 200 });
  t.match(await server.store.managers.getManager('m1'), { last_poll_error: null }, 'the discovery was applied');
  t.match(await call(server.url, 'POST', `${MANAGERS}/m1/discovery`, mine, '{not json'), { status: 400 }, 'bad input after the check is still a coded 400');
  t.match(await call(server.url, 'GET', '/relay-api/1/providers/relay%201/managers', mine), { status: 400, code: 'ERR_BAD_REQUEST' });
});

t.test('an admin who takes the relay flag away is obeyed at once; the node\'s next token is an agent\'s', async (t) => {
  const { server, admin, token } = await setup(t);
  const before = bearer(await token('relay-1'));
  t.match(await call(server.url, 'GET', MANAGERS, before), { status: 200 });
  t.match(await admin('PATCH', '/api/1/nodes/relay-1', { relay: false }), { status: 200, json: { data: { relay: false } } });
  t.match(await call(server.url, 'GET', MANAGERS, before), { status: 401, code: 'ERR_TOKEN_EXPIRED' }, 'its relay tokens were revoked (forced renewal)');
  const after = await token('relay-1');
  t.notOk('capstan_role' in JSON.parse(Buffer.from(after.split('.')[1]!, 'base64url').toString()), 'no relay role any more');
  t.match(await call(server.url, 'GET', MANAGERS, bearer(after)), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' });
  t.match(await admin('PATCH', '/api/1/nodes/relay-1', { relay: true }), { status: 200, json: { data: { relay: true } } });
  // A forced renewal refuses every token issued up to the second after it (the API's rule): the
  // relay's renewals succeed from the next second on.
  await waitFor(async () => ((await call(server.url, 'GET', MANAGERS, bearer(await token('relay-1')))).status === 200 ? true : undefined), 'a relay token accepted again', 5000);
  // A relay token whose node is gone (deleted), or was never a relay in the registry.
  const r2 = bearer(await token('relay-2'));
  await server.store.deleteNode('relay-2');
  t.match(await call(server.url, 'GET', '/relay-api/1/providers/relay-2/managers', r2), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' });
  const ghost = await issueNodeToken({ key: await server.identity.activeKey(), nodeId: 'agent-1', group: 'default', role: RELAY_ROLE, ttlSeconds: 600 });
  t.match(await call(server.url, 'GET', '/relay-api/1/providers/agent-1/managers', bearer(ghost.token)), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' }, 'the registry decides, not the claim alone');
  // Registration refusals are coded too.
  t.match(await admin('POST', '/api/1/nodes', { id: 'relay-3', hostname: 'r3', relay: true }), { status: 400, json: { error: { code: 'ERR_CERTIFICATE' } } });
  t.match(await admin('POST', '/api/1/nodes', { id: 'relay-3', hostname: 'r3', certificate: cert('relay-4'), relay: true }), { status: 400, json: { error: { code: 'ERR_CERTIFICATE' } } });
  t.match(await admin('POST', '/api/1/nodes', { id: 'relay-3', hostname: 'r3', certificate: cert('relay-3'), relay: 'yes' }), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await admin('PATCH', '/api/1/nodes/relay-1', { relay: 'no' }), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.same((await admin('GET', '/api/1/nodes?relay=true')).json.data.map((n: { id: string }) => n.id), ['relay-1'], 'the relays, listed');
});

t.test('the remote-run link and its output posts: a relay token naming the relay, plain and upgraded', async (t) => {
  const { server, admin, token } = await setup(t);
  const listen = '/remote-run/listen/relay-1?relay=1';
  t.match(await call(server.url, 'GET', listen), { status: 401, code: 'ERR_TOKEN_INVALID' });
  t.match(await call(server.url, 'GET', listen, bearer(await token('agent-1'))), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' });
  t.match(await call(server.url, 'GET', listen, bearer(await token('relay-2'))), { status: 403, code: 'ERR_TOKEN_WRONG_NODE' });
  for (const [headers, status, code] of [
    [{}, 401, 'ERR_TOKEN_INVALID'],
    [bearer('x.y.z'), 401, 'ERR_TOKEN_INVALID'],
    [bearer(await token('agent-1')), 403, 'ERR_TOKEN_NOT_RELAY'],
    [bearer(await token('relay-2')), 403, 'ERR_TOKEN_WRONG_NODE'],
  ] as const) {
    const r = await upgrade(server.url, 'relay-1', headers);
    t.equal(r.status, status, `upgrade refused with ${status}`);
    t.equal((JSON.parse(r.body) as { error: { code: string } }).error.code, code);
  }
  t.equal(server.jobs && (await admin('GET', '/api/1/system/status')).json.data.remote_run.relays.length, 0, 'nobody linked');
  t.equal((await upgrade(server.url, 'relay-1', bearer(await token('relay-1')))).status, 101, 'the relay\'s own token links');

  // A run handed to relay-1 is answered by relay-1 only.
  const mine = bearer(await token('relay-1'));
  const events: Array<{ type: string; id?: string }> = [];
  const req = http.get(`${server.url}${listen}`, { headers: mine });
  t.teardown(() => req.destroy());
  req.on('error', () => {});
  req.once('response', (res) => collectEvents(res, events));
  await waitFor(async () => (events.some((e) => e.type === 'hello') ? true : undefined), 'the hello');
  const job = await admin('POST', '/api/1/jobs', { name: 'j', type: 'run', nodes: ['agent-1'] });
  t.equal(job.status, 201);
  const run = await waitFor(async () => events.find((e) => e.type === 'run'), 'the run event');
  const output = `/remote-run/output/${run.id}`;
  const line = `${JSON.stringify({ type: 'done', node: 'agent-1', code: 0 })}\n`;
  t.match(await call(server.url, 'POST', output, {}, line), { status: 401, code: 'ERR_TOKEN_INVALID' });
  t.match(await call(server.url, 'POST', output, bearer(await token('agent-1')), line), { status: 403, code: 'ERR_TOKEN_NOT_RELAY' });
  t.match(await call(server.url, 'POST', output, bearer(await token('relay-2')), line), { status: 403, code: 'ERR_TOKEN_WRONG_NODE' }, 'another relay cannot answer relay-1\'s run');
  t.match((await admin('GET', `/api/1/jobs/${job.json.data.id}`)).json.data.tasks[0], { state: 'scheduled' }, 'the refused answers changed nothing');
  t.match(await call(server.url, 'POST', output, mine, line), { status: 200 });
  await waitFor(async () => ((await admin('GET', `/api/1/jobs/${job.json.data.id}`)).json.data.tasks[0].state === 'done' ? true : undefined), 'the task done');
  t.match(await call(server.url, 'POST', '/remote-run/output/no-such-channel', mine, line), { status: 404 });
  // A link lives no longer than the trust it was opened with: a forced renewal of the relay ends
  // it (the relay reconnects with a renewed token), as does the end of its registration.
  t.equal((await admin('POST', '/api/1/nodes/agent-1/identity/renew')).status, 200);
  t.notOk(events.some((e) => e.type === 'bye'), 'another node\'s renewal leaves the link');
  t.equal((await admin('POST', '/api/1/nodes/relay-1/identity/renew')).status, 200);
  await waitFor(async () => (events.some((e) => e.type === 'bye' && (e as { reason?: string }).reason === 'token_revoked') ? true : undefined), 'the bye');
  t.same((await admin('GET', '/api/1/system/status')).json.data.remote_run.relays, [], 'unlinked');
});

t.test('require_relay_token = false: old relays without a token link and post as before', async (t) => {
  const { server } = await setup(t, { 'identity.require_relay_token': false });
  t.match(await call(server.url, 'GET', MANAGERS), { status: 200 });
  t.equal((await upgrade(server.url, 'relay-1')).status, 101);
});

t.test('a registered relay becomes reachable when it renews, is let in or links; its held link keeps it reachable', async (t) => {
  // Unreachable after 2 s without contact (1 s × 2), swept every second: the link's beat (500 ms) must outpace it.
  const { server, admin, token } = await setup(t, { 'lifecycle.run_interval': '1s', 'lifecycle.missed_runs': 2, 'lifecycle.sweep_interval': '1s' });
  const status = async (id: string) => (await admin('GET', `/api/1/nodes/${id}`)).json.data as { status: string; last_contact_at: string | null };
  t.match(await status('relay-1'), { status: 'unknown', last_contact_at: null }, 'registered, never heard from');
  t.match(await status('relay-2'), { status: 'unknown', last_contact_at: null });

  // A renewal by signed request, as the relay makes it (relayd's RelayToken).
  const keys = createNodeIdentity('relay-3', { bits: 1024 });
  t.equal((await admin('POST', '/api/1/nodes', { id: 'relay-3', hostname: 'relay-3.lan', certificate: keys.certPem, relay: true })).status, 201);
  t.match(await status('relay-3'), { status: 'unknown' });
  const renewed = await fetch(`${server.url}/identity/renew`, { method: 'POST', headers: { 'content-type': 'application/pkcs7-mime' }, body: makeRenewRequest(keys, 'relay-3') });
  t.equal(renewed.status, 200);
  t.match(await status('relay-3'), { status: 'reachable', last_contact_at: /^\d{4}-/ }, 'its renewal is a contact');
  t.match((await server.store.getHistory('relay-3', 1, 10)).data[0], { field: 'status', from: 'unknown', to: 'reachable', cause: 'relay token renewal' });

  // relay-2 is let in once at a relay-only endpoint, relay-1 holds its link.
  t.match(await call(server.url, 'GET', '/relay-api/1/providers/relay-2/managers', bearer(await token('relay-2'))), { status: 200 });
  t.match(await status('relay-2'), { status: 'reachable' }, 'a request let in is a contact');
  const req = http.get(`${server.url}/remote-run/listen/relay-1?relay=1`, { headers: bearer(await token('relay-1')) });
  t.teardown(() => req.destroy());
  req.on('error', () => {});
  await new Promise<void>((resolve) => req.once('response', (res) => {
    res.on('data', () => {});
    res.on('error', () => {});
    resolve();
  }));
  t.match(await status('relay-1'), { status: 'reachable' }, 'a link is a contact at once');
  t.same((await admin('GET', '/api/1/system/status')).json.data.remote_run.relays, ['relay-1']);

  // Silence: the sweep marks relay-2 and relay-3 unreachable; relay-1's link keeps it reachable.
  await waitFor(async () => ((await status('relay-2')).status === 'unreachable' && (await status('relay-3')).status === 'unreachable' ? true : undefined), 'the silent relays unreachable', 10_000);
  const linkedSince = (await status('relay-1')).last_contact_at!;
  for (let i = 0; i < 4; i++) {
    await new Promise((r) => setTimeout(r, 1000));
    t.match(await status('relay-1'), { status: 'reachable' }, `linked relay still reachable after ${i + 1} s more`);
  }
  t.ok((await status('relay-1')).last_contact_at! > linkedSince, 'its contact moves on while linked');
  t.notOk((await server.store.getHistory('relay-1', 1, 20)).data.some((h) => h.to === 'unreachable'), 'never marked unreachable while linked');
  // Once the link is gone, it goes unreachable like the others.
  req.destroy();
  await waitFor(async () => ((await status('relay-1')).status === 'unreachable' ? true : undefined), 'relay-1 unreachable once unlinked', 10_000);
  // And a renewal brings one back.
  const again = await fetch(`${server.url}/identity/renew`, { method: 'POST', headers: { 'content-type': 'application/pkcs7-mime' }, body: makeRenewRequest(keys, 'relay-3') });
  t.equal(again.status, 200);
  t.match(await status('relay-3'), { status: 'reachable' });
});

t.test('require_relay_token = false: a link names any relay, so it records no contact', async (t) => {
  const { server, admin } = await setup(t, { 'identity.require_relay_token': false });
  t.equal((await upgrade(server.url, 'relay-1')).status, 101);
  t.match(await call(server.url, 'GET', MANAGERS), { status: 200 });
  t.match((await admin('GET', '/api/1/nodes/relay-1')).json.data, { status: 'unknown', last_contact_at: null });
});
