/**
 * Named admins and roles at the server, in process (startServer on port 0, SQLite): every admin
 * route is in the access table and every entry is a route; every route × every role answers as
 * the table says (allowed, or 403 ERR_FORBIDDEN); every write, allowed or refused, is in the
 * audit log exactly once and in one JSON log line; tokens are shown once, replaced, revoked and
 * expire; the audit log filters and pages.
 */
import t, { type Test } from 'tap';
import type { FastifyRequest } from 'fastify';
import type { Logger } from '@capstan/shared';
import { loadServerConfig } from '@capstan/server/config';
import { startServer } from '@capstan/server/server';
import { ROUTE_ACCESS, checkAccess } from '@capstan/server/api/access';
import { tokenDigest } from '@capstan/server/api/auth';
import { programDir } from '../helpers/programs.js';

/** A logger keeping what it is given, to read the audit lines back. */
function capturing(): { log: Logger; lines: Array<Record<string, unknown>> } {
  const lines: Array<Record<string, unknown>> = [];
  const keep = (obj: object | string, msg?: string) => {
    if (typeof obj === 'object') lines.push({ ...obj, msg });
  };
  const log: Logger = { trace: () => {}, debug: () => {}, info: keep, warn: () => {}, error: () => {}, child: () => log };
  return { log, lines };
}

async function setup(t: Test) {
  const dir = programDir(t);
  const config = loadServerConfig({
    overrides: { 'general.data_dir': dir, 'general.listen': '127.0.0.1:0', 'lifecycle.sweep_interval': '1h', 'policy.regenerate_interval': '0' },
  });
  const { log, lines } = capturing();
  const server = await startServer(config, log);
  t.teardown(() => server.close());
  const call = async (token: string | null, method: string, path: string, body?: unknown) => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: { ...(token !== null && { authorization: `Bearer ${token}` }), ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  };
  const root = (method: string, path: string, body?: unknown) => call(server.adminToken, method, path, body);
  return { server, call, root, lines };
}

const RANK = { viewer: 0, operator: 1, admin: 2 } as const;
type Role = keyof typeof RANK;
const ROLES: Role[] = ['viewer', 'operator', 'admin'];

t.test('every admin route is in the access table, every entry is a route, every write has one action', async (t) => {
  const { server } = await setup(t);
  const routes = [...new Set(server.adminRoutes)].sort();
  t.ok(routes.length > 50, `${routes.length} admin routes`);
  t.same(routes.filter((r) => !(r in ROUTE_ACCESS)), [], 'no admin route is missing from ROUTE_ACCESS');
  t.same(Object.keys(ROUTE_ACCESS).filter((r) => !routes.includes(r)), [], 'no stale entry');
  const writes = Object.entries(ROUTE_ACCESS).filter(([k]) => !k.startsWith('GET '));
  t.same(writes.filter(([, a]) => !a.action || !/^[a-z_]+(\.[a-z_]+)+$/.test(a.action)).map(([k]) => k), [], 'every write has a dotted action');
  const actions = writes.map(([, a]) => a.action);
  t.equal(new Set(actions).size, actions.length, 'action names are unique');
  t.same(Object.entries(ROUTE_ACCESS).filter(([k, a]) => k.startsWith('GET ') && a.role !== 'viewer').map(([k]) => k), [], 'viewers read everything');
});

t.test('a route missing from the table is refused to every role (deny by default)', async (t) => {
  for (const role of ROLES) {
    const req = { method: 'POST', routeOptions: { url: '/api/1/not-in-the-table' }, principal: { name: 'x', role } } as unknown as FastifyRequest;
    await t.rejects(checkAccess(req), { code: 'ERR_FORBIDDEN' }, role);
  }
});

