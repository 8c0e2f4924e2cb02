/**
 * What the console's policy forms read: every method with its parameter docs (GET
 * /api/1/methods, from the shared specs), and the members an unsaved group would have while it is
 * typed (GET /api/1/policy/group-preview), refusals coded, an expression's with its position.
 */
import t from 'tap';
import { METHOD_SPECS } from '@capstan/shared/policy/methods';
import { adminApp } from '../helpers/admin-app.js';
import { inventory } from './store-suite.js';

t.test('GET /api/1/methods lists every method the server validates, with its parameters', async (t) => {
  const { api } = await adminApp(t);
  const r = await api('GET', '/api/1/methods');
  t.equal(r.status, 200);
  t.same(r.json.data.map((m: { name: string }) => m.name).sort(), [...METHOD_SPECS.keys()].sort(), 'the specs, no other list');
  const fc = r.json.data.find((m: { name: string }) => m.name === 'file_content');
  t.match(fc.params, [{ name: 'path', type: 'string', required: true }, { name: 'content', required: true, multiline: true }]);
  t.equal(r.json.data.find((m: { name: string }) => m.name === 'command_check').audit_only, true);
});

t.test('a group preview counts and lists the accepted nodes an unsaved filter and static members hold', async (t) => {
  const { api, store } = await adminApp(t);
  for (const [id, host] of [['n1', 'web-1'], ['n2', 'web-2'], ['n3', 'db-1'], ['n4', 'web-3']]) {
    await store.upsertFromInventory(inventory(id!, { hostname: host! }));
    if (id !== 'n4') t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  }
  const web = await api('GET', `/api/1/policy/group-preview?q=${encodeURIComponent('hostname = web*')}`);
  t.equal(web.status, 200, JSON.stringify(web.json));
  t.same([web.json.total, web.json.data.map((n: { id: string }) => n.id)], [2, ['n1', 'n2']], 'accepted matches only (n4 is pending)');
  const both = await api('GET', `/api/1/policy/group-preview?q=${encodeURIComponent('hostname = web*')}&node=n3&node=ghost`);
  t.same([both.json.total, both.json.unknown_nodes], [3, 1], 'static members added; an unknown id counted apart');
  const limited = await api('GET', `/api/1/policy/group-preview?q=${encodeURIComponent('hostname = web*')}&limit=1`);
  t.same([limited.json.total, limited.json.data.length], [2, 1]);
  const bad = await api('GET', `/api/1/policy/group-preview?q=${encodeURIComponent('hostname = web* and (')}`);
  t.equal(bad.status, 400);
  t.equal(bad.code, 'ERR_FILTER_SYNTAX');
  t.equal(typeof bad.json.error.position, 'number', 'where the expression went wrong');
  t.equal(bad.json.error.field, 'filter');
  t.equal((await api('GET', '/api/1/policy/group-preview?nope=1')).code, 'ERR_BAD_REQUEST', 'unknown parameters are refused');
  // A number beyond what a column or a date holds is refused at the door, in every place a filter goes.
  for (const q of ['last_run.age > 999999999w', 'cpus > 99999999999']) {
    const e = encodeURIComponent(q);
    for (const [what, r] of [
      ['the node list', await api('GET', `/api/1/nodes?q=${e}`)],
      ['a group preview', await api('GET', `/api/1/policy/group-preview?q=${e}`)],
      ['a group saved', await api('POST', '/api/1/groups', { id: 'ancient', name: 'ancient', filter: [{ key: 'q', values: [q] }] })],
    ] as const) t.same([r.status, r.code], [400, 'ERR_FILTER_SYNTAX'], `${q}: ${what}`);
  }
});

t.test('a rule\'s nodes and the node list by compliance answer through the API, bad parameters coded', async (t) => {
  const { api } = await adminApp(t);
  const r = await api('GET', '/api/1/compliance/rules/base/nodes?state=error&order=desc&page=1&per_page=10');
  t.same([r.status, r.json.total, r.json.data], [200, 0, []]);
  t.equal((await api('GET', '/api/1/compliance/rules/base/nodes?state=broken')).code, 'ERR_BAD_REQUEST');
  t.equal((await api('GET', '/api/1/compliance/rules/base/nodes?order=up')).code, 'ERR_BAD_REQUEST');
  t.equal((await api('GET', '/api/1/nodes?sort=compliance&order=asc')).status, 200);
});

t.test('a condition reading a fact none of its nodes has is a warning at save and in a plan, the change still made', async (t) => {
  const { api, store } = await adminApp(t);
  for (const id of ['n1', 'n2']) {
    await store.upsertFromInventory(inventory(id, { inventory: { node_id: id, hostname: id, os: { name: 'debian' }, facts: { role: 'web' } } }));
    t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  }
  t.equal((await api('POST', '/api/1/groups', { id: 'g', name: 'g', nodes: ['n1', 'n2'] })).status, 201);
  const ok = { id: 'motd', name: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'x\n' }, condition: "fact('role') == 'web'" };
  t.equal((await api('POST', '/api/1/directives', ok)).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'r', name: 'r', directives: ['motd'], groups: ['g'] })).status, 201);
  const typo = await api('PUT', '/api/1/directives/motd', { ...ok, condition: "fact('rolle') == 'web' && fact('os.name') == 'debian'" });
  t.equal(typo.status, 200, 'saved all the same');
  t.match(typo.json.warnings, [{ kind: 'directive', id: 'motd', field: 'condition', fact: 'rolle', message: /none of the nodes this directive reaches/ }]);
  t.equal(typo.json.warnings.length, 1, 'os.name is on them: no warning for it');
  t.notOk((await api('PUT', '/api/1/directives/motd', ok)).json.warnings, 'a fact its nodes have: none');
  // A directive that reaches no node yet: nobody to say it of.
  t.equal((await api('POST', '/api/1/groups', { id: 'nobody', name: 'nobody', filter: [{ key: 'hostname', values: ['nomatch-'] }] })).status, 201);
  t.equal((await api('POST', '/api/1/directives', { ...ok, id: 'later', condition: "fact('rolle') == 'web'" })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'r2', name: 'r2', directives: ['later'], groups: ['nobody'] })).status, 201);
  t.notOk((await api('PUT', '/api/1/directives/later', { ...ok, id: 'later', condition: "fact('rolle') == 'web'" })).json.warnings, 'its groups hold no node: no warning');

  const plan = await api('POST', '/api/1/policy/plan', {
    directives: [{ ...ok, condition: "fact('facts.role') == 'web' || fact('nope.x') == '1'" }], groups: [{ id: 'g', name: 'g', nodes: ['n1', 'n2'] }], rules: [{ id: 'r', name: 'r', directives: ['motd'], groups: ['g'] }],
  });
  t.equal(plan.status, 200);
  t.same(plan.json.data.warnings.map((w: { fact: string }) => w.fact), ['nope.x'], 'custom facts under facts.<name> too; the unknown one named');
});
