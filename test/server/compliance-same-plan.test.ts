/**
 * PostgreSQL's steady-state update of a batch's compliance rows (postgres-batch.ts SAME_SQL)
 * compares a node's stored outcomes with its run's by their SHA-256. Written as an equality, the
 * digest was a join key: on a table small enough to be read whole, the planner hashed the rows
 * on (node, digest), computing every node's digest for each batch of a few runs (2 ms a batch
 * at 300 nodes, growing with the fleet until another plan won). Here the planner is made to hash
 * (nested loops and merge joins off), and the digest must stay out of the hash's key, computed
 * only for the batch's rows; the statement still tells a run with the same outcomes from one
 * with others.
 */
import t from 'tap';
import { SAME_SQL } from '@capstan/server/store/compliance/postgres-batch';
import { inventory, run, setup } from './store-suite.js';
import { postgresBackend } from './backends.js';
import { pgAdmin, postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';

const AT = '2026-03-01T08:00:00.000Z';
const LATER = '2026-03-01T08:05:00.000Z';
const ITEMS = [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' }, { rule_id: 'r1', directive_id: 'd2', component: 'Service sshd' }];
const NODES = Array.from({ length: 40 }, (_, i) => `same-${String(i).padStart(2, '0')}`);

if (await postgresOrSkipFile(t)) {
  t.test("the outcomes' digest is compared on the batch's rows, not hashed for every node", async (t) => {
    const { store, db } = await setup(t, postgresBackend('capstan_same_plan'));
    for (const [i, id] of NODES.entries()) {
      await store.upsertFromInventory(inventory(id, { received_at: AT }));
      await setAcceptance(store, id, 'accepted', AT);
      await store.setExpectations(id, 'cfg-a', ITEMS, AT);
      await store.insertRun(run(id, AT, { config_id: 'cfg-a', received_at: AT,
        outcomes: ITEMS.map((c, k) => ({ ...c, outcome: (i + k) % 7 === 0 ? 'result_repaired' : 'result_success', count: 1 })) }));
    }
    const digests = new Map((await db.rows!('SELECT node_id, sha256(outcomes_packed) AS d FROM node_compliance'))
      .map((r) => [r.node_id as string, r.d as Buffer]));
    t.equal(digests.size, NODES.length, 'every node has its packed outcomes');

    // A batch of four: two runs with the outcomes stored, two with others.
    const batch = NODES.slice(10, 14);
    const values = [batch, batch.map((_, k) => 1000 + k), batch.map(() => LATER), batch.map(() => LATER), batch.map(() => LATER), batch.map(() => 'cfg-a'),
      batch.map((id, k) => (k < 2 ? digests.get(id)! : Buffer.alloc(32, k))), batch.map(() => Date.parse(LATER) / 1000)];
    await pgAdmin(async (c) => {
      await c.query('BEGIN');
      try {
        await c.query('SET LOCAL enable_nestloop = off');
        await c.query('SET LOCAL enable_mergejoin = off');
        const plan = (await c.query({ text: `EXPLAIN (VERBOSE, COSTS OFF) ${SAME_SQL}`, values })).rows.map((r) => r['QUERY PLAN'] as string);
        const hashKeys = plan.filter((l) => l.includes('Hash Cond'));
        t.ok(hashKeys.length > 0, 'the planner hashes', { plan });
        t.same(hashKeys.filter((l) => l.includes('sha256')), [], 'the digest is no hash key', { plan });
        t.ok(plan.some((l) => l.includes('Join Filter') && l.includes('sha256')), "it is checked on the joined rows", { plan });
        const { rows } = await c.query({ text: SAME_SQL, values });
        const updated = Object.fromEntries(rows.map((r) => [r.node_id as string, r.updated as boolean]));
        t.same(updated, Object.fromEntries(batch.map((id, k) => [id, k < 2])), 'the same outcomes update their row in place, others do not');
      } finally {
        await c.query('ROLLBACK');
      }
    }, db.schema);
  });
}