t.test('role matrix: every route × every role is allowed or a coded 403, and every write is audited once', async (t) => {
  const { server, call, root, lines } = await setup(t);
  const tokens = {} as Record<Role, string>;
  const names: Record<Role, string> = { viewer: 'vic', operator: 'olga', admin: 'ada' };
  for (const role of ROLES) {
    const r = await root('POST', '/api/1/admins', { name: names[role], role });
    t.equal(r.status, 201);
    tokens[role] = r.json.data.token;
    t.same((await call(tokens[role], 'GET', '/api/1/whoami')).json.data, { name: names[role], role, expires_at: null });
  }
  const routes = [...new Set(server.adminRoutes)].sort();
  const fill = (pattern: string) => pattern.replace(/:name\b/, 'nobody').replace(/:(\w+)/g, 'nope');
  const expected = new Map<string, { status: number; error: string | null }>();
  for (const key of routes) {
    const [method, pattern] = key.split(' ') as [string, string];
    const access = ROUTE_ACCESS[key]!;
    const path = fill(pattern);
    for (const role of ROLES) {
      // An operator may PATCH a node's state only: that is the allowed case tried here.
      const body = method === 'GET' ? undefined : key === 'PATCH /api/1/nodes/:id' ? { state: 'running' } : {};
      const r = await call(tokens[role], method, path, body);
      const allowed = RANK[role] >= RANK[access.lesser?.[0] ?? access.role];
      if (allowed) t.not(r.status, 403, `${role} may ${key} (${r.status} ${r.json?.error?.code ?? ''})`);
      else {
        t.equal(r.status, 403, `${role} may not ${key}`);
        t.equal(r.json.error.code, 'ERR_FORBIDDEN');
        t.match(r.json.error.message, new RegExp(`role ${role}.*needs role ${access.role}`));
      }
      t.not(r.status, 401);
      if (method !== 'GET') expected.set(`${names[role]} ${method} ${path}`, { status: r.status, error: r.status >= 400 ? r.json?.error?.code ?? null : null });
    }
  }
  // The operator may not change anything but a node's state.
  const tags = await call(tokens.operator, 'PATCH', '/api/1/nodes/nope', { tags: { a: 'b' } });
  t.equal(tags.status, 403);
  t.match(tags.json.error.message, /setting tags.*needs role admin/);
  expected.set('olga PATCH /api/1/nodes/nope#tags', { status: 403, error: 'ERR_FORBIDDEN' });

  for (const role of ROLES) {
    const r = await root('GET', `/api/1/audit?admin=${names[role]}&per_page=1000`);
    const seen = new Map<string, number>();
    for (const rec of r.json.data) {
      t.equal(rec.role, role);
      t.notOk(['GET', 'HEAD'].includes(rec.method), 'reads are not audited');
      const k = `${rec.admin} ${rec.method} ${rec.path}`;
      seen.set(k, (seen.get(k) ?? 0) + 1);
      const want = expected.get(k);
      t.ok(want, `expected ${k}`);
      if (want && !(rec.path === '/api/1/nodes/nope' && rec.method === 'PATCH' && role === 'operator')) {
        t.equal(rec.status, want.status, `${k} status`);
        t.equal(rec.error, want.error, `${k} error`);
        // The domain names what it did: a PUT that made the object records `<kind>.create`.
        const action = ROUTE_ACCESS[routes.find((x) => x.startsWith(`${rec.method} `) && fill(x.split(' ')[1]!) === rec.path)!]!.action!;
        t.ok(rec.action === (rec.method === 'PUT' && rec.status === 201 ? action.replace(/\.update$/, '.create') : action), `${k} action`);
      }
    }
    for (const k of expected.keys()) {
      if (!k.startsWith(`${names[role]} `)) continue;
      const n = seen.get(k.replace('#tags', '')) ?? 0;
      t.equal(n, k.includes('PATCH /api/1/nodes/nope') && role === 'operator' ? 2 : 1, `${k} recorded once`);
    }
  }
  const auditLines = lines.filter((l) => l.audit === true);
  // And the three admins made by the bootstrap admin at the start.
  t.equal(auditLines.length, expected.size + 3, 'one JSON log line per write');
  t.match(auditLines[0], { audit: true, admin: String, action: String, method: String, status: Number, address: String });
});

