/**
 * Techniques as policy objects, through the server's app (buildApp + inject, real SQLite store):
 * saved with parseTechnique's field-level refusals, versioned by their `version` field, named by
 * directives whose values are checked at save, guarded against deletion and changes that would
 * leave a directive's values behind, regenerating the nodes of the rules using them, in plans
 * and change requests, and audited.
 */
import t, { type Test } from 'tap';
import { adminApp } from '../helpers/admin-app.js';

async function setup(t: Test) {
  const app = await adminApp(t);
  let hosts = 0;
  const node = async (id: string, tags: Record<string, string> = {}) => {
    const r = await app.api('POST', '/api/1/nodes', { host: `10.0.1.${++hosts}`, id, tags });
    t.equal(r.status, 201, JSON.stringify(r.json));
  };
  return { ...app, node };
}

const nginx = (version = '1.0', extra: Record<string, unknown> = {}) => ({
  id: 'nginx_server', name: 'Nginx server', version,
  parameters: [
    { name: 'workers', type: 'string', default: 'auto' },
    { name: 'sites', type: 'list', default: ['default'] },
    { name: 'conf', type: 'string', required: true },
  ],
  calls: [
    { id: 'install', method: 'package_present', params: { name: 'nginx' } },
    { id: 'config', name: 'Nginx config', method: 'file_content', params: { path: '{{params.conf}}', content: 'worker_processes {{params.workers}};\n' } },
    { id: 'site', name: 'Site {{item}}', foreach: 'sites', method: 'file_line_present', params: { path: '/etc/nginx/sites', line: '{{item}}' } },
  ],
  ...extra,
});

const web = (params: Record<string, unknown>, version = '1.0') => ({
  id: 'web', name: 'Web server', method: 'technique', technique: { id: 'nginx_server', version }, params,
});

/** An error answer as [status, code, field]. */
const fault = (r: { status: number; json: { error?: { code: string; field?: string } } }) => [r.status, r.json.error?.code, r.json.error?.field];

t.test('a technique is saved, listed and read back; bad ones are refused naming the field', async (t) => {
  const { api } = await setup(t);
  const cases: Array<[Record<string, unknown>, string]> = [
    [{ ...nginx(), version: '1' }, 'version'],
    [{ ...nginx(), colour: 'red' }, 'colour'],
    [{ ...nginx(), calls: [{ id: 'a', method: 'no_such_method', params: {} }] }, 'calls[0].method'],
    [{ ...nginx(), calls: [{ id: 'a', method: 'file_content', params: { path: '{{params.nope}}', content: '' } }] }, 'calls[0].params.path'],
    [{ ...nginx(), calls: [{ id: 'a', method: 'file_content', params: { path: 'relative', content: '' } }] }, 'calls[0].params.path'],
    [{ ...nginx(), calls: [{ id: 'a', method: 'package_present', params: { name: 'x' }, if: "repaired('b')" }] }, 'calls[0].if'],
    [{ ...nginx(), parameters: [{ name: 'n', type: 'number', default: 'x' }], calls: [{ id: 'a', method: 'package_present', params: { name: 'x' } }] }, 'parameters[0].default'],
  ];
  for (const [body, field] of cases) {
    const r = await api('POST', '/api/1/techniques', body);
    t.same(fault(r), [400, 'ERR_TECHNIQUE_INVALID', field], `${field}: ${r.json.error?.message}`);
  }
  t.same(fault(await api('PUT', '/api/1/techniques/other', nginx())), [400, 'ERR_BAD_REQUEST', 'id'], 'path and body ids differ');
  t.same((await api('GET', '/api/1/techniques')).json, { data: [], total: 0 }, 'nothing was saved');
  t.same(fault(await api('GET', '/api/1/techniques?kind=x')), [400, 'ERR_BAD_REQUEST', undefined], 'an unknown query parameter');

  const created = await api('POST', '/api/1/techniques', nginx());
  t.equal(created.status, 201, JSON.stringify(created.json));
  t.match(created.json.data, { id: 'nginx_server', version: '1.0', calls: [{ id: 'install' }, { id: 'config' }, { id: 'site' }] });
  t.same(fault(await api('POST', '/api/1/techniques', nginx())), [409, 'ERR_CONFLICT', undefined], 'created once');
  const { id: _id, ...noId } = nginx('1.1');
  const put = await api('PUT', '/api/1/techniques/nginx_server', noId);
  t.equal(put.status, 200, 'the id may come from the path');
  t.equal(put.json.data.version, '1.1');
  const got = await api('GET', '/api/1/techniques/nginx_server');
  t.match(got.json.data, { id: 'nginx_server', version: '1.1', updated_at: String });
  t.equal((await api('GET', '/api/1/techniques')).json.total, 1, 'one object per technique id, whatever its version');
  t.same(fault(await api('GET', '/api/1/techniques/nope')), [404, 'ERR_NOT_FOUND', undefined]);
  t.equal((await api('DELETE', '/api/1/techniques/nginx_server')).status, 204);
  t.same(fault(await api('DELETE', '/api/1/techniques/nginx_server')), [404, 'ERR_NOT_FOUND', undefined]);
});

