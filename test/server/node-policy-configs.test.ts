/**
 * PostgreSQL keeps each node's policy config id in `node_policy_configs` (migration 42), not in
 * its `nodes` row. A generation's batch moving 200 nodes' config ids writes no new version of
 * their node rows, and the config ids' own rows keep to their pages (HOT updates); the id reads
 * back everywhere a node is read (the node, its compliance, the node list), goes with its node,
 * and a version 41 database keeps its nodes' config ids through the upgrade.
 */
import t from 'tap';
import type { PolicyWrite } from '@capstan/server/store/index';
import { inventory, setup } from './store-suite.js';
import { postgresBackend } from './backends.js';
import { pgAdmin, postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { UNDO_42 } from '../helpers/old-schema.js';

const AT = '2024-05-01T09:00:00.000Z';
const IDS = Array.from({ length: 200 }, (_, i) => `p${String(i).padStart(3, '0')}`);
const expected = [{ rule_id: 'r1', directive_id: 'd1', component: 'File' }];
const writes = (config: (id: string) => string): PolicyWrite[] =>
  IDS.map((id) => ({ bundle: { node_id: id, config_id: config(id), generated_at: AT, bundle: '{}' }, expected }));

if (await postgresOrSkipFile(t)) {
  const backend = postgresBackend('capstan_npc');

  t.test('a batch moving config ids writes no node row, and its own rows stay on their pages', async (t) => {
    const { db, store } = await setup(t, backend);
    for (const id of IDS) await store.upsertFromInventory(inventory(id, { received_at: AT }));
    t.equal(await store.putPolicies(writes((id) => `cfg-${id}-1`)), IDS.length);
    const versions = async () => db.rows!('SELECT n.id, n.xmin::text AS v, c.ctid::text AS at FROM nodes n JOIN node_policy_configs c ON c.node_id = n.id ORDER BY n.id');
    const before = await versions();
    t.equal(before.length, IDS.length, 'every node has its config id row');
    t.equal(await store.putPolicies(writes((id) => `cfg-${id}-2`)), IDS.length);
    const after = await versions();
    t.same(after.map((r) => r.v), before.map((r) => r.v), 'no node row rewritten');
    const page = (ctid: unknown) => String(ctid).slice(1).split(',')[0];
    const kept = after.filter((r, i) => page(r.at) === page(before[i]!.at)).length;
    t.ok(kept >= IDS.length * 0.9, `config id rows kept to their pages (${kept} of ${IDS.length})`);
    t.equal((await store.getNode('p007'))!.policy_config_id, 'cfg-p007-2', 'the node reads its config id');
    t.equal((await store.getComplianceBase('p007'))?.policy_config_id ?? null, 'cfg-p007-2', 'so does its compliance');
    // The same config ids again: nothing moves.
    t.equal(await store.putPolicies(writes((id) => `cfg-${id}-2`)), IDS.length);
    t.same(await versions(), after, 'the same config ids write nothing');
    t.ok(await store.deleteNode('p007', AT));
    t.same(await db.rows!("SELECT node_id FROM node_policy_configs WHERE node_id = 'p007'"), [], 'a deleted node takes its config id with it');
    const cols = await db.rows!("SELECT column_name FROM information_schema.columns WHERE table_schema = current_schema() AND table_name = 'nodes' AND column_name = 'policy_config_id'");
    t.same(cols, [], 'nodes has no such column');
  });

  t.test('the node list and a node written whole keep the config id', async (t) => {
    const { store } = await setup(t, backend);
    for (const id of ['a1', 'a2']) {
      await store.upsertFromInventory(inventory(id, { received_at: AT }));
      await setAcceptance(store, id, 'accepted', AT);
    }
    await store.setExpectations('a1', 'cfg-a1', expected, AT);
    // A node's row written whole (a new inventory) leaves its config id as it was.
    await store.upsertFromInventory(inventory('a1', { received_at: '2024-05-01T10:00:00.000Z', hostname: 'renamed' }));
    t.equal((await store.getNode('a1'))!.policy_config_id, 'cfg-a1');
    const page = await store.listNodes({ page: 1, per_page: 10, sort: 'name' });
    t.same(page.data.map((n) => [n.id, n.policy_config_id]).sort(), [['a1', 'cfg-a1'], ['a2', null]]);
  });

  t.test('a version 41 database keeps its nodes\' config ids through the upgrade', async (t) => {
    const { db, store } = await setup(t, backend);
    for (const id of ['u1', 'u2']) await store.upsertFromInventory(inventory(id, { received_at: AT }));
    await store.setExpectations('u1', 'cfg-u1', expected, AT);
    await db.exec(UNDO_42.postgres);
    t.same(await pgAdmin(async (c) => (await c.query("SELECT id, policy_config_id FROM nodes ORDER BY id")).rows, db.schema),
      [{ id: 'u1', policy_config_id: 'cfg-u1' }, { id: 'u2', policy_config_id: null }], 'version 41 keeps it in the node row');
    const upgraded = await db.open();
    t.equal((await upgraded.getNode('u1'))!.policy_config_id, 'cfg-u1', 'read back after the upgrade');
    t.equal((await upgraded.getNode('u2'))!.policy_config_id, null);
    t.same(await db.rows!('SELECT node_id, config_id FROM node_policy_configs'), [{ node_id: 'u1', config_id: 'cfg-u1' }]);
  });
}
