/**
 * putPolicies (the generator's batched write) against setExpectations + putPolicyBundle (one
 * node at a time, the reference): two stores given the same random history of policy writes and
 * runs must show the same compliance after every step, node by node and per directive. The
 * batched write skips recomputing a node's compliance when the expectations its last run is
 * judged by did not change; this is what shows that skipping never changes a number.
 * Then the generator's repair of expectations an older server wrote, on SQLite and PostgreSQL.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { complianceClock } from '@capstan/server/registry/compliance';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import type { ExpectedComponent, RunInsert } from '@capstan/server/store/store';
import { PG_URL, pgAdmin, pgUnavailable } from './pg.js';
import { inventory } from './store-suite.js';
import { copySqliteTemplate } from './backends.js';
import { programDir } from '../helpers/programs.js';
import { setAcceptance } from '../helpers/node-changes.js';

const NODES = ['n1', 'n2', 'n3', 'n4'];
/** Compliance as read a minute after `at` (time states included). */
const CLK = (at: string) => complianceClock({ runIntervalMs: 300_000, missedRuns: 3, applyingGraceMs: 300_000 }, new Date(Date.parse(at) + 60_000));
const COMPONENTS: ExpectedComponent[] = [
  { rule_id: 'r1', directive_id: 'd1', component: 'File' },
  { rule_id: 'r1', directive_id: 'd2', component: 'Package' },
  { rule_id: 'r2', directive_id: 'd3', component: 'Service' },
];
const OUTCOMES = ['result_success', 'result_repaired', 'result_error', 'audit_noncompliant', 'result_na'];

type Op =
  | { kind: 'policy'; nodes: number[]; config: string; expected: number[] }
  | { kind: 'run'; node: number; config: string | null; outcomes: Array<[number, number]>; complete: boolean };

const opArb: fc.Arbitrary<Op> = fc.oneof(
  fc.record({
    kind: fc.constant('policy' as const),
    nodes: fc.uniqueArray(fc.integer({ min: 0, max: NODES.length - 1 }), { minLength: 1, maxLength: NODES.length }),
    config: fc.constantFrom('A', 'B', 'C'),
    // The same config id with other expectations happens after an upgrade changes components.
    expected: fc.uniqueArray(fc.integer({ min: 0, max: COMPONENTS.length - 1 }), { maxLength: COMPONENTS.length }),
  }),
  fc.record({
    kind: fc.constant('run' as const),
    node: fc.integer({ min: 0, max: NODES.length - 1 }),
    config: fc.constantFrom('A', 'B', 'C', 'none', null),
    outcomes: fc.uniqueArray(fc.tuple(fc.integer({ min: 0, max: COMPONENTS.length - 1 }), fc.integer({ min: 0, max: OUTCOMES.length - 1 })), {
      maxLength: COMPONENTS.length, selector: ([c]) => c,
    }),
    complete: fc.boolean(),
  }),
);

async function compliance(store: Store, at: string) {
  const perNode: Record<string, unknown> = {};
  for (const n of NODES) perNode[n] = await store.complianceSummary([{ key: 'id', values: [n] }], CLK(at));
  return { perNode, byDirective: await store.complianceByRule('directive', CLK(at)), global: await store.complianceSummary([], CLK(at)) };
}

t.test('batched policy writes leave compliance exactly as one-by-one writes do', async (t) => {
  const dir = programDir(t);
  let round = 0;
  await fc.assert(
    fc.asyncProperty(fc.array(opArb, { minLength: 1, maxLength: 25 }), async (ops) => {
      round++;
      // Each round's two stores start from copies of one migrated file (migrating costs more
      // than a round's writes); opening them still runs migrate(), which finds nothing to do.
      const paths = [join(dir, `batched-${round}.db`), join(dir, `single-${round}.db`)];
      for (const path of paths) await copySqliteTemplate(path);
      const batched = await openRegistry({ sqlitePath: paths[0]! });
      const single = await openRegistry({ sqlitePath: paths[1]! });
      try {
        for (const s of [batched, single]) {
          for (const n of NODES) {
            await s.upsertFromInventory(inventory(n, { received_at: '2024-05-01T08:00:00Z' }));
            await setAcceptance(s, n, 'accepted', '2024-05-01T08:00:00Z');
          }
        }
        let minute = 0;
        for (const op of ops) {
          minute++;
          const at = new Date(Date.UTC(2024, 4, 1, 8, minute)).toISOString();
          if (op.kind === 'policy') {
            const expected = op.expected.map((i) => COMPONENTS[i]!);
            const bundles = op.nodes.map((i) => ({ node_id: NODES[i]!, config_id: op.config, generated_at: at, bundle: JSON.stringify({ node_id: NODES[i], config_id: op.config }) }));
            await batched.putPolicies(bundles.map((bundle) => ({ bundle, expected })));
            for (const b of bundles) {
              await single.setExpectations(b.node_id, b.config_id, expected, at);
              await single.putPolicyBundle(b);
            }
          } else {
            const run: RunInsert = {
              node_id: NODES[op.node]!, started_at: at, config_id: op.config, complete: op.complete, report_count: op.outcomes.length,
              counts: {}, outcomes: op.outcomes.map(([c, o]) => ({ ...COMPONENTS[c]!, outcome: OUTCOMES[o]!, count: 1 })),
              file_name: `${at}@${NODES[op.node]}.log.zst`, sha256: 'f'.repeat(64), log_compressed: Buffer.from('x'), received_at: at,
            };
            await batched.insertRun(run);
            await single.insertRun(run);
          }
          const [a, b] = [await compliance(batched, at), await compliance(single, at)];
          if (JSON.stringify(a) !== JSON.stringify(b)) {
            throw new Error(`compliance differs after ${JSON.stringify(op)}:\nbatched ${JSON.stringify(a)}\nsingle  ${JSON.stringify(b)}`);
          }
        }
        for (const n of NODES) {
          const [a, b] = [await batched.getComplianceBase(n), await single.getComplianceBase(n)];
          if (JSON.stringify(a) !== JSON.stringify(b)) throw new Error(`compliance base of ${n} differs`);
          const [pa, pb] = [await batched.getPolicyBundle(n), await single.getPolicyBundle(n)];
          if (JSON.stringify(pa) !== JSON.stringify(pb)) throw new Error(`bundle of ${n} differs`);
        }
      } finally {
        await batched.close();
        await single.close();
      }
    }),
    { numRuns: 40 },
  );
  t.pass('same compliance after every step');
});