t.test('a directive instantiates a saved technique at its version, with values that fit', async (t) => {
  const { api } = await setup(t);
  const conf = { conf: '/etc/nginx/nginx.conf' };
  t.same(fault(await api('POST', '/api/1/directives', web(conf))), [400, 'ERR_BAD_REQUEST', 'technique.id'], 'no such technique');
  t.equal((await api('POST', '/api/1/techniques', nginx())).status, 201);
  const cases: Array<[Record<string, unknown>, [number, string, string]]> = [
    [web(conf, '2.0'), [400, 'ERR_BAD_REQUEST', 'technique.version']],
    [web({}), [400, 'ERR_METHOD_PARAMS', 'params.conf']],
    [web({ ...conf, colour: 'red' }), [400, 'ERR_METHOD_PARAMS', 'params.colour']],
    [web({ ...conf, sites: 'default' }), [400, 'ERR_METHOD_PARAMS', 'params.sites']],
    [{ ...web(conf), technique: { id: 'nginx_server' } }, [400, 'ERR_BAD_REQUEST', 'technique.version']],
    [{ ...web(conf), technique: { id: 'nginx_server', version: '1.0', extra: 1 } }, [400, 'ERR_BAD_REQUEST', 'technique.extra']],
    [{ ...web(conf), params: ['x'] }, [400, 'ERR_METHOD_PARAMS', 'params']],
    [{ id: 'motd', method: 'file_absent', params: { path: '/tmp/x' }, technique: { id: 'nginx_server', version: '1.0' } }, [400, 'ERR_BAD_REQUEST', 'technique']],
  ];
  for (const [body, want] of cases) t.same(fault(await api('POST', '/api/1/directives', body)), want, want[2]);
  const r = await api('POST', '/api/1/directives', web({ ...conf, sites: ['a', 'b'] }));
  t.equal(r.status, 201, JSON.stringify(r.json));
  t.same(r.json.data.technique, { id: 'nginx_server', version: '1.0' });
  t.same(r.json.data.params, { conf: '/etc/nginx/nginx.conf', sites: ['a', 'b'] }, 'the values as given: defaults fill in per node');
});

