/**
 * Change requests (server/src/policy/reviews.ts) through the admin API: a proposal carries its
 * impact; its author cannot approve it, another admin can; deploying applies exactly the objects
 * reviewed; a request whose objects changed meanwhile is refused on deploy (ERR_CHANGE_STALE)
 * and the newer object stays; a role in `[policy] review_roles` cannot save directly but its
 * reviewed request deploys; an operator proposes but does not approve; every step is audited.
 */
import t, { type Test } from 'tap';
import { adminApp } from '../helpers/admin-app.js';
import { inventory } from './store-suite.js';

async function setup(t: Test, overrides: Record<string, unknown> = {}) {
  const a = await adminApp(t, { overrides });
  await a.store.upsertFromInventory(inventory('web-1', { hostname: 'web-1' }));
  t.equal((await a.api('POST', '/api/1/nodes/web-1/accept')).status, 200);
  const tokens: Record<string, string> = {};
  for (const [name, role] of [['alice', 'admin'], ['bob', 'admin'], ['olga', 'operator']] as const) {
    const r = await a.api('POST', '/api/1/admins', { name, role });
    t.equal(r.status, 201, JSON.stringify(r.json));
    tokens[name] = r.json.data.token;
  }
  const as = (name: string) => (method: string, url: string, body?: unknown) => a.api(method, url, body, {}, `Bearer ${tokens[name]}`);
  return { ...a, as };
}

const DIRECTIVE = { id: 'motd', name: 'Message of the day', method: 'file_content', params: { path: '/etc/motd', content: 'hello\n' } };
const GROUP = { id: 'web', name: 'Web', nodes: ['web-1'] };
const RULE = { id: 'base', name: 'Base', directives: ['motd'], groups: ['web'] };

t.test('a proposal shows its impact; another admin approves it; deploying applies exactly what was reviewed', async (t) => {
  const { as, api } = await setup(t);
  const alice = as('alice');
  const proposed = await alice('POST', '/api/1/change-requests', { title: 'motd for web', directives: [DIRECTIVE], groups: [GROUP], rules: [RULE] });
  t.equal(proposed.status, 201, JSON.stringify(proposed.json));
  const cr = proposed.json.data;
  t.match(cr, { status: 'open', author: 'alice', stale: [] });
  t.same(cr.impact.nodes.map((n: { node_id: string; added: unknown[] }) => [n.node_id, n.added]), [['web-1', [{ rule_id: 'base', directive_id: 'motd' }]]], 'the node that gains the directive');
  t.equal((await api('GET', '/api/1/directives/motd')).status, 404, 'nothing is saved by a proposal');

  const self = await alice('POST', `/api/1/change-requests/${cr.id}/approve`, { comment: 'looks fine to me' });
  t.equal(self.status, 409);
  t.equal(self.code, 'ERR_CHANGE_REQUEST_STATE', 'its author cannot approve it');
  const early = await as('bob')('POST', `/api/1/change-requests/${cr.id}/deploy`, {});
  t.equal(early.code, 'ERR_CHANGE_REQUEST_STATE', 'an open request is not deployed');
  const approved = await as('bob')('POST', `/api/1/change-requests/${cr.id}/approve`, { comment: 'ok for web' });
  t.equal(approved.status, 200, JSON.stringify(approved.json));
  t.match(approved.json.data.reviews, [{ admin: 'bob', verdict: 'approved', comment: 'ok for web' }]);

  const diff = await api('GET', `/api/1/change-requests/${cr.id}/nodes/web-1`);
  t.same(diff.json.data.before, [], 'the node has no directive now');
  t.match(diff.json.data.after, [{ id: 'motd', rule_id: 'base' }], 'and has motd after');

  const deployed = await as('bob')('POST', `/api/1/change-requests/${cr.id}/deploy`, {});
  t.equal(deployed.status, 200, JSON.stringify(deployed.json));
  t.match(deployed.json.data, { status: 'deployed', deployed_by: 'bob' });
  t.match((await api('GET', '/api/1/directives/motd')).json.data, DIRECTIVE, 'the directive as reviewed');
  t.match((await api('GET', '/api/1/rules/base')).json.data, RULE);
  t.equal((await api('GET', '/api/1/nodes/web-1/policy')).json.data.rules[0]?.id, 'base', 'the node gets the rule');
  t.equal((await as('bob')('POST', `/api/1/change-requests/${cr.id}/deploy`, {})).code, 'ERR_CHANGE_REQUEST_STATE', 'a request is deployed once');

  const audit = (await api('GET', `/api/1/audit?target=${cr.id}`)).json.data.map((r: { action: string; admin: string; status: number }) => [r.action, r.admin, r.status]);
  for (const step of [['change_request.propose', 'alice', 201], ['change_request.approve', 'bob', 200], ['change_request.deploy', 'bob', 200]]) {
    t.ok(audit.some((a: unknown[]) => JSON.stringify(a) === JSON.stringify(step)), `audited: ${step.join(' ')}`);
  }
  t.ok(audit.some((a: unknown[]) => a[0] === 'change_request.approve' && a[2] === 409), 'the refused self-approval too');
  t.equal((await api('GET', '/api/1/audit?action=directive.create&admin=bob')).json.total, 1, 'the object\'s own change is recorded with its deployer');
});

