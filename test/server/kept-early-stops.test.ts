/**
 * PostgreSQL's kept counters' update triggers (migrations 33, 37 and 39): an update that moves
 * nothing is found so by joining the statement's two transition tables on the node id by hash or
 * merge, never by a nested loop that compares every row with every other. Read from the plans
 * auto_explain gives for the triggers' statements, on a connection whose first update is a large
 * one (the plan is kept from there), and checked to fail with the functions before migration 39.
 */
import t from 'tap';
import { inventory, setup } from './store-suite.js';
import { postgresBackend } from './backends.js';
import { pgAdmin, postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { UNDO_39 } from '../helpers/old-schema.js';

const NODES = 600;
const at = '2024-05-01T08:00:00.000Z';
const ITEMS = [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' }];

/** The plans of the early stops (a NOT EXISTS over old_rows and new_rows) of an update of every compliance row, then of every kept row, moving nothing. */
async function earlyStops(schema: string): Promise<string[]> {
  return pgAdmin(async (c) => {
    const logs: string[] = [];
    c.on('notice', (m) => logs.push(m.message ?? ''));
    await c.query("LOAD 'auto_explain'");
    await c.query('SET auto_explain.log_min_duration = 0; SET auto_explain.log_nested_statements = on; SET client_min_messages = log');
    await c.query('UPDATE node_compliance SET computed_at = computed_at');
    await c.query('UPDATE kept_nodes SET share = share');
    await c.query('RESET client_min_messages');
    return logs.filter((l) => /Query Text: NOT EXISTS/.test(l) && /old_rows/.test(l));
  }, schema);
}

/** The plan joins old_rows and new_rows by a nested loop: the equality on node ids is a join filter, not a hash or merge condition. */
const quadratic = (plan: string) => /Join Filter: \(\(?[no]\.node_id = [no]\.node_id/.test(plan);

if (await postgresOrSkipFile(t)) {
  t.test('an update that moves nothing is found so in linear time', async (t) => {
    const backend = postgresBackend('capstan_stops');
    const { store, db } = await setup(t, backend);
    const ids = Array.from({ length: NODES }, (_, i) => `stop-${String(i).padStart(4, '0')}`);
    for (const id of ids) {
      await store.upsertFromInventory(inventory(id, { received_at: at }));
      await setAcceptance(store, id, 'accepted', at);
    }
    await store.putPolicies(ids.map((node_id) => ({ bundle: { node_id, config_id: 'cfg-a', generated_at: at, bundle: '{"config_id":"cfg-a"}' }, expected: ITEMS })));
    const schema = (db as { schema?: string }).schema!;

    const plans = await earlyStops(schema);
    t.equal(plans.length, 2, 'both early stops ran (node_compliance, kept_nodes)');
    for (const p of plans) t.notOk(quadratic(p), 'no nested loop over the transition tables', { plan: p });
    t.ok(plans.every((p) => /(Hash|Merge) Cond: \(\(?[no]\.node_id = [no]\.node_id/.test(p)), 'the two tables joined by hash or merge on the node id');

    // The functions before migration 39 plan that nested loop: what this test reads would show it.
    await db.exec(UNDO_39.postgres);
    const before = await earlyStops(schema);
    t.equal(before.length, 2, 'both early stops ran before migration 39 too');
    t.ok(before.some(quadratic), 'before migration 39, a nested loop compared every row with every other');
  });
}
