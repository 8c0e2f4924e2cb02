/**
 * The registry behaviours, written once for every backend (like store-suite.ts, which
 * store-sqlite.test.ts and store-postgres.test.ts run with a fresh database per test): lifecycle
 * transitions and their history, auto-accept and revocation, manual and cloud nodes, every node
 * filter, the sweep, run retention, and compliance for a hand-built scenario.
 */
import type { Test } from 'tap';
import type { NodeFilter, NodeListQuery, Store } from '@capstan/server/store/index';
import { complianceSuite } from './compliance-suite.js';
import { MIGRATIONS } from '@capstan/server/store/migrations/index';
import { FP, inventory, PEM, run, run as run_, setup, type Backend } from './store-suite.js';
import { recordContact, setAcceptance, setState, updateNode } from '../helpers/node-changes.js';

const ids = async (store: Store, q: Partial<NodeListQuery> = {}) => {
  const res = await store.listNodes({ page: 1, per_page: 100, ...q });
  return { ids: res.data.map((n) => n.id), total: res.total, totals: res.totals };
};
const only = async (store: Store, filters: NodeFilter[], q: Partial<NodeListQuery> = {}) => (await ids(store, { filters, ...q })).ids;
const history = async (store: Store, id: string) =>
  (await store.getHistory(id, 1, 100)).data.reverse().map((h) => `${h.at} ${h.field} ${h.from ?? '∅'}→${h.to} (${h.cause})`);

/** Six nodes with every attribute the filters look at (see the table in each assertion). */
async function fleet(store: Store): Promise<void> {
  await store.createNode({ id: 'a1', hostname: 'web-1.eu', name: 'Web-1', region: 'eu-west-1', tags: { env: 'prod', team: "o'brien" }, groups: ['web'] });
  await store.createNode({ id: 'a2', hostname: 'web-2.eu', name: 'web-2', region: 'eu-central-1', tags: { env: 'staging' }, groups: ['web', 'eu'] });
  await store.createNode({ id: 'a3', hostname: 'db-1.us', name: 'db-1', region: 'us-east-1', tags: { env: 'prod', discount: '50%' }, groups: ['db'] });
  await store.createNode({ id: 'a4', hostname: 'db_2', name: 'db_2', tags: { env: '100%' } });
  await store.upsertFromInventory(inventory('a5', { hostname: 'app-1' }));
  await store.createNode({ id: 'a6', hostname: 'web-3.eu', name: 'web-3', region: 'eu-west-2', state: 'stopped' });
  await store.insertRun(run('a1', '2024-05-01T10:00:00Z'));
  await store.insertRun(run('a2', '2024-05-02T10:00:00Z'));
  await store.insertRun(run('a3', '2024-05-03T10:00:00Z'));
}