t.test('a request whose objects changed since it was proposed is refused on deploy, and the newer object stays', async (t) => {
  const { as, api } = await setup(t);
  t.equal((await api('POST', '/api/1/directives', DIRECTIVE)).status, 201);
  const cr = (await as('alice')('POST', '/api/1/change-requests', { title: 'new motd', directives: [{ ...DIRECTIVE, params: { ...DIRECTIVE.params, content: 'proposed\n' } }] })).json.data;
  t.equal((await as('bob')('POST', `/api/1/change-requests/${cr.id}/approve`, {})).status, 200);
  const direct = { ...DIRECTIVE, params: { ...DIRECTIVE.params, content: 'edited directly\n' } };
  t.equal((await api('PUT', '/api/1/directives/motd', direct)).status, 200);
  t.match((await api('GET', `/api/1/change-requests/${cr.id}`)).json.data.stale, [{ kind: 'directive', id: 'motd' }], 'the request says it is stale');
  const refused = await as('bob')('POST', `/api/1/change-requests/${cr.id}/deploy`, {});
  t.equal(refused.status, 409);
  t.equal(refused.code, 'ERR_CHANGE_STALE');
  t.equal((await api('GET', '/api/1/directives/motd')).json.data.params.content, 'edited directly\n', 'the newer version stays');
  t.equal((await api('GET', `/api/1/change-requests/${cr.id}`)).json.data.status, 'approved', 'not deployed');
});

t.test('a role that must go through review cannot save directly; its reviewed request deploys', async (t) => {
  const { as, api } = await setup(t, { 'policy.review_roles': ['admin'] });
  const direct = await as('alice')('POST', '/api/1/directives', DIRECTIVE);
  t.equal(direct.status, 403);
  t.equal(direct.code, 'ERR_REVIEW_REQUIRED');
  t.equal((await api('GET', '/api/1/directives/motd')).status, 404);
  const cr = (await as('alice')('POST', '/api/1/change-requests', { title: 'motd', directives: [DIRECTIVE] })).json.data;
  t.equal((await as('bob')('POST', `/api/1/change-requests/${cr.id}/approve`, {})).status, 200);
  const deployed = await as('bob')('POST', `/api/1/change-requests/${cr.id}/deploy`, {});
  t.equal(deployed.status, 200, JSON.stringify(deployed.json));
  t.equal((await api('GET', '/api/1/directives/motd')).status, 200);
  const rejectedToo = (await as('alice')('POST', '/api/1/change-requests', { title: 'drop it', delete: [{ kind: 'directive', id: 'motd' }] })).json.data;
  t.equal((await as('bob')('POST', `/api/1/change-requests/${rejectedToo.id}/reject`, { comment: 'still needed' })).json.data.status, 'rejected');
  t.equal((await as('bob')('POST', `/api/1/change-requests/${rejectedToo.id}/deploy`, {})).code, 'ERR_CHANGE_REQUEST_STATE', 'a rejected request is not deployed');
});

t.test('an operator proposes; only an admin approves', async (t) => {
  const { as } = await setup(t);
  const cr = await as('olga')('POST', '/api/1/change-requests', { title: 'motd', directives: [DIRECTIVE] });
  t.equal(cr.status, 201);
  const approve = await as('olga')('POST', `/api/1/change-requests/${cr.json.data.id}/approve`, {});
  t.equal(approve.code, 'ERR_FORBIDDEN');
});

t.test('a bad proposal is refused naming the field', async (t) => {
  const { as } = await setup(t);
  const r = await as('alice')('POST', '/api/1/change-requests', { title: 'bad', directives: [{ ...DIRECTIVE, params: { path: 'relative', content: 'x' } }] });
  t.equal(r.status, 400);
  t.equal(r.code, 'ERR_METHOD_PARAMS');
  t.equal(r.json.error.field, 'directives[0].params.path');
  t.equal((await as('alice')('POST', '/api/1/change-requests', { title: 'nothing' })).code, 'ERR_BAD_REQUEST', 'a request changes something');
  t.equal((await as('alice')('POST', '/api/1/change-requests', { directives: [DIRECTIVE] })).json.error.field, 'title');
});

t.test('a request that no longer fits the policy is refused whole on deploy, nothing applied', async (t) => {
  const { as, api } = await setup(t);
  t.equal((await api('POST', '/api/1/directives', DIRECTIVE)).status, 201);
  t.equal((await api('POST', '/api/1/groups', GROUP)).status, 201);
  // The rule names a directive and group that exist now; the directive goes before the deploy.
  const cr = (await as('alice')('POST', '/api/1/change-requests', { title: 'base', groups: [{ ...GROUP, name: 'Web (renamed)' }], rules: [RULE] })).json.data;
  t.equal((await as('bob')('POST', `/api/1/change-requests/${cr.id}/approve`, {})).status, 200);
  t.equal((await api('DELETE', '/api/1/directives/motd')).status, 204);
  const refused = await as('bob')('POST', `/api/1/change-requests/${cr.id}/deploy`, {});
  t.equal(refused.status, 400, JSON.stringify(refused.json));
  t.equal(refused.code, 'ERR_BAD_REQUEST');
  t.equal((await api('GET', '/api/1/groups/web')).json.data.name, 'Web', 'the group was not renamed: nothing of it applied');
  t.equal((await api('GET', '/api/1/rules/base')).status, 404);
});
