/**
 * Migration 24 and the policy state it keeps, on SQLite and PostgreSQL: node properties written
 * as text by an older server read back as the same strings and filter as before (numbers in them
 * now also ordered), and the kept sealed values and node problems (policy_seals, policy_problems)
 * written, replaced, dropped, skipped for unknown nodes and gone with their node; a node's own
 * secret properties kept beside its plain ones, out of the filters' leaves.
 */
import t, { type Test } from 'tap';
import { evaluateFilter, parseFilter, type FilterSubject } from '@capstan/shared';
import type { Store } from '@capstan/server/store/index';
import { inventory, type Backend } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { UNDO_24, UNDO_25, UNDO_26, UNDO_27, UNDO_28, UNDO_29, UNDO_30, UNDO_31, UNDO_32, UNDO_33, UNDO_34, UNDO_35, UNDO_36, UNDO_37, UNDO_38, UNDO_39, UNDO_40, UNDO_41, UNDO_42 } from '../helpers/old-schema.js';

const OLD: Record<string, Record<string, string>> = {
  n1: { owner: 'alice', size: '12', 'env.name': 'prod', neg: '-3.5' },
  n2: { owner: 'bob', size: '7', odd: '1.', zero: '007' },
  n3: {},
};
const select = async (store: Store, q: string) => (await store.listNodeIds([{ key: 'q', values: [q] }])).sort();

/** What a filter sees of a node with only these properties. */
const subject = (id: string, properties: Record<string, unknown>): FilterSubject => ({
  id, hostname: id, fqdn: null, os_name: null, os_version: null, os_kernel: null, arch: null, cpus: null, memory: null, addresses: [], packages: {},
  facts: {}, properties, tags: {}, state: 'enabled', status: 'ok', manager: 'agent', accepted: 'accepted', groups: [], last_run_at: null, last_inventory_at: null,
});