t.test('tokens: shown once, stored hashed, replaced, revoked, expired; the bootstrap admin is reserved', async (t) => {
  const { server, call, root } = await setup(t);
  const made = await root('POST', '/api/1/admins', { name: 'ops', role: 'operator', expires: '90d' });
  t.equal(made.status, 201);
  const { token, expires_at, created_at } = made.json.data;
  t.match(made.json.data, { name: 'ops', role: 'operator', token: /^[A-Za-z0-9_-]{43}$/ });
  t.equal(Date.parse(expires_at) - Date.parse(created_at), 90 * 86_400_000);
  t.same((await call(token, 'GET', '/api/1/whoami')).json.data, { name: 'ops', role: 'operator', expires_at });
  const shown = await root('GET', '/api/1/admins/ops');
  t.same(Object.keys(shown.json.data).sort(), ['created_at', 'expires_at', 'last_used_at', 'name', 'revoked_at', 'role']);
  t.ok(shown.json.data.last_used_at, 'use is recorded');
  t.notOk(JSON.stringify((await root('GET', '/api/1/admins')).json).includes(token), 'the list never shows a token');
  t.match((await root('GET', '/api/1/admins?per_page=1&page=1')).json, { data: [{ name: 'ops' }], total: 1, page: 1, per_page: 1 });
  t.match(await root('GET', '/api/1/admins?sort=name'), { status: 400 }, 'an unknown parameter is refused');
  t.match(await server.store.admins.adminByDigest(tokenDigest(token)), { name: 'ops' }, 'the digest is what is stored');

  t.match(await root('POST', '/api/1/admins', { name: 'ops', role: 'viewer' }), { status: 409, json: { error: { code: 'ERR_CONFLICT' } } });
  t.match(await root('POST', '/api/1/admins', { name: 'admin', role: 'viewer' }), { status: 409 }, 'the bootstrap name is reserved');
  for (const body of [{ name: 'x', role: 'root' }, { name: 'Bad Name', role: 'viewer' }, { name: 'x', role: 'viewer', expires: 'soon' },
    { name: 'x', role: 'viewer', expires: '2020-01-01T00:00:00Z' }, { name: 'x', role: 'viewer', expires: '20y' }, { name: 'x', role: 'viewer', extra: 1 }]) {
    t.match(await root('POST', '/api/1/admins', body), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } }, JSON.stringify(body));
  }
  t.equal((await root('POST', '/api/1/admins', { name: 'until', role: 'viewer', expires: '2031-01-01T00:00:00+01:00' })).json.data.expires_at, '2030-12-31T23:00:00.000Z');

  const renewed = await root('POST', '/api/1/admins/ops/token');
  t.equal(renewed.status, 201);
  t.not(renewed.json.data.token, token);
  t.match(await call(token, 'GET', '/api/1/whoami'), { status: 401, json: { error: { code: 'ERR_UNAUTHORIZED' } } }, 'the old token stops working');
  t.equal((await call(renewed.json.data.token, 'GET', '/api/1/whoami')).status, 200);

  t.equal((await root('DELETE', '/api/1/admins/ops')).status, 204);
  t.equal((await call(renewed.json.data.token, 'GET', '/api/1/nodes')).status, 401, 'a revoked token is refused');
  t.ok((await root('GET', '/api/1/admins/ops')).json.data.revoked_at);
  t.match(await root('DELETE', '/api/1/admins/ops'), { status: 409 });
  t.match(await root('POST', '/api/1/admins/ops/token'), { status: 409 });
  t.match(await root('DELETE', '/api/1/admins/nobody'), { status: 404, json: { error: { code: 'ERR_NOT_FOUND' } } });
  t.match(await root('DELETE', '/api/1/admins/admin'), { status: 409 });

  // Expired: written straight to the store, as no API answer may make a token from the past.
  await server.store.admins.createAdmin({ name: 'old', role: 'admin', token_digest: tokenDigest('old-token-old-token'), created_at: '2020-01-01T00:00:00.000Z', expires_at: '2021-01-01T00:00:00.000Z' });
  t.equal((await call('old-token-old-token', 'GET', '/api/1/whoami')).status, 401, 'an expired token is refused');

  t.same((await root('GET', '/api/1/whoami')).json.data, { name: 'admin', role: 'admin', expires_at: null }, 'admin.token is the bootstrap admin');
  t.equal((await call(null, 'GET', '/api/1/whoami')).status, 401);
});

t.test('the audit log: who, action, target, address, result; filters, paging, newest first, unknown parameters refused', async (t) => {
  const { call, root } = await setup(t);
  const op = (await root('POST', '/api/1/admins', { name: 'olga', role: 'operator' })).json.data.token;
  await root('POST', '/api/1/directives', { id: 'd1', name: 'D1', method: 'file_content', params: { path: '/etc/motd', content: 'hi' } });
  await call(op, 'DELETE', '/api/1/directives/d1');
  await call(null, 'POST', '/api/1/nodes/x/accept', {});
  const all = (await root('GET', '/api/1/audit')).json;
  t.equal(all.total, 4);
  t.match(all.data, [
    { admin: null, role: null, action: 'node.accept', target: 'x', status: 401, error: 'ERR_UNAUTHORIZED' },
    { admin: 'olga', role: 'operator', action: 'directive.delete', target: 'd1', method: 'DELETE', path: '/api/1/directives/d1', status: 403, error: 'ERR_FORBIDDEN', address: '127.0.0.1' },
    { admin: 'admin', role: 'admin', action: 'directive.create' },
    { admin: 'admin', role: 'admin', action: 'admin.create', target: 'olga', status: 201, error: null },
  ]);
  t.equal(all.page, 1);
  t.equal(all.per_page, 100);
  t.match(all.data[2], { status: 201, target: 'd1' }, 'a created object is the target of its record');
  const q = async (qs: string) => (await root('GET', `/api/1/audit?${qs}`)).json;
  t.same((await q('result=error')).data.map((r: { status: number }) => r.status), [401, 403]);
  t.same((await q('admin=olga')).data.length, 1);
  t.same((await q('action=admin.create')).data.length, 1);
  t.same((await q('target=d1')).data.length, 2);
  t.same((await q(`from=${encodeURIComponent(all.data[1].at)}`)).data.length, 2);
  t.same((await q(`to=${encodeURIComponent(all.data[3].at)}`)).data.length, 0);
  t.same((await q('per_page=1&page=2')).data[0].action, 'directive.delete');
  for (const bad of ['result=maybe', 'page=0', 'from=yesterday', 'who=olga', 'admin=a&admin=b']) {
    t.match(await root('GET', `/api/1/audit?${bad}`), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } }, bad);
  }
  t.equal((await call(op, 'GET', '/api/1/audit')).status, 200, 'any role reads the audit log');
});