t.test('a batch naming unknown nodes stores the others and counts only them', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  await store.createNode({ id: 'n1', hostname: 'n1' });
  const at = '2024-05-01T08:00:00Z';
  const b = (node_id: string) => ({ bundle: { node_id, config_id: 'A', generated_at: at, bundle: '{}' }, expected: COMPONENTS });
  t.equal(await store.putPolicies([b('ghost'), b('n1')]), 1);
  t.equal((await store.getPolicyBundle('n1'))?.config_id, 'A');
  t.equal(await store.getPolicyBundle('ghost'), null);
  t.match(await store.complianceSummary([{ key: 'id', values: ['n1'] }], CLK(at)), { agentless: { counts: { applying: 3 } } }, 'no run yet: every expected component applying');
  t.rejects(store.putPolicies([{ bundle: { node_id: 'n1', config_id: '', generated_at: at, bundle: '{}' }, expected: [] }]), { code: 'ERR_BAD_REQUEST' });
});

/** The generator's repair of old expectations on each backend (jsonb reorders keys: compare by content). */
async function repairScenario(t: Test, store: Store) {
  const ids = ['n0', 'n1', 'n2'];
  const at = '2024-05-01T08:00:00Z';
  for (const id of ids) await store.createNode({ id, hostname: `web-${id}` });
  await store.putPolicyObject('directive', 'a', { id: 'a', name: 'a', method: 'file_absent', mode: 'enforce', params: { path: '/tmp/x' } }, at);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', nodes: ids }, at);
  await store.putPolicyObject('rule', 'r', { id: 'r', name: 'r', directives: ['a'], groups: ['web'] }, at);
  t.match(await new PolicyGenerator({ store, log: silentLogger }).regenerateAll(), { changed: 3 });
  const configId = (await store.getPolicyBundle('n2'))!.config_id;
  const current = (await store.getExpectations('n2', configId))!;
  await store.setExpectations('n2', configId, current.slice(1), at);
  const before = await store.getPolicyBundle('n2');
  // Count what the generator writes: a current content must cost no write at all.
  const written: number[] = [];
  const spy = Object.create(store) as Store;
  spy.putPolicies = async (w) => {
    written.push(w.length);
    return store.putPolicies(w);
  };
  const gen = new PolicyGenerator({ store: spy, log: silentLogger });
  t.match(await gen.regenerateAll(), { changed: 0 });
  t.same(written, [3], 'the content was found stale: expectations rewritten for its nodes');
  t.same(await store.getExpectations('n2', configId), current);
  t.same(await store.getPolicyBundle('n2'), before, 'bundle untouched');
  written.length = 0;
  t.match(await new PolicyGenerator({ store: spy, log: silentLogger }).regenerateAll(), { changed: 0 });
  t.same(written, [], 'current expectations are recognised as such (no rewrite every pass)');
}

t.test('old expectations of an unchanged policy are repaired, on SQLite', async (t) => {
  const store = await openRegistry({ sqlitePath: join(programDir(t), 'capstan.db') });
  t.teardown(() => store.close());
  await repairScenario(t, store);
});

t.test('old expectations of an unchanged policy are repaired, on PostgreSQL', async (t) => {
  const why = await pgUnavailable();
  if (why) {
    t.comment(`skipped: ${why}`);
    t.pass('skipped', { skip: why });
    return;
  }
  const schema = `capstan_test_${randomBytes(6).toString('hex')}`;
  const store = await openRegistry({ databaseUrl: PG_URL, schema, poolSize: 2 });
  t.teardown(async () => {
    await store.close();
    await pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`));
  });
  await repairScenario(t, store);
});
