/**
 * PostgreSQL: a new policy judges a node's last run again without writing that run's packed
 * outcomes again. A run's outcomes are packed into ~2.5 KB, which PostgreSQL keeps out of line
 * (in the table's TOAST relation); rewriting them on every generation sent them back to the
 * database and wrote them there once more per node. The stored value must stay the one already
 * there (no new chunk in the TOAST relation), while the row's counts and marks move with the
 * policy and read back as the per-node path leaves them.
 */
import { randomBytes } from 'node:crypto';
import t from 'tap';
import type { PolicyWrite } from '@capstan/server/store/index';
import { inventory, run, setup } from './store-suite.js';
import { postgresBackend } from './backends.js';
import { pgAdmin, pgUnavailable } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';

const why = await pgUnavailable();
const postgres = postgresBackend('capstan_pgout');

/** Outcomes whose packed form is larger than PostgreSQL keeps in the row (component names that do not compress). */
const outcomes = Array.from({ length: 100 }, (_, k) => ({
  rule_id: 'r1', directive_id: k % 2 === 0 ? 'd1' : 'd2', component: `File /etc/app/${randomBytes(24).toString('hex')}`,
  outcome: k % 7 === 0 ? 'result_repaired' : 'result_success', count: 1,
}));

t.test('postgres: a new policy leaves the stored packed outcomes where they are', { skip: why ?? false }, async (t) => {
  const { store, db } = await setup(t, postgres);
  const AT = '2024-05-01T10:00:00Z';
  for (const id of ['n1', 'n2']) {
    await store.upsertFromInventory(inventory(id, { received_at: AT }));
    await setAcceptance(store, id, 'accepted', AT);
    await store.insertRun(run(id, '2024-05-01T10:01:00Z', { config_id: 'cfg-1', received_at: '2024-05-01T10:02:00Z', outcomes, report_count: outcomes.length }));
  }
  const chunks = () => pgAdmin(async (c) => {
    const { rows: [rel] } = await c.query(`SELECT t.reltoastrelid::regclass::text AS toast FROM pg_class t
      WHERE t.oid = 'node_compliance'::regclass`);
    return (await c.query(`SELECT DISTINCT chunk_id::text AS id FROM ${rel!.toast as string} ORDER BY 1`)).rows.map((r) => r.id as string);
  }, db.schema);
  const before = await chunks();
  t.equal(before.length, 2, 'each node\'s packed outcomes are stored out of line');
  const base = await store.getComplianceBase('n1');
  const rowsOf = (id: string) => db.rows!(`SELECT xmin::text AS v, missing, success, repaired, unexpected, applying_since_s FROM node_compliance WHERE node_id = '${id}'`);
  const was = await rowsOf('n1');

  // A policy naming one of the run's components and one it did not report: the rows move.
  const expected: PolicyWrite['expected'] = [
    { rule_id: 'r1', directive_id: 'd1', component: outcomes[0]!.component }, { rule_id: 'r3', directive_id: 'd9', component: 'Service ntp' },
  ];
  await store.putPolicies([{ bundle: { node_id: 'n1', config_id: 'cfg-2', generated_at: '2024-05-01T10:10:00Z', bundle: '{}' }, expected }]);
  await store.setExpectations('n2', 'cfg-2', expected, '2024-05-01T10:10:00Z');

  const now = (await rowsOf('n1'))[0]!;
  t.not(now.v, was[0]!.v, 'the compliance row was written');
  t.same([Number(now.missing), Number(now.unexpected)], [1, 99], 'judged against the new policy');
  t.ok(now.applying_since_s !== null, 'the node applies its new policy');
  t.same({ ...now, v: '' }, { ...(await rowsOf('n2'))[0]!, v: '' }, 'as one setExpectations leaves it');
  t.same((await store.getComplianceBase('n1'))?.outcomes, base?.outcomes, 'the outcomes read back the same');
  // A value written again is a new chunk, and the one it replaced is no longer visible. The
  // per-node path (n2) writes its value again; the batch (n1) must not.
  const after = await chunks();
  t.equal(after.length, 2, 'one value a node');
  t.equal(before.filter((id) => after.includes(id)).length, 1, 'n1\'s stored value is the one it had');
});