function suite(t: Test, backend: Backend): void {
  t.test('string properties of a database before migration 24 read and filter as before', async (t) => {
    const db = await backend.fresh(t);
    let store = await db.open();
    for (const id of Object.keys(OLD)) await store.upsertFromInventory(inventory(id));
    await store.close();
    // The rows as the server of version 23 wrote them: text values.
    const quote = (s: string) => `'${s.replace(/'/g, "''")}'`;
    const rows = Object.entries(OLD).flatMap(([id, p]) => Object.entries(p).map(([k, v]) => `(${quote(id)}, ${quote(k)}, ${quote(v)})`));
    await db.exec(`${UNDO_42[db.dialect] + UNDO_41[db.dialect] + UNDO_40[db.dialect] + UNDO_39[db.dialect] + UNDO_38[db.dialect] + UNDO_37[db.dialect] + UNDO_36[db.dialect]} ${UNDO_35[db.dialect]} ${UNDO_34[db.dialect]} ${UNDO_33[db.dialect]} ${UNDO_32[db.dialect]} ${UNDO_31[db.dialect]} ${UNDO_30[db.dialect]} ${UNDO_29[db.dialect]} ${UNDO_28[db.dialect]} ${UNDO_27[db.dialect]} ${UNDO_26[db.dialect]} ${UNDO_25[db.dialect]} ${UNDO_24[db.dialect]} INSERT INTO node_properties (node_id, key, value) VALUES ${rows.join(', ')};`);
    store = await db.open();
    for (const [id, p] of Object.entries(OLD)) t.same(await store.getProperties(id), p, `${id}: the same strings`);
    const subjects = Object.entries(OLD).map(([id, p]) => subject(id, p));
    for (const q of ['property:owner = alice', 'property:owner != alice', 'property:owner', 'property:env.name = prod', 'property:size = 12',
      'property:size > 8', 'property:size <= 7', 'property:neg < -3', 'property:odd > 0', 'property:zero = 7', 'property:zero >= 7', 'not property:size']) {
      const want = subjects.filter((s) => evaluateFilter(parseFilter(q), s, new Date())).map((s) => s.id).sort();
      t.same(await select(store, q), want, `${q}: ${JSON.stringify(want)}`);
    }
    t.same(await select(store, 'property:size > 8'), ['n1'], 'a number in a string is ordered as one');
    // Written again by today's server: JSON values.
    t.same(await store.setProperties('n2', { owner: 'bob', size: 7, site: { room: 'R2' } }), { owner: 'bob', size: 7, site: { room: 'R2' } });
    t.same(await select(store, 'property:size = 7 and property:site.room = R2'), ['n2']);
  });

  t.test('kept sealed values and problems', async (t) => {
    const db = await backend.fresh(t);
    const store = await db.open();
    for (const id of ['a', 'b']) await store.upsertFromInventory(inventory(id));
    const sealed = (x: string) => JSON.stringify({ v: 1, alg: 'RSA-OAEP-256+A256GCM', key: x });
    await store.putPolicyState({
      seals: [{ node_id: 'a', name: 'pw', digest: 'd1', sealed: sealed('1') }, { node_id: 'a', name: 'tok', digest: 'd2', sealed: sealed('2') },
        { node_id: 'b', name: 'pw', digest: 'd3', sealed: sealed('3') }, { node_id: 'gone', name: 'pw', digest: 'd4', sealed: sealed('4') }],
      problems: [{ node_id: 'a', at: '2026-12-01T10:00:00Z', problem: { code: 'ERR_PROPERTY_CONFLICT', message: 'm', conflicts: [{ path: ['port'], priority: 0, groups: [{ id: 'g', value: 80 }] }] } },
        { node_id: 'gone', at: '2026-12-01T10:00:00Z', problem: { code: 'ERR_TEMPLATE', message: 'x' } }],
    });
    t.same((await store.policySeals(['a', 'b', 'gone'])).map((s) => [s.node_id, s.name, s.digest, s.sealed]),
      [['a', 'pw', 'd1', sealed('1')], ['a', 'tok', 'd2', sealed('2')], ['b', 'pw', 'd3', sealed('3')]], 'an unknown node\'s seal is skipped');
    t.same(await store.policyProblems(null), [{ node_id: 'a', at: '2026-12-01T10:00:00.000Z', problem: { code: 'ERR_PROPERTY_CONFLICT', message: 'm', conflicts: [{ path: ['port'], priority: 0, groups: [{ id: 'g', value: 80 }] }] } }]);
    // Replaced, dropped, cleared.
    await store.putPolicyState({ seals: [{ node_id: 'a', name: 'pw', digest: 'd5', sealed: sealed('5') }], dropSeals: [{ node_id: 'a', name: 'tok' }],
      problems: [{ node_id: 'b', at: '2026-12-01T11:00:00Z', problem: { code: 'ERR_SECRET', message: 'no certificate' } }], clearProblems: ['a'] });
    t.same((await store.policySeals(['a'])).map((s) => [s.name, s.digest]), [['pw', 'd5']]);
    t.same((await store.policyProblems(['a', 'b'])).map((p) => [p.node_id, p.problem.code]), [['b', 'ERR_SECRET']]);
    t.same(await store.policyProblems(['a']), []);
    await t.rejects(store.putPolicyState({ problems: [{ node_id: 'a', at: '2026-12-01T11:00:00Z', problem: { code: 'X', message: 'nul\u0000' } }] }), { code: 'ERR_BAD_REQUEST' });
    t.same(await store.policySeals(['a\u0000']), [], 'a name with NUL finds nothing');
    await store.deleteNode('b');
    t.same(await store.policySeals(['b']), [], 'gone with the node');
    t.same(await store.policyProblems(null), [], 'its problem too');
  });

  t.test('a node\'s secret properties: kept beside its plain ones, never among its leaves, named only in a listing', async (t) => {
    const db = await backend.fresh(t);
    const store = await db.open();
    for (const id of ['a', 'b', 'c']) await store.upsertFromInventory(inventory(id));
    const PW = 'pw-\u00e9t\u00e9 "quoted" {not json}';
    t.same(await store.setProperties('a', { owner: 'alice', site: { room: 'R1' } }, { pw: PW, token: 't0k' }), { owner: 'alice', site: { room: 'R1' } }, 'the plain ones answered');
    t.same(await store.getProperties('a'), { owner: 'alice', site: { room: 'R1' } }, 'the plain read leaves the secrets out');
    t.same(await store.getNodeLevel('a'), { properties: { owner: 'alice', site: { room: 'R1' } }, secrets: { pw: PW, token: 't0k' } });
    t.same(await select(store, 'property:pw'), [], 'a filter does not see a secret');
    t.same(await select(store, 'property:site.room = R1'), ['a']);
    t.same((await store.policyNodeInputs(['a'], {})).get('a'), { hostname: '', relay: '', certificate: null, properties: { owner: 'alice', site: { room: 'R1' } }, secrets: { pw: PW, token: 't0k' } });
    // A plain write keeps the secrets it does not name, and replaces the one it names.
    t.same(await store.setProperties('a', { owner: 'bob', token: 'now-plain' }), { owner: 'bob', token: 'now-plain' });
    t.same(await store.getNodeLevel('a'), { properties: { owner: 'bob', token: 'now-plain' }, secrets: { pw: PW } });
    t.same(await select(store, 'property:token = now-plain'), ['a']);
    await store.setProperties('b', {}, { only: 'x' });
    t.same(await store.getNodeLevel('b'), { properties: {}, secrets: { only: 'x' } });
    t.same(await store.getNodeLevel('c'), { properties: {}, secrets: {} });
    t.equal(await store.getNodeLevel('ghost'), null);
    t.same(await store.listNodeProperties(1, 10), { data: [{ node_id: 'a', properties: { owner: 'bob', token: 'now-plain' }, secrets: ['pw'] }, { node_id: 'b', properties: {}, secrets: ['only'] }], total: 2 });
    t.same((await store.listNodeProperties(2, 1)).data.map((r) => r.node_id), ['b'], 'paged by node');
    await t.rejects(store.setProperties('a', { pw: 1 }, { pw: 'x' }), { code: 'ERR_BAD_REQUEST', details: { field: 'properties.pw' } }, 'a name both plain and secret');
    await t.rejects(store.setProperties('a', {}, { pw: 'x'.repeat(64 * 1024 + 1) }), { code: 'ERR_BAD_REQUEST', details: { field: 'properties.pw.value' } }, 'a secret over 64 KiB');
    await t.rejects(store.setProperties('a', {}, { pw: 'a\u0000b' }), { code: 'ERR_BAD_REQUEST' }, 'NUL in a secret');
    t.same(await store.getNodeLevel('a'), { properties: { owner: 'bob', token: 'now-plain' }, secrets: { pw: PW } }, 'a refused write changes nothing');
    // Replaced whole when secrets are given; gone with the node.
    await store.setProperties('a', { owner: 'bob' }, {});
    t.same(await store.getNodeLevel('a'), { properties: { owner: 'bob' }, secrets: {} });
    await store.deleteNode('b');
    t.same((await store.listNodeProperties(1, 10)).data.map((r) => r.node_id), ['a']);
  });
}

t.test('sqlite', async (t) => suite(t, sqliteBackend));
if (await postgresOrSkipFile(t)) t.test('postgres', async (t) => suite(t, postgresBackend('capstan_pstate')));