t.test('a technique in use: deletion refused, changes checked against its directives, which follow a new version', async (t) => {
  const { api, node } = await setup(t);
  await node('web1', { role: 'web' });
  await node('web2', { role: 'web' });
  await node('db1', { role: 'db' });
  t.equal((await api('POST', '/api/1/techniques', nginx())).status, 201);
  t.equal((await api('POST', '/api/1/techniques', { ...nginx(), id: 'unused' })).status, 201);
  t.equal((await api('POST', '/api/1/directives', web({ conf: '/etc/nginx/nginx.conf' }))).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'webs', filter: [{ key: 'tag:role', values: ['web'] }] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'web-rule', directives: ['web'], groups: ['webs'] })).status, 201);

  const del = await api('DELETE', '/api/1/techniques/nginx_server');
  t.same(fault(del), [409, 'ERR_CONFLICT', undefined]);
  t.match(del.json.error.message, /used by directives: web/);

  // A change reaches the nodes of the rules whose directives use it, and only those.
  const same = await api('PUT', '/api/1/techniques/nginx_server', nginx('1.0', { name: 'Nginx' }));
  t.equal(same.status, 200, JSON.stringify(same.json));
  t.equal(same.json.regenerated.nodes, 2, 'the two members of the rule\'s group');
  const other = await api('PUT', '/api/1/techniques/unused', { ...nginx(), id: 'unused', name: 'Unused' });
  t.equal(other.json.regenerated.nodes, 0, 'a technique no directive uses reaches no node');

  // A change the directive's values no longer fit is refused, and nothing is saved.
  const stricter = nginx('1.0', { parameters: [...nginx().parameters, { name: 'owner', type: 'string', required: true }] });
  const refused = await api('PUT', '/api/1/techniques/nginx_server', stricter);
  t.same(fault(refused), [409, 'ERR_CONFLICT', 'parameters']);
  t.match(refused.json.error.message, /directive web .*params\.owner/);
  const dropped = await api('PUT', '/api/1/techniques/nginx_server', nginx('1.0', { parameters: nginx().parameters.filter((p) => p.name !== 'conf'), calls: [nginx().calls[0]] }));
  t.same(fault(dropped), [409, 'ERR_CONFLICT', 'parameters'], 'a parameter the directive gives a value to is removed');
  t.equal((await api('GET', '/api/1/techniques/nginx_server')).json.data.name, 'Nginx', 'the stored technique is the one before');

  // A new version: the directive follows it; its nodes get a new bundle.
  const before = await api('GET', '/api/1/nodes/web1/policy');
  const v2 = await api('PUT', '/api/1/techniques/nginx_server', nginx('2.0', { name: 'Nginx' }));
  t.equal(v2.status, 200, JSON.stringify(v2.json));
  t.equal(v2.json.regenerated.nodes, 2);
  t.equal(v2.json.regenerated.changed, 2, 'both members\' bundles changed');
  t.same((await api('GET', '/api/1/directives/web')).json.data.technique, { id: 'nginx_server', version: '2.0' });
  t.not((await api('GET', '/api/1/nodes/web1/policy')).json.data.config_id, before.json.data.config_id);
  t.same(fault(await api('PUT', '/api/1/directives/web', web({ conf: '/x' }, '1.0'))), [400, 'ERR_BAD_REQUEST', 'technique.version'], 'the old version is gone');
  const audit = (await api('GET', '/api/1/audit?per_page=100')).json.data as Array<{ action: string; target: string }>;
  t.ok(audit.some((a) => a.action === 'technique.update' && a.target === 'nginx_server'), 'the technique change is audited');

  // Once no directive uses it, it can go.
  t.equal((await api('DELETE', '/api/1/rules/web-rule')).status, 204);
  t.equal((await api('DELETE', '/api/1/directives/web')).status, 204);
  t.equal((await api('DELETE', '/api/1/techniques/nginx_server')).status, 204);
});

