/**
 * A generation writing several batches at once (`[policy] write_batches`, write-queue.ts) leaves
 * the store as one writing them one after the other, on SQLite and PostgreSQL: the same bundles,
 * expectations, compliance, group memberships, findings and events, and kept counters equal to
 * the fresh sums, through a first generation, runs and changes. On PostgreSQL the batches are
 * written at once for real, and a batch held up inside its transaction holds up no other batch
 * that names the same new expectation list. The queue itself keeps its bound and hands a
 * failure on only once the other writes have ended.
 */
import t, { type Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { WriteQueue } from '@capstan/server/policy/write-queue';
import type { ComplianceClock, PolicyWrite, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend } from './store-suite.js';
import { postgresBackend, sqliteTemplateBackend } from './backends.js';
import { pgAdmin, pgUnavailable } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { prng } from '../helpers/prng.js';

const AT = '2024-05-01T08:00:00Z';
const AT_S = Date.parse(AT) / 1000;
const clock: ComplianceClock = { now_s: AT_S + 600, silence_s: 900, applying_s: 300 };
const NODES = Array.from({ length: 37 }, (_, i) => `w${String(i).padStart(2, '0')}`);
const dir = (id: string, content = 'x\n') => ({ id, name: id, method: 'file_content', mode: 'enforce', params: { path: `/etc/${id}`, content } });

/** Everything a generation leaves that a reader can see, per node and fleet-wide. */
async function snapshot(store: Store) {
  const nodes = [];
  for (const id of NODES) {
    const bundle = await store.getPolicyBundle(id);
    nodes.push({
      bundle, expected: bundle ? await store.getExpectations(id, bundle.config_id) : null,
      compliance: await store.getComplianceBase(id), groups: (await store.groupMembersOf(id)).sort(),
    });
  }
  const fleet = {
    directives: await store.complianceByRule('directive', clock), rules: await store.complianceByRule('rule', clock),
    groups: await store.complianceByGroup(clock), summary: await store.complianceSummary([], clock),
  };
  const fresh = {
    directives: await store.complianceByRuleFresh('directive', clock), rules: await store.complianceByRuleFresh('rule', clock),
    groups: await store.complianceByGroupFresh(clock), summary: await store.complianceSummaryFresh(clock),
  };
  // Batches written at once commit in either order: the events are compared as a set, and the
  // findings they name without their serial numbers.
  const events = (await store.listEvents({}, 1000)).map(({ id: _id, ...e }) => {
    const { finding_id: _f, ...data } = (e.data ?? {}) as Record<string, unknown>;
    return JSON.stringify({ ...e, data });
  }).sort();
  const findings = (await store.listFindings({}, 1, 1000)).data.map(({ id: _id, ...f }) => JSON.stringify(f)).sort();
  return { nodes, fleet, fresh, events, findings };
}

/** The same fleet, model, runs and changes on `store`; generations through `gen`. One snapshot per step. */
async function drive(store: Store, gen: PolicyGenerator) {
  const r = prng(20261206);
  for (const [i, id] of NODES.entries()) {
    await store.upsertFromInventory(inventory(id, { hostname: `${i % 3 === 0 ? 'web' : 'db'}-${i}`, received_at: AT }));
    if (i % 9 !== 4) await setAcceptance(store, id, 'accepted', AT);
  }
  for (const d of ['a', 'b', 'c', 'd']) await store.putPolicyObject('directive', d, dir(d), AT);
  await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web*'] }] }, AT);
  await store.putPolicyObject('group', 'some', { id: 'some', name: 'some', nodes: NODES.filter((_, i) => i % 4 === 1) }, AT);
  await store.putPolicyObject('rule', 'base', { id: 'base', name: 'base', directives: ['a', 'b'], groups: ['all-nodes'] }, AT);
  await store.putPolicyObject('rule', 'web', { id: 'web', name: 'web', directives: ['c'], groups: ['web'] }, AT);
  await store.putPolicyObject('rule', 'some', { id: 'some', name: 'some', directives: ['d'], groups: ['some'] }, AT);
  const steps = [];
  await gen.regenerateAll();
  steps.push(await snapshot(store));
  // Runs of the policies: some failing (findings open), some of an older config.
  let k = 0;
  for (const id of NODES) {
    const config = (await store.getNode(id))?.policy_config_id;
    if (!config || r.next() < 0.2) continue;
    const outcomes = ['a', 'b', 'c', 'd'].filter(() => r.next() < 0.8).map((d) => ({
      rule_id: d === 'c' ? 'web' : d === 'd' ? 'some' : 'base', directive_id: d, component: 'File content', outcome: r.pick(['result_success', 'result_repaired', 'result_error']), count: 1,
    }));
    await store.insertRun(run(id, `2024-05-01T08:0${1 + (k % 8)}:${String(k++ % 60).padStart(2, '0')}Z`, {
      config_id: r.next() < 0.8 ? config : 'cfg-old', outcomes, received_at: '2024-05-01T08:09:30Z',
    }));
  }
  await store.sweepCompliance(clock);
  steps.push(await snapshot(store));
  await gen.change('directive', 'b', () => store.putPolicyObject('directive', 'b', dir('b', 'changed\n'), AT));
  steps.push(await snapshot(store));
  await gen.change('group', 'web', () => store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-1*', 'db-2*'] }] }, AT));
  await gen.change('rule', 'some', () => store.deletePolicyObject('rule', 'some'));
  steps.push(await snapshot(store));
  return steps;
}

/** `store` with its putPolicies counted: how many ran at once, at most. */
function counting(store: Store): { store: Store; most: () => number; calls: () => number } {
  let now = 0;
  let most = 0;
  let calls = 0;
  const spy = Object.create(store) as Store;
  spy.putPolicies = async (w: PolicyWrite[]) => {
    calls++;
    most = Math.max(most, ++now);
    try {
      return await store.putPolicies(w);
    } finally {
      now--;
    }
  };
  return { store: spy, most: () => most, calls: () => calls };
}

async function parity(t: Test, backend: Backend, concurrent: boolean) {
  const a = await setup(t, backend);
  const b = await setup(t, backend);
  const one = await drive(a.store, new PolicyGenerator({ store: a.store, log: silentLogger, clock: () => new Date(AT) }));
  const spied = counting(b.store);
  const gen = new PolicyGenerator({ store: spied.store, log: silentLogger, clock: () => new Date(AT), writeBatches: 3, batchSize: 4 });
  const many = await drive(b.store, gen);
  t.ok(spied.calls() >= 10, `the generations wrote many batches (${spied.calls()})`);
  if (concurrent) t.ok(spied.most() > 1, `batches were written at once (up to ${spied.most()})`);
  t.ok(spied.most() <= 3, 'never more than write_batches at once');
  for (const [i, s] of many.entries()) {
    t.same(s, one[i], `step ${i}: as when written one after the other`);
    t.same(s.fleet, s.fresh, `step ${i}: kept counters equal the fresh sums`);
  }
  const last = many.at(-1)!;
  t.ok(last.findings.length > 0 && last.nodes.filter((n) => n.bundle).length > 20, 'findings and bundles met');
}

t.test('SQLite: a generation writing three batches at once leaves what one writing them in turn leaves', (t) => parity(t, sqliteTemplateBackend, false));

const why = await pgUnavailable();
const pgOnly = { skip: why ?? false };
const postgres = postgresBackend('capstan_wbatch');

t.test('PostgreSQL: a generation writing three batches at once leaves what one writing them in turn leaves', pgOnly, (t) => parity(t, postgres, true));

t.test('PostgreSQL: a batch held up in its transaction does not hold up another naming the same new list', pgOnly, async (t) => {
  const { store, db } = await setup(t, postgres);
  for (const id of ['h1', 'h2']) {
    await store.upsertFromInventory(inventory(id, { received_at: AT }));
    await setAcceptance(store, id, 'accepted', AT);
  }
  const expected = [{ rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' }, { rule_id: 'r1', directive_id: 'd2', component: 'Package vim' }];
  const write = (id: string): PolicyWrite => ({ bundle: { node_id: id, config_id: `cfg-${id}`, generated_at: AT, bundle: '{}' }, expected });
  await pgAdmin(async (c) => {
    // Another connection holds h1's bundle row: h1's batch stops at its bundle, after its
    // expectations (and, were it stored there, the new list) are written in its transaction.
    await c.query('BEGIN');
    await c.query(`INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle) VALUES ('h1', 'held', now(), '{}')`);
    const held = store.putPolicies([write('h1')]);
    held.catch(() => undefined);
    // Backends blocked by this one: other test files' backends on the same cluster are not counted.
    const holder = Number((await c.query('SELECT pg_backend_pid() AS pid')).rows[0].pid);
    const waiting = async () => Number((await db.rows!(`SELECT count(*) AS n FROM pg_stat_activity WHERE ${holder} = ANY(pg_blocking_pids(pid))`))[0]!.n);
    for (let i = 0; i < 200 && (await waiting()) === 0; i++) await new Promise((r) => setImmediate(r));
    t.equal(await waiting(), 1, 'the first batch waits on the bundle row');
    // The second batch names the same list, new to the database: it is not kept waiting for the first's commit.
    let timer: NodeJS.Timeout | undefined;
    const bound = new Promise<string>((r) => { timer = setTimeout(() => r('still waiting after 10 s'), 10_000); });
    t.equal(await Promise.race([store.putPolicies([write('h2')]).then((n) => `wrote ${n}`), bound]), 'wrote 1', 'the second batch is written meanwhile');
    clearTimeout(timer);
    await c.query('ROLLBACK');
    t.equal(await held, 1, 'the first batch is written once let go');
  }, db.schema);
  t.same(await store.getExpectations('h1', 'cfg-h1'), expected);
  t.same(await store.getExpectations('h2', 'cfg-h2'), expected);
});

t.test('a generation whose batch write fails ends its other writes before it fails', async (t) => {
  const { store } = await setup(t, sqliteTemplateBackend);
  for (const id of NODES) {
    await store.upsertFromInventory(inventory(id, { received_at: AT }));
    await setAcceptance(store, id, 'accepted', AT);
  }
  await store.putPolicyObject('directive', 'a', dir('a'), AT);
  await store.putPolicyObject('rule', 'base', { id: 'base', name: 'base', directives: ['a'], groups: ['all-nodes'] }, AT);
  let calls = 0;
  let running = 0;
  const spy = Object.create(store) as Store;
  spy.putPolicies = async (w: PolicyWrite[]) => {
    const call = ++calls;
    running++;
    try {
      // Each write takes a few turns of the event loop, so that several are in flight.
      for (let i = 0; i < 5; i++) await new Promise((r) => setImmediate(r));
      if (call === 3) throw new Error('the third batch failed');
      return await store.putPolicies(w);
    } finally {
      running--;
    }
  };
  const gen = new PolicyGenerator({ store: spy, log: silentLogger, clock: () => new Date(AT), writeBatches: 3, batchSize: 4 });
  await t.rejects(gen.regenerateAll(), /the third batch failed/);
  t.equal(running, 0, 'no write still in flight once the generation has failed');
  t.ok(calls >= 3 && calls < Math.ceil(NODES.length / 4), `no batch started after the failure was seen (${calls} written)`);
});

t.test('the write queue keeps its bound and ends every write before handing a failure on', async (t) => {
  const q = new WriteQueue(2);
  let running = 0;
  let most = 0;
  const ended: number[] = [];
  const gates: Array<() => void> = [];
  const job = (n: number, fail = false) => async () => {
    most = Math.max(most, ++running);
    await new Promise<void>((r) => gates.push(r));
    running--;
    ended.push(n);
    if (fail) throw new Error(`write ${n} failed`);
  };
  const open = async () => {
    for (let i = 0; i < 100 && gates.length === 0; i++) await new Promise((r) => setImmediate(r));
    gates.shift()?.();
  };
  await q.add(job(1));
  await q.add(job(2, true));
  const third = q.add(job(3));
  await open();
  await third;
  t.equal(most, 2, 'a third write waits for a slot');
  // Write 2 fails while write 3 runs: the next add waits for 3, then throws 2's failure.
  const fourth = q.add(job(4));
  await open();
  await open();
  await t.rejects(fourth, /write 2 failed/);
  t.same(ended, [1, 2, 3], 'every write in flight ended before the failure was handed on');
  await q.drain();
  t.throws(() => new WriteQueue(0), RangeError);
});