export function registrySuite(t: Test, backend: Backend): void {
  t.test('every transition is recorded with its time and cause, through the whole lifecycle', async (t) => {
    const { store } = await setup(t, backend);
    await store.upsertFromInventory(inventory('n1', { received_at: '2024-05-01T10:00:00Z' }));
    await setAcceptance(store, 'n1', 'accepted', '2024-05-01T10:01:00Z');
    await store.insertRun(run('n1', '2024-05-01T10:05:00Z', { received_at: '2024-05-01T10:05:30Z' }));
    t.match(await store.getNode('n1'), { status: 'reachable', last_contact_at: '2024-05-01T10:05:30.000Z' });
    // Silence: first unreachable (missed runs), later missing.
    t.equal((await store.markUnreachable('2024-05-01T10:30:00Z', '2024-05-01T10:30:00Z', 100)).length, 1);
    t.equal((await store.markUnreachable('2024-05-01T10:30:00Z', '2024-05-01T10:30:00Z', 100)).length, 0, 'idempotent');
    t.equal((await store.markMissing('2024-05-02T10:00:00Z', '2024-05-02T10:30:00Z', 100)).length, 1);
    t.match(await store.getNode('n1'), { state: 'missing', status: 'unreachable', state_changed_at: '2024-05-02T10:30:00.000Z' });
    // A missing node that sends again is running and reachable again.
    await store.insertRun(run('n1', '2024-05-03T09:00:00Z', { received_at: '2024-05-03T09:00:10Z' }));
    t.match(await store.getNode('n1'), { state: 'running', status: 'reachable', last_run_at: '2024-05-03T09:00:00.000Z' });
    await setState(store, 'n1', 'terminated', '2024-05-03T10:00:00Z');
    t.same(await history(store, 'n1'), [
      '2024-05-01T10:00:00.000Z accepted ∅→pending (inventory)',
      '2024-05-01T10:00:00.000Z state ∅→running (inventory)',
      '2024-05-01T10:00:00.000Z status ∅→reachable (inventory)',
      '2024-05-01T10:01:00.000Z accepted pending→accepted (admin)',
      '2024-05-01T10:30:00.000Z status reachable→unreachable (missed runs)',
      '2024-05-02T10:30:00.000Z state running→missing (silence)',
      '2024-05-03T09:00:10.000Z state missing→running (run)',
      '2024-05-03T09:00:10.000Z status unreachable→reachable (run)',
      '2024-05-03T10:00:00.000Z state running→terminated (admin)',
      '2024-05-03T10:00:00.000Z status reachable→unreachable (admin)',
    ]);
    const page = await store.getHistory('n1', 2, 3);
    t.equal(page.total, 10);
    t.same(page.data.map((h) => `${h.field}:${h.cause}`), ['state:run', 'state:silence', 'status:missed runs'], 'newest first, paged');
    t.same(await store.getHistory('ghost', 1, 10), { data: [], total: 0 });
  });

  t.test('terminated is final: other states are ERR_NODE_TERMINATED, contact cannot revive it', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'm1', hostname: 'h' });
    t.match(await setState(store, 'm1', 'terminated', '2024-05-01T09:00:00Z'), { state: 'terminated', status: 'unreachable' });
    await t.rejects(setState(store, 'm1', 'running', '2024-05-01T09:01:00Z'), { code: 'ERR_NODE_TERMINATED' });
    await t.rejects(updateNode(store, 'm1', { state: 'stopped', name: 'x' }, '2024-05-01T09:01:00Z'), { code: 'ERR_NODE_TERMINATED' });
    t.match(await setState(store, 'm1', 'terminated', '2024-05-01T09:02:00Z'), { state: 'terminated' }, 'terminated again is no change');
    await store.insertRun(run('m1', '2024-05-01T09:03:00Z'));
    t.match(await store.getNode('m1'), { state: 'terminated', status: 'unreachable', name: 'h' }, 'nothing was half-applied');
    t.equal((await store.markMissing('2030-01-01T00:00:00Z', '2030-01-01T00:00:00Z', 10)).length, 0, 'terminated nodes never go missing');
  });

  t.test('auto-accept applies to new and pending nodes, never to refused ones or revoked certificates', async (t) => {
    const { store } = await setup(t, backend);
    const rule = 'auto-accept: hostname matches *.example.com';
    const auto = await store.upsertFromInventory(inventory('n1', { auto_accept: rule }));
    t.match(auto, { accepted: 'accepted', accepted_at: '2024-05-01T10:00:00.000Z', certificate: PEM('A') });
    t.match((await store.getHistory('n1', 1, 10)).data.find((h) => h.field === 'accepted'), { from: null, to: 'accepted', cause: rule });
    // A pending node is accepted by its next inventory once a rule matches it (e.g. a secret was added).
    await store.upsertFromInventory(inventory('n2'));
    t.match(await store.upsertFromInventory(inventory('n2', { auto_accept: rule, received_at: '2024-05-01T11:00:00Z' })), { accepted: 'accepted' });
    // Refused stays refused whatever the rules say.
    await store.upsertFromInventory(inventory('n3'));
    await setAcceptance(store, 'n3', 'refused', '2024-05-01T10:30:00Z');
    t.match(await store.upsertFromInventory(inventory('n3', { auto_accept: rule, received_at: '2024-05-01T11:00:00Z' })), { accepted: 'refused' });
    // Deleting revokes the certificate: the same key comes back pending, a new key may be auto-accepted.
    t.equal(await store.deleteNode('n1', '2024-05-01T12:00:00Z'), true);
    const back = await store.upsertFromInventory(inventory('n1', { auto_accept: rule, received_at: '2024-05-01T13:00:00Z' }));
    t.match(back, { accepted: 'pending', last_run_at: null });
    t.match((await store.getHistory('n1', 1, 10)).data.find((h) => h.field === 'accepted'), { to: 'pending', cause: /revoked/ });
    await store.deleteNode('n1');
    t.match(await store.upsertFromInventory(inventory('n1', { auto_accept: rule, certificate: PEM('NEW'), certificate_fingerprint: FP('c') })),
      { accepted: 'accepted', certificate: PEM('NEW') });
  });

  t.test('manual nodes by address carry name, tags and groups; a cloud identity is one row', async (t) => {
    const { store } = await setup(t, backend);
    const m = await store.createNode({ id: 'm1', hostname: '10.0.0.5', name: 'db primary', address: '10.0.0.5', tags: { b: '2', a: '1' }, groups: ['z', 'a', 'a'] });
    t.match(m, { name: 'db primary', address: '10.0.0.5', manager: 'manual', accepted: 'accepted', status: 'unknown', state: 'running' });
    t.same(m.tags, { a: '1', b: '2' });
    t.same(m.groups, ['a', 'z']);
    t.same(await store.getNode('m1'), m);
    t.same((await store.getHistory('m1', 1, 10)).data.map((h) => `${h.field}:${h.to}:${h.cause}`).reverse(),
      ['accepted:accepted:added by an admin', 'state:running:added by an admin', 'status:unknown:added by an admin']);
    const cloud = { source_id: 'i-0abc', region: 'eu-west-1', account_id: '123456789012', manager: 'aws-ec2' };
    t.match(await store.createNode({ id: 'c1', hostname: 'ip-10-0-0-1', ...cloud }), { manager: 'aws-ec2', source_id: 'i-0abc' });
    await t.rejects(store.createNode({ id: 'c2', hostname: 'other', ...cloud }), { code: 'ERR_NODE_EXISTS' }, 'one instance, one row');
    t.ok(await store.createNode({ id: 'c3', hostname: 'other', ...cloud, region: 'eu-west-2' }), 'same instance id, another region');
    await t.rejects(store.createNode({ id: 'c4', hostname: 'h', source_id: 'i-1' }), { code: 'ERR_BAD_REQUEST' }, 'partial identity');
    await t.rejects(store.createNode({ id: 'c5', hostname: 'h', tags: { 'a=b': 'x' } }), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(store.createNode({ id: 'c6', hostname: 'h', tags: Object.fromEntries(Array.from({ length: 65 }, (_, i) => [`k${i}`, 'v'])) }), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(store.createNode({ id: 'c7', hostname: 'h', groups: 'web' as unknown as string[] }), { code: 'ERR_BAD_REQUEST' });
    t.equal((await ids(store)).total, 3, 'refused creations wrote nothing');
  });

  t.test('an admin edit replaces name, tags and groups; filters follow; a cloud region is the provider\'s', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'm1', hostname: 'h1', tags: { env: 'prod' }, groups: ['web'] });
    const edited = await updateNode(store, 'm1', { name: 'front', tags: { env: 'dev', owner: 'ops' }, groups: ['api'], state: 'stopped' }, '2024-05-01T09:00:00Z');
    t.match(edited, { name: 'front', state: 'stopped', status: 'unreachable', updated_at: '2024-05-01T09:00:00.000Z' });
    t.same(edited!.tags, { env: 'dev', owner: 'ops' });
    t.same(await only(store, [{ key: 'tag:env', values: ['prod'] }]), []);
    t.same(await only(store, [{ key: 'tag:env', values: ['dev'] }, { key: 'group', values: ['api'] }]), ['m1']);
    t.same(await only(store, [{ key: 'group', values: ['web'] }]), []);
    t.equal(await updateNode(store, 'ghost', { name: 'x' }, '2024-05-01T09:00:00Z'), null);
    await store.createNode({ id: 'c1', hostname: 'h', source_id: 'i-1', region: 'r', account_id: 'a' });
    await t.rejects(updateNode(store, 'c1', { region: 'elsewhere' }, '2024-05-01T09:00:00Z'), { code: 'ERR_CONFLICT' });
    t.match(await updateNode(store, 'c1', { name: 'named' }, '2024-05-01T09:00:00Z'), { name: 'named', region: 'r' });
  });

  t.test('relays: registered with their certificate, flagged, filtered, and unflagged by an admin edit (migration 9)', async (t) => {
    const { store } = await setup(t, backend);
    const r = await store.createNode({ id: 'relay-1', hostname: 'relay-1.lan', certificate: PEM('R'), certificate_fingerprint: FP('r'), relay: true });
    t.match(r, { relay: true, accepted: 'accepted', certificate: PEM('R') });
    t.same(await store.getNode('relay-1'), r);
    await store.upsertFromInventory(inventory('agent-1'));
    t.match(await store.getNode('agent-1'), { relay: false }, 'agents are not relays');
    await store.createNode({ id: 'm1', hostname: 'h1' });
    // A relay has a certificate (its own key, for its token) but no agent: an agent on its host
    // is a node of its own. The list rows and the filter say the same.
    const hasAgent = async () => Object.fromEntries((await store.listNodes({ page: 1, per_page: 10, sort: 'id' })).data.map((n) => [n.id, n.has_agent]));
    t.same(await hasAgent(), { 'agent-1': true, m1: false, 'relay-1': false });
    t.same(await only(store, [{ key: 'has_agent', values: ['true'] }]), ['agent-1']);
    t.same((await only(store, [{ key: 'has_agent', values: ['false'] }])).sort(), ['m1', 'relay-1']);
    t.same((await only(store, [{ key: 'has_agent', values: ['true'], exclude: true }])).sort(), ['m1', 'relay-1']);
    t.same(await only(store, [{ key: 'has_agent', values: ['false'], exclude: true }]), ['agent-1']);
    t.same(await only(store, [{ key: 'has_agent', values: ['true', 'false'] }], { sort: 'id' }), ['agent-1', 'm1', 'relay-1']);
    t.same(await only(store, [{ key: 'relay', values: ['true'] }]), ['relay-1']);
    t.same(await only(store, [{ key: 'relay', values: ['true'] }], { sort: 'id' }), ['relay-1']);
    t.same((await only(store, [{ key: 'relay', values: ['true'], exclude: true }])).sort(), ['agent-1', 'm1']);
    await t.rejects(store.listNodes({ page: 1, per_page: 10, filters: [{ key: 'relay', values: ['yes'] }] }), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(store.createNode({ id: 'relay-2', hostname: 'h', relay: true }), { code: 'ERR_CERTIFICATE' }, 'a relay needs its certificate');
    await t.rejects(store.createNode({ id: 'relay-3', hostname: 'h', relay: 'yes' as unknown as boolean }), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(updateNode(store, 'm1', { relay: true }, '2024-05-01T09:00:00Z'), { code: 'ERR_CERTIFICATE' }, 'no certificate, no relay');
    await t.rejects(updateNode(store, 'm1', { relay: 1 as unknown as boolean }, '2024-05-01T09:00:00Z'), { code: 'ERR_BAD_REQUEST' });
    t.match(await updateNode(store, 'agent-1', { relay: true }, '2024-05-01T09:00:00Z'), { relay: true }, 'a node with a certificate may become a relay');
    t.match(await updateNode(store, 'relay-1', { relay: false }, '2024-05-01T09:00:00Z'), { relay: false, updated_at: '2024-05-01T09:00:00.000Z' });
    t.same(await only(store, [{ key: 'relay', values: ['true'] }]), ['agent-1']);
    t.same(await hasAgent(), { 'agent-1': false, m1: false, 'relay-1': true }, 'has_agent follows the flag both ways');
    t.same(await only(store, [{ key: 'has_agent', values: ['true'] }]), ['relay-1']);
    t.equal((await ids(store)).total, 3, 'refused creations wrote nothing');
  });

  t.test('a contact without inventory or run (a relay\'s): last contact, reachable, missing → running, in the history', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'relay-1', hostname: 'relay-1.lan', certificate: PEM('R'), certificate_fingerprint: FP('r'), relay: true });
    const created = (await store.getNode('relay-1'))!;
    t.match(created, { status: 'unknown', state: 'running', last_contact_at: null });
    t.match(await recordContact(store, 'relay-1', '2024-05-01T10:00:00Z', 'relay link'), {
      status: 'reachable', state: 'running', last_contact_at: '2024-05-01T10:00:00.000Z', updated_at: '2024-05-01T10:00:00.000Z',
    });
    t.match(await store.getNode('relay-1'), { status: 'reachable', last_contact_at: '2024-05-01T10:00:00.000Z' }, 'stored');
    // A later contact moves last_contact_at only; an older one changes nothing.
    t.match(await recordContact(store, 'relay-1', '2024-05-01T10:05:00Z'), { last_contact_at: '2024-05-01T10:05:00.000Z', updated_at: '2024-05-01T10:00:00.000Z' });
    t.match(await recordContact(store, 'relay-1', '2024-05-01T10:01:00Z'), { last_contact_at: '2024-05-01T10:05:00.000Z' });
    // The sweep's rules apply as to agents: a contact since `before` keeps it reachable.
    t.equal((await store.markUnreachable('2024-05-01T10:04:00Z', '2024-05-01T10:06:00Z', 100)).length, 0);
    t.equal((await store.markUnreachable('2024-05-01T10:20:00Z', '2024-05-01T10:20:00Z', 100)).length, 1);
    t.match(await recordContact(store, 'relay-1', '2024-05-01T10:21:00Z', 'relay request'), { status: 'reachable' });
    t.equal((await store.markMissing('2024-05-02T11:00:00Z', '2024-05-02T11:00:00Z', 100)).length, 1);
    t.match(await store.getNode('relay-1'), { state: 'missing', status: 'unreachable' });
    t.match(await recordContact(store, 'relay-1', '2024-05-02T12:00:00Z', 'relay token renewal'), {
      state: 'running', status: 'reachable', state_changed_at: '2024-05-02T12:00:00.000Z', updated_at: '2024-05-02T12:00:00.000Z',
    });
    // A state that is not live wins over the contact, as for runs.
    await setState(store, 'relay-1', 'stopped', '2024-05-02T13:00:00Z');
    t.match(await recordContact(store, 'relay-1', '2024-05-02T13:01:00Z'), { state: 'stopped', status: 'unreachable', last_contact_at: '2024-05-02T13:01:00.000Z' });
    t.equal(await recordContact(store, 'ghost', '2024-05-02T13:00:00Z'), null, 'an unknown node is not created');
    t.equal(await store.getNode('ghost'), null);
    await t.rejects(recordContact(store, 'relay-1', 'yesterday'), { code: 'ERR_BAD_REQUEST' });
    t.same((await history(store, 'relay-1')).slice(3), [
      '2024-05-01T10:00:00.000Z status unknown→reachable (relay link)',
      '2024-05-01T10:20:00.000Z status reachable→unreachable (missed runs)',
      '2024-05-01T10:21:00.000Z status unreachable→reachable (relay request)',
      '2024-05-02T11:00:00.000Z state running→missing (silence)',
      '2024-05-02T11:00:00.000Z status reachable→unreachable (silence)',
      '2024-05-02T12:00:00.000Z state missing→running (relay token renewal)',
      '2024-05-02T12:00:00.000Z status unreachable→reachable (relay token renewal)',
      '2024-05-02T13:00:00.000Z state running→stopped (admin)',
      '2024-05-02T13:00:00.000Z status reachable→unreachable (admin)',
    ]);
  });

  t.test('name and region filters: prefixes with *, exact otherwise, case-insensitive, values ORed, % and _ literal', async (t) => {
    const { store } = await setup(t, backend);
    await fleet(store);
    // Default order is by name in byte order: Web-1 < app-1 < db-1 < db_2 < web-2 < web-3.
    t.same(await only(store, []), ['a1', 'a5', 'a3', 'a4', 'a2', 'a6']);
    t.same(await only(store, [{ key: 'name', values: ['web*'] }]), ['a1', 'a2', 'a6']);
    t.same(await only(store, [{ key: 'name', values: ['WEB-2'] }]), ['a2'], 'exact without *, any case');
    t.same(await only(store, [{ key: 'name', values: ['web'] }]), [], 'no * → not a prefix');
    t.same(await only(store, [{ key: 'name', values: ['db_*'] }]), ['a4'], '_ is a character, not a wildcard');
    t.same(await only(store, [{ key: 'name', values: ['db%'] }]), [], '% is a character, not a wildcard');
    t.same(await only(store, [{ key: 'name', values: ['db-1', 'db_2'] }]), ['a3', 'a4'], 'values of one key are ORed');
    t.same(await only(store, [{ key: 'name', values: ['db-1'] }, { key: 'name', values: ['db_2'] }]), ['a3', 'a4'], 'two filters on one key merge');
    t.same(await only(store, [{ key: 'hostname', values: ['*.eu'] }]), [], 'the * is only a suffix');
    t.same(await only(store, [{ key: 'hostname', values: ['web-1.eu'] }]), ['a1']);
    t.same(await only(store, [{ key: 'region', values: ['eu-*'] }]), ['a1', 'a2', 'a6']);
    t.same(await only(store, [{ key: 'region', values: ['eu-west-*', 'us-*'] }]), ['a1', 'a3', 'a6']);
    t.same(await only(store, [{ key: 'region', values: ['*'] }]), ['a1', 'a3', 'a2', 'a6'], 'a bare * is "has a region"');
    t.same(await only(store, [{ key: 'region', values: ['eu-*'], exclude: true }]), ['a5', 'a3', 'a4'], 'exclude keeps nodes without a region');
    t.same(await only(store, [{ key: 'name', values: ['web*'], exclude: true }, { key: 'region', values: ['us-*'], exclude: true }]), ['a5', 'a4'], 'keys are ANDed');
  });

  t.test('case folding is ASCII only, the same in both backends', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'u1', hostname: 'emile', name: 'Émile-DB' });
    t.same(await only(store, [{ key: 'name', values: ['émile-db'] }]), [], 'É and é differ');
    t.same(await only(store, [{ key: 'name', values: ['Émile-db'] }]), ['u1'], 'D and d do not');
    t.same(await only(store, [{ key: 'name', values: ['ÉMI*'] }]), ['u1'], 'ASCII letters fold after É');
    t.same(await only(store, [{ key: 'name', values: ['éMI*'] }]), []);
    t.same(await only(store, [{ key: 'name', values: ['Émi*'] }]), ['u1']);
  });

  t.test('tag, group, state, status, manager and acceptance filters; tag values match literally', async (t) => {
    const { store } = await setup(t, backend);
    await fleet(store);
    t.same(await only(store, [{ key: 'tag:env', values: ['prod'] }]), ['a1', 'a3']);
    t.same(await only(store, [{ key: 'tag:env', values: ['prod', 'staging'] }]), ['a1', 'a3', 'a2']);
    t.same(await only(store, [{ key: 'tag:team', values: ["o'brien"] }]), ['a1'], "a ' is a character");
    t.same(await only(store, [{ key: 'tag:discount', values: ['50%'] }]), ['a3'], 'a % is a character');
    t.same(await only(store, [{ key: 'tag:env', values: ['100%'] }]), ['a4']);
    t.same(await only(store, [{ key: 'tag:env', values: ['1%'] }]), [], 'not a LIKE pattern');
    t.same(await only(store, [{ key: 'tag:env', values: ['prod%'] }]), []);
    t.same(await only(store, [{ key: 'tag:env', values: ['prod'] }, { key: 'region', values: ['eu-*'] }]), ['a1']);
    t.same(await only(store, [{ key: 'tag:env', values: ['prod'] }, { key: 'tag:team', values: ["o'brien"] }]), ['a1'], 'two tags ANDed');
    t.same(await only(store, [{ key: 'tag:env', values: ['prod'], exclude: true }]), ['a5', 'a4', 'a2', 'a6']);
    t.same(await only(store, [{ key: 'group', values: ['web'] }]), ['a1', 'a2']);
    t.same(await only(store, [{ key: 'group', values: ['db', 'eu'] }]), ['a3', 'a2']);
    t.same(await only(store, [{ key: 'group', values: ['web'], exclude: true }]), ['a5', 'a3', 'a4', 'a6']);
    t.same(await only(store, [{ key: 'state', values: ['stopped'] }]), ['a6']);
    t.same(await only(store, [{ key: 'state', values: ['stopped'], exclude: true }]), ['a1', 'a5', 'a3', 'a4', 'a2']);
    t.same(await only(store, [{ key: 'status', values: ['unknown', 'unreachable'] }]), ['a4', 'a6']);
    t.same(await only(store, [{ key: 'manager', values: ['agent'] }]), ['a5']);
    t.same(await only(store, [{ key: 'accepted', values: ['pending'] }]), ['a5']);
    t.same(await only(store, [], { accepted: 'accepted', status: 'reachable' }), ['a1', 'a3', 'a2'], 'the shorthands are filters too');
  });

  t.test('last_run ranges: open ends, ORed ranges, and exclude keeps nodes that never ran', async (t) => {
    const { store } = await setup(t, backend);
    await fleet(store);
    t.same(await only(store, [{ key: 'last_run', values: ['2024-05-02T00:00:00Z..'] }]), ['a3', 'a2']);
    t.same(await only(store, [{ key: 'last_run', values: ['..2024-05-02T00:00:00Z'] }]), ['a1']);
    t.same(await only(store, [{ key: 'last_run', values: ['2024-05-01T00:00:00Z..2024-05-02T10:00:00Z'] }]), ['a1'], 'the end is exclusive');
    t.same(await only(store, [{ key: 'last_run', values: ['..2024-05-01T12:00:01+02:00', '2024-05-03T00:00:00Z..'] }]), ['a1', 'a3']);
    t.same(await only(store, [{ key: 'last_run', values: ['2024-05-02T00:00:00Z..'], exclude: true }]), ['a1', 'a5', 'a4', 'a6']);
    await t.rejects(store.listNodes({ page: 1, per_page: 10, filters: [{ key: 'last_run', values: ['yesterday'] }] }), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(store.listNodes({ page: 1, per_page: 10, filters: [{ key: 'last_run', values: ['..'] }] }), { code: 'ERR_BAD_REQUEST' });
  });

  t.test('include and exclude on one key is ERR_FILTER_CONFLICT; malformed filters are ERR_BAD_REQUEST', async (t) => {
    const { store } = await setup(t, backend);
    await fleet(store);
    const list = (filters: NodeFilter[]) => store.listNodes({ page: 1, per_page: 10, filters });
    await t.rejects(list([{ key: 'name', values: ['web*'] }, { key: 'name', values: ['db*'], exclude: true }]), { code: 'ERR_FILTER_CONFLICT' });
    await t.rejects(list([{ key: 'tag:env', values: ['prod'], exclude: true }, { key: 'tag:env', values: ['dev'] }]), { code: 'ERR_FILTER_CONFLICT' });
    t.same((await list([{ key: 'tag:env', values: ['prod'] }, { key: 'tag:team', values: ["o'brien"], exclude: true }])).data.map((n) => n.id), ['a3'], 'different tag keys are different keys');
    for (const f of [
      { key: 'colour', values: ['red'] }, { key: 'name', values: [] }, { key: 'status', values: ['asleep'] },
      { key: 'accepted', values: ['maybe'] }, { key: 'tag:', values: ['x'] }, { key: 'name', values: ['a'], exclude: 'yes' },
      { key: 'name', values: ['x'.repeat(513)] }, { key: 'name', values: Array.from({ length: 101 }, (_, i) => `n${i}`) },
      { key: 'name', values: ['a\u0000'] },
    ]) {
      await t.rejects(list([f as NodeFilter]), { code: 'ERR_BAD_REQUEST' }, JSON.stringify(f).slice(0, 60));
    }
    await t.rejects(store.listNodes({ page: 1, per_page: 10, sort: 'colour' as 'name' }), { code: 'ERR_BAD_REQUEST' });
    await t.rejects(store.listNodes({ page: 1, per_page: 10, order: 'up' as 'asc' }), { code: 'ERR_BAD_REQUEST' });
  });

  t.test('sorting by any field keeps empty values last and breaks ties by id; totals by status follow the filters', async (t) => {
    const { store } = await setup(t, backend);
    await fleet(store);
    t.same(await only(store, [], { sort: 'region' }), ['a2', 'a1', 'a6', 'a3', 'a4', 'a5']);
    t.same(await only(store, [], { sort: 'region', order: 'desc' }), ['a3', 'a6', 'a1', 'a2', 'a5', 'a4']);
    t.same(await only(store, [], { sort: 'last_run_at', order: 'desc' }), ['a3', 'a2', 'a1', 'a6', 'a5', 'a4']);
    t.same(await only(store, [], { sort: 'status' }), ['a1', 'a2', 'a3', 'a5', 'a4', 'a6']);
    t.same(await only(store, [], { sort: 'id', order: 'desc' }), ['a6', 'a5', 'a4', 'a3', 'a2', 'a1']);
    t.same(await only(store, [], { sort: 'manager' }), ['a5', 'a1', 'a2', 'a3', 'a4', 'a6']);
    t.same(await ids(store, { per_page: 2, page: 2 }), { ids: ['a3', 'a4'], total: 6, totals: { unknown: 1, reachable: 4, unreachable: 1 } });
    t.same(await ids(store, { per_page: 2, page: 9 }), { ids: [], total: 6, totals: { unknown: 1, reachable: 4, unreachable: 1 } }, 'past the end');
    t.same(await ids(store, { filters: [{ key: 'state', values: ['running'] }], per_page: 1 }),
      { ids: ['a1'], total: 5, totals: { unknown: 1, reachable: 4, unreachable: 0 } });
    t.same(await ids(store, { filters: [{ key: 'name', values: ['nothing*'] }] }), { ids: [], total: 0, totals: { unknown: 0, reachable: 0, unreachable: 0 } });
  });

  t.test('the sweep: missing nodes of any acceptance, never-contacted nodes untouched, purge after retention', async (t) => {
    const { store } = await setup(t, backend);
    await store.upsertFromInventory(inventory('p1', { received_at: '2024-05-01T10:00:00Z' })); // pending
    await store.upsertFromInventory(inventory('p2', { received_at: '2024-05-05T10:00:00Z' })); // recent
    await store.createNode({ id: 'm1', hostname: 'never' }); // never contacted
    await store.createNode({ id: 't1', hostname: 'gone' });
    await setState(store, 't1', 'terminated', '2024-05-02T00:00:00Z');
    t.equal((await store.markMissing('2024-05-04T00:00:00Z', '2024-05-04T00:00:00Z', 100)).length, 1);
    t.match(await store.getNode('p1'), { state: 'missing', status: 'unreachable', accepted: 'pending' });
    t.match(await store.getNode('p2'), { state: 'running', status: 'reachable' });
    t.match(await store.getNode('m1'), { state: 'running', status: 'unknown' });
    t.same((await store.counts()).by_state, { missing: 1, running: 2, terminated: 1 });
    t.equal((await store.purgeNodes('2024-05-03T00:00:00Z', 100)).length, 1, 'terminated before the cut-off');
    t.equal(await store.getNode('t1'), null);
    t.equal((await store.purgeNodes('2024-05-03T00:00:00Z', 100)).length, 0, 'p1 went missing after it');
    t.equal((await store.purgeNodes('2024-06-04T00:00:00Z', 100)).length, 1);
    t.equal(await store.getNode('p1'), null);
    const counts = await store.counts();
    t.same(counts, { by_status: { reachable: 1, unknown: 1 }, by_state: { running: 2 }, by_acceptance: { accepted: 1, pending: 1 }, purged_nodes: 2, deleted_runs: 0 });
  });

  t.test('sweep batches are bounded, and two stores sweeping at once mark each node once', async (t) => {
    const { db, store: a } = await setup(t, backend);
    const b = await db.open();
    for (let i = 0; i < 30; i++) await a.upsertFromInventory(inventory(`n${String(i).padStart(2, '0')}`, { received_at: '2024-05-01T10:00:00Z' }));
    t.equal((await a.markUnreachable('2024-05-01T11:00:00Z', '2024-05-01T11:00:00Z', 7)).length, 7, 'at most the limit');
    const sweep = async (s: Store) => {
      let n = 0;
      for (let round = 0; round < 20; round++) {
        const k = (await s.markMissing('2024-05-02T00:00:00Z', '2024-05-02T00:00:00Z', 4)).length;
        n += k;
        if (k === 0) break;
      }
      return n;
    };
    const [x, y] = await Promise.all([sweep(a), sweep(b)]);
    t.equal(x + y, 30, 'every node marked exactly once');
    let states = 0;
    for (let i = 0; i < 30; i++) {
      states += (await a.getHistory(`n${String(i).padStart(2, '0')}`, 1, 20)).data.filter((h) => h.to === 'missing').length;
    }
    t.equal(states, 30, 'one history entry per node');
  });

  t.test('run retention deletes runs started before the cut-off, whole days or rows, and counts them', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'n1', hostname: 'h' });
    await store.createNode({ id: 'n2', hostname: 'h' });
    // Day storage for 2 to 4 May; the other days fall outside it (Postgres: the default partition).
    await store.prepareRunStorage(new Date('2024-05-02T06:00:00Z'));
    await store.prepareRunStorage(new Date('2024-05-02T07:00:00Z'));
    const starts = ['2024-05-01T10:00:00Z', '2024-05-02T00:00:00Z', '2024-05-02T23:59:59.999Z', '2024-05-03T00:00:00Z',
      '2024-05-04T12:00:00+02:00', '2024-05-09T00:00:00Z', '2030-01-01T00:00:00Z'];
    for (const s of starts) await store.insertRun(run('n1', s));
    await store.insertRun(run('n2', '2024-05-02T08:00:00Z'));
    let deleted = 0;
    for (let i = 0; i < 10; i++) {
      const n = await store.deleteRunsBefore('2024-05-03T00:00:00.000Z', 2);
      deleted += n;
      if (n < 2) break;
    }
    t.equal(deleted, 4);
    t.same((await store.listRuns('n1', 1, 20)).data.map((r) => r.started_at).reverse(),
      ['2024-05-03T00:00:00Z', '2024-05-04T12:00:00+02:00', '2024-05-09T00:00:00Z', '2030-01-01T00:00:00Z']);
    t.equal((await store.listRuns('n2', 1, 20)).total, 0);
    t.equal((await store.counts()).deleted_runs, 4);
    t.equal(await store.deleteRunsBefore('2024-05-03T00:00:00.000Z', 2), 0, 'nothing left to do');
    // New runs of a dropped day are stored again (Postgres: in the default partition).
    t.equal((await store.insertRun(run('n2', '2024-05-02T09:00:00Z'))).inserted, true);
    // The node's last run and its compliance do not depend on the run rows.
    t.match(await store.getNode('n2'), { last_run_at: '2024-05-02T09:00:00.000Z' });
  });

  t.test('listRuns takes a time range on the start, with paging', async (t) => {
    const { store } = await setup(t, backend);
    await store.createNode({ id: 'n1', hostname: 'h' });
    for (let h = 0; h < 6; h++) await store.insertRun(run('n1', `2024-05-01T0${h}:00:00Z`));
    const range = await store.listRuns('n1', 1, 2, { from: '2024-05-01T01:00:00Z', to: '2024-05-01T06:00:00+02:00' });
    t.equal(range.total, 3);
    t.same(range.data.map((r) => r.started_at), ['2024-05-01T03:00:00Z', '2024-05-01T02:00:00Z']);
    t.same((await store.listRuns('n1', 1, 10, { from: '2024-05-01T04:00:00Z' })).data.map((r) => r.started_at), ['2024-05-01T05:00:00Z', '2024-05-01T04:00:00Z']);
    t.same((await store.listRuns('n1', 2, 2, { to: '2024-05-01T03:00:00Z' })).data.map((r) => r.started_at), ['2024-05-01T00:00:00Z']);
    await t.rejects(store.listRuns('n1', 1, 10, { from: 'monday' }), { code: 'ERR_BAD_REQUEST' });
  });

  t.test('history older than its retention is pruned in batches', async (t) => {
    const { store } = await setup(t, backend);
    await store.upsertFromInventory(inventory('n1', { received_at: '2024-05-01T10:00:00Z' }));
    await setAcceptance(store, 'n1', 'accepted', '2024-05-03T10:00:00Z');
    t.equal(await store.pruneHistory('2024-05-02T00:00:00Z', 2), 2);
    t.equal(await store.pruneHistory('2024-05-02T00:00:00Z', 2), 1);
    t.equal(await store.pruneHistory('2024-05-02T00:00:00Z', 2), 0);
    t.same((await store.getHistory('n1', 1, 10)).data.map((h) => h.to), ['accepted']);
  });

  t.test('a version 1 database migrates forward with its nodes and runs', async (t) => {
    const db = await backend.fresh(t);
    const blob = db.dialect === 'sqlite' ? "X'6c6f67'" : "'\\x6c6f67'::bytea";
    const v1 = db.dialect === 'sqlite'
      ? 'CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT;'
      : 'CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());';
    await db.exec(`${v1}
      ${MIGRATIONS[0]![db.dialect]}
      INSERT INTO schema_version (version, applied_at) VALUES (1, '2024-01-01T00:00:00Z');
      INSERT INTO nodes (id, hostname, status, state, accepted, certificate, created_at, updated_at, last_inventory_at, last_run_at)
        VALUES ('old', 'old.example.com', 'reachable', 'running', 'accepted', 'PINNED PEM', '2024-01-01T00:00:00.000Z',
          '2024-01-02T00:00:00.000Z', '2024-01-01T00:00:00.000Z', '2024-01-02T00:00:00.000Z'),
        ('hand', 'hand.example.com', 'unknown', 'running', 'accepted', NULL, '2024-01-01T00:00:00.000Z',
          '2024-01-01T00:00:00.000Z', NULL, NULL);
      INSERT INTO runs (id, node_id, started_at, started_at_utc, config_id, complete, report_count, counts, outcomes,
          file_name, sha256, received_at, log_compressed)
        VALUES (41, 'old', '2024-01-02T00:00:00Z', '2024-01-02T00:00:00.000Z', 'c', ${db.dialect === 'sqlite' ? 1 : 'true'}, 1, '{}', '[]',
          'f', 's', '2024-01-02T00:05:00.000Z', ${blob});`);
    const store = await db.open({ now: () => new Date('2024-05-01T08:00:00Z') });
    t.match(await store.getNode('old'), {
      certificate: 'PINNED PEM', name: 'old.example.com', manager: 'agent', tags: {}, groups: [], state_changed_at: '2024-01-02T00:00:00.000Z',
      last_contact_at: '2024-01-02T00:05:00.000Z', status: 'reachable', relay: false,
    });
    t.match(await store.getNode('hand'), { manager: 'manual', last_contact_at: null, certificate: null });
    t.same((await store.listRuns('old', 1, 10)).data.map((r) => r.id), [41]);
    t.same(await store.getRunLog(41), Buffer.from('log'));
    const next = await store.insertRun(run('old', '2024-05-01T00:00:00Z'));
    t.ok(next.id > 41, 'run ids carry on after the migrated ones');
    t.equal((await store.markUnreachable('2024-03-01T00:00:00Z', '2024-03-01T00:00:00Z', 10)).length, 0, 'contact is measured from the last run received');
  });

  t.test('a pending node keeps its first certificate; another one is a conflict the admin settles at acceptance', async (t) => {
    // Another certificate for a pending node's id used to replace the first one (and the
    // hostname) silently, with no history: accepting then pinned the impostor's key.
    const { store } = await setup(t, backend);
    await store.upsertFromInventory(inventory('p1', { hostname: 'genuine', received_at: '2024-05-01T10:00:00Z' }));
    const other = await store.upsertFromInventory(inventory('p1', {
      hostname: 'impostor', certificate: PEM('B'), certificate_fingerprint: FP('b'), received_at: '2024-05-01T10:05:00Z',
      inventory: { node_id: 'p1', hostname: 'impostor' },
    }));
    t.match(other, { certificate: PEM('A'), certificate_fingerprint: FP('a'), hostname: 'genuine', conflict_fingerprint: FP('b'), conflict_certificate: PEM('B') });
    t.equal(other.conflict_at, '2024-05-01T10:05:00.000Z');
    t.equal(((await store.getInventory('p1'))!.inventory as { hostname: string }).hostname, 'genuine', 'the other key\'s inventory is not stored');
    t.equal((await store.getNode('p1'))!.last_contact_at, '2024-05-01T10:00:00.000Z', 'nor is it a contact of the node');
    // The same conflicting certificate again records nothing new; the genuine node still refreshes.
    await store.upsertFromInventory(inventory('p1', { certificate: PEM('B'), certificate_fingerprint: FP('b'), received_at: '2024-05-01T10:06:00Z' }));
    await store.upsertFromInventory(inventory('p1', { hostname: 'genuine-2', received_at: '2024-05-01T10:07:00Z' }));
    t.match(await store.getNode('p1'), { hostname: 'genuine-2', conflict_fingerprint: FP('b'), certificate_fingerprint: FP('a') });
    const pending = (await store.listNodes({ page: 1, per_page: 10, filters: [{ key: 'accepted', values: ['pending'] }] })).data;
    t.match(pending, [{ id: 'p1', certificate_fingerprint: FP('a'), conflict_fingerprint: FP('b') }], 'the pending list shows both');

    await t.rejects(setAcceptance(store, 'p1', 'accepted', '2024-05-01T11:00:00Z'), { code: 'ERR_CERTIFICATE_CONFLICT' });
    await t.rejects(setAcceptance(store, 'p1', 'accepted', '2024-05-01T11:00:00Z', 'admin', FP('c')), { code: 'ERR_CERTIFICATE' });
    t.match(await store.getNode('p1'), { accepted: 'pending', conflict_fingerprint: FP('b') }, 'a refused choice changes nothing');
    const accepted = await setAcceptance(store, 'p1', 'accepted', '2024-05-01T11:00:00Z', 'admin', FP('B').toUpperCase());
    t.match(accepted, { accepted: 'accepted', certificate: PEM('B'), certificate_fingerprint: FP('b'), conflict_fingerprint: null, conflict_certificate: null, conflict_at: null });
    t.match(await store.getNode('p1'), { certificate: PEM('B'), conflict_fingerprint: null });
    const h = (await store.getHistory('p1', 1, 100)).data.filter((e) => e.field === 'certificate').reverse();
    t.match(h, [
      { at: '2024-05-01T10:05:00.000Z', from: FP('a'), to: FP('b'), cause: /^inventory: another certificate/ },
      { at: '2024-05-01T11:00:00.000Z', from: FP('a'), to: FP('b'), cause: 'admin: certificate chosen' },
    ]);

    // Keeping the first certificate; and without a conflict a wrong fingerprint is refused.
    await store.upsertFromInventory(inventory('p2'));
    await store.upsertFromInventory(inventory('p2', { certificate: PEM('C'), certificate_fingerprint: FP('c'), received_at: '2024-05-01T10:01:00Z' }));
    t.match(await setAcceptance(store, 'p2', 'accepted', '2024-05-01T11:00:00Z', 'admin', FP('a')), { certificate: PEM('A'), conflict_fingerprint: null });
    await store.upsertFromInventory(inventory('p3'));
    await t.rejects(setAcceptance(store, 'p3', 'accepted', '2024-05-01T11:00:00Z', 'admin', FP('c')), { code: 'ERR_CERTIFICATE' });
    t.equal((await setAcceptance(store, 'p3', 'accepted', '2024-05-01T11:00:00Z', 'admin', FP('a')))!.accepted, 'accepted');
    // An auto-accept rule never accepts a conflicting certificate.
    await store.upsertFromInventory(inventory('p4'));
    t.match(await store.upsertFromInventory(inventory('p4', { certificate: PEM('D'), certificate_fingerprint: FP('d'), auto_accept: 'rule', received_at: '2024-05-01T10:01:00Z' })),
      { accepted: 'pending', conflict_fingerprint: FP('d') });
  });

  t.test('migration 13 repairs nodes frozen by a run dated in the future', async (t) => {
    // A run dated years ahead used to stay the node's last run and compliance base for good.
    const db = await backend.fresh(t);
    const sq = db.dialect === 'sqlite';
    const blob = sq ? "X'6c6f67'" : "'\\x6c6f67'::bytea";
    const yes = sq ? 1 : 'true';
    const v = sq
      ? 'CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at TEXT NOT NULL) STRICT;'
      : 'CREATE TABLE schema_version (version integer PRIMARY KEY, applied_at timestamptz NOT NULL DEFAULT now());';
    const before = MIGRATIONS.filter((m) => m.version <= 12);
    const FUTURE = '2031-01-01T00:00:00.000Z';
    const run = (id: number, node: string, at: string, cfg: string) => `(${id}, '${node}', '${at}', '${at}', '${cfg}', ${yes}, 1, '{}', '[]', 'f${id}', 's', '${at}', ${blob})`;
    const base = (node: string, runId: number, at: string, cfg: string) =>
      `('${node}', ${runId}, '${at}', '${at}', '${cfg}', ${yes}, '${at}', '[]', 1, 0, 0, 0, 0, 0, 0)`;
    await db.exec(`${v}
      ${before.map((m) => m[db.dialect]).join('\n')}
      INSERT INTO schema_version (version, applied_at) VALUES ${before.map((m) => `(${m.version}, '2024-01-01T00:00:00Z')`).join(', ')};
      INSERT INTO nodes (id, hostname, name, status, state, accepted, created_at, updated_at, state_changed_at, last_inventory_at, last_run_at, last_config_id)
        VALUES ('fut', 'fut', 'fut', 'reachable', 'running', 'accepted', '2024-01-01T00:00:00.000Z', '2024-01-02T00:00:00.000Z', '2024-01-01T00:00:00.000Z', NULL, '${FUTURE}', 'cf'),
               ('ok', 'ok', 'ok', 'reachable', 'running', 'accepted', '2024-01-01T00:00:00.000Z', '2024-01-02T00:00:00.000Z', '2024-01-01T00:00:00.000Z', NULL, '2024-01-03T00:00:00.000Z', 'co');
      INSERT INTO runs (id, node_id, started_at, started_at_utc, config_id, complete, report_count, counts, outcomes, file_name, sha256, received_at, log_compressed)
        VALUES ${run(51, 'fut', '2024-01-02T00:00:00.000Z', 'cp')}, ${run(52, 'fut', FUTURE, 'cf')}, ${run(53, 'ok', '2024-01-03T00:00:00.000Z', 'co')};
      INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected, computed_at, outcomes,
          success, repaired, error, non_compliant, missing, unexpected, not_applicable)
        VALUES ${base('fut', 52, FUTURE, 'cf')}, ${base('ok', 53, '2024-01-03T00:00:00.000Z', 'co')};`);
    const store = await db.open();
    t.match(await store.getNode('fut'), { last_run_at: '2024-01-02T00:00:00.000Z', last_config_id: 'cp', clock_skew: null });
    t.same((await store.listRuns('fut', 1, 10)).data.map((r) => r.id), [51], 'the run from the future is gone');
    t.equal((await store.getComplianceBase('fut'))!.run, null, 'compliance waits for the next complete run');
    t.match(await store.getNode('ok'), { last_run_at: '2024-01-03T00:00:00.000Z', last_config_id: 'co' });
    t.equal((await store.getComplianceBase('ok'))!.run!.id, 53, 'other nodes are untouched');
    // The node moves again with its next genuine run.
    await store.insertRun(run_('fut', '2024-05-01T10:00:00Z', { config_id: 'cn' }));
    t.match(await store.getNode('fut'), { last_run_at: '2024-05-01T10:00:00.000Z', last_config_id: 'cn' });
    t.equal((await store.getComplianceBase('fut'))!.run!.config_id, 'cn');
  });

  t.test('a node\'s clock skew comes from its newest inventory or run, or a refused upload', async (t) => {
    const { store } = await setup(t, backend);
    t.match(await store.upsertFromInventory(inventory('n1', { received_at: '2024-05-01T10:00:00Z', sent_at: '2024-05-01T10:02:30+00:00' })),
      { clock_skew: 150, clock_skew_at: '2024-05-01T10:00:00.000Z' });
    await setAcceptance(store, 'n1', 'accepted', '2024-05-01T10:00:00Z');
    await store.insertRun(run_('n1', '2024-05-01T10:59:50Z', { received_at: '2024-05-01T11:00:00Z' }));
    t.match(await store.getNode('n1'), { clock_skew: -10, clock_skew_at: '2024-05-01T11:00:00.000Z' });
    await store.insertRun(run_('n1', '2024-04-01T00:00:00Z', { received_at: '2024-05-01T11:05:00Z' }));
    t.equal((await store.getNode('n1'))!.clock_skew, -10, 'a back-filled older run is no clock sample');
    t.equal(await store.recordClockSkew('n1', 94_608_000, '2024-05-01T11:10:00Z'), true);
    t.match(await store.getNode('n1'), { clock_skew: 94_608_000, clock_skew_at: '2024-05-01T11:10:00.000Z' });
    t.equal(await store.recordClockSkew('ghost', 1, '2024-05-01T11:10:00Z'), false);
    t.equal((await store.listNodes({ page: 1, per_page: 10 })).data[0]!.clock_skew, 94_608_000, 'lists show it too');
  });

  complianceSuite(t, backend);
}

/**
 * A hand-built scenario (the numbers are worked out in the comments) checked node by node,
 * globally, per rule and per directive.
 */