t.test('plans and change requests carry techniques', async (t) => {
  const { api } = await setup(t);
  const desired = { techniques: [nginx()], directives: [web({ conf: '/etc/nginx/nginx.conf' })] };
  const plan = await api('POST', '/api/1/policy/plan', desired);
  t.equal(plan.status, 200, JSON.stringify(plan.json));
  t.same(plan.json.data.changes.map((c: { action: string; kind: string; id: string }) => `${c.action} ${c.kind} ${c.id}`),
    ['create technique nginx_server', 'create directive web'], 'the technique before the directive naming it');
  for (const c of plan.json.data.changes) t.equal((await api('PUT', `/api/1/${c.kind}s/${c.id}`, c.object)).status, 201);
  t.same((await api('POST', '/api/1/policy/plan', desired)).json.data.changes, [], 'applied: nothing left');

  const bump = await api('POST', '/api/1/policy/plan', { techniques: [nginx('1.1')], directives: [web({ conf: '/etc/nginx/nginx.conf' }, '1.1')] });
  t.same(bump.json.data.changes.map((c: { action: string; kind: string; fields?: string[] }) => `${c.action} ${c.kind} ${(c.fields ?? []).join(',')}`),
    ['update technique version', 'update directive technique']);

  // Files that disagree: the directive names a version the files do not give.
  t.same(fault(await api('POST', '/api/1/policy/plan', { techniques: [nginx('1.1')], directives: [web({ conf: '/x' })] })), [400, 'ERR_BAD_REQUEST', 'directives.web.technique.version']);
  t.same(fault(await api('POST', '/api/1/policy/plan', { directives: [web({})] })), [400, 'ERR_METHOD_PARAMS', 'directives.web.params.conf']);
  t.same(fault(await api('POST', '/api/1/policy/plan', { techniques: [{ ...nginx(), version: 'x' }] })), [400, 'ERR_TECHNIQUE_INVALID', 'techniques[0].version']);
  // A new required parameter with the directive's value in the same plan: the technique is saved
  // first and would be refused, so the plan says so rather than apply failing half-way.
  const owner = { name: 'owner', type: 'string', required: true };
  const stuck = await api('POST', '/api/1/policy/plan', { techniques: [nginx('1.1', { parameters: [...nginx().parameters, owner] })], directives: [web({ conf: '/x', owner: 'ops' }, '1.1')] });
  t.same(fault(stuck), [409, 'ERR_CONFLICT', 'techniques.nginx_server.parameters']);
  t.match(stuck.json.error.message, /give the new parameter a default/);
  const withDefault = await api('POST', '/api/1/policy/plan', { techniques: [nginx('1.1', { parameters: [...nginx().parameters, { ...owner, default: 'ops' }] })], directives: [web({ conf: '/x', owner: 'web' }, '1.1')] });
  t.equal(withDefault.status, 200, 'with a default, the same change applies');
  const pruned = await api('POST', '/api/1/policy/plan', { prune: true, directives: [] });
  t.same(pruned.json.data.changes.map((c: { action: string; kind: string }) => `${c.action} ${c.kind}`), ['delete directive', 'delete technique'], 'deleted after the directives naming it');

  // A request that leaves the directive alone: it follows the new version, as a save makes it.
  const follows = await api('POST', '/api/1/policy/plan', { techniques: [nginx('1.1')] });
  t.same(follows.json.data.changes.map((c: { action: string; kind: string; object: { version?: string; technique?: { version: string } } }) => `${c.action} ${c.kind} ${c.object.version ?? c.object.technique?.version}`),
    ['update technique 1.1', 'update directive 1.1']);
  const cr = await api('POST', '/api/1/change-requests', { title: 'nginx 1.1', techniques: [nginx('1.1', { name: 'Nginx 1.1' })] });
  t.equal(cr.status, 201, JSON.stringify(cr.json));
  t.same(cr.json.data.base.map((b: { kind: string; id: string }) => `${b.kind} ${b.id}`), ['technique nginx_server']);
  // Another admin approves and deploys it: the technique and its directive land at 1.1.
  const bob = (await api('POST', '/api/1/admins', { name: 'bob', role: 'admin' })).json.data.token as string;
  const asBob = (method: string, url: string, body?: unknown) => api(method, url, body, {}, `Bearer ${bob}`);
  t.equal((await asBob('POST', `/api/1/change-requests/${cr.json.data.id}/approve`, {})).status, 200);
  const deployed = await asBob('POST', `/api/1/change-requests/${cr.json.data.id}/deploy`, {});
  t.equal(deployed.status, 200, JSON.stringify(deployed.json));
  t.match((await api('GET', '/api/1/techniques/nginx_server')).json.data, { version: '1.1', name: 'Nginx 1.1' });
  t.same((await api('GET', '/api/1/directives/web')).json.data.technique, { id: 'nginx_server', version: '1.1' });
  t.same(fault(await api('POST', '/api/1/change-requests', { title: 'x', delete: [{ kind: 'technique', id: 'nope_x' }], techniques: [{ ...nginx(), id: 'nope_x' }] })),
    [400, 'ERR_BAD_REQUEST', 'delete[0].id'], 'saved and deleted at once');
});
