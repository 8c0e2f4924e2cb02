/**
 * A generation that only adds components to nodes' lists (a directive added to a rule every
 * node has): on SQLite a node failing nowhere gets its new rows from its stored ones, without
 * its run's outcomes, unless its run reported something unexpected under a directive that gains
 * components (additions.ts). Two stores of a kind take the same nodes, runs and policies, one
 * through putPolicies batches and one through setExpectations per node, which always judges the
 * run: rows, findings, events and kept counters must be equal, and the counters the fresh sums.
 * The runs mostly succeed; some also report a component their list does not have (with an error
 * at times, so that a finding opens once the list expects it), and some fail on an expected one.
 */
import t, { type Test } from 'tap';
import type { ComplianceClock, PolicyWrite, Store } from '@capstan/server/store/index';
import { inventory, run, setup, type Backend, type Db } from './store-suite.js';
import { postgresBackend, sqliteTemplateBackend } from './backends.js';
import { pgUnavailable } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { prng } from '../helpers/prng.js';
import { batchedAgainstSingle, roundOf } from './policy-snapshot.js';

const NODES = Array.from({ length: 30 }, (_, i) => `a${String(i).padStart(2, '0')}`);
type Component = { rule_id: string; directive_id: string; component: string };
const POOL: Component[] = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'], ['r2', 'd3', 'Command check'],
  ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'], ['r3', 'd5', 'Cron'], ['r4', 'd6', 'Firewall'], ['r4', 'd6', 'Mount /srv'],
].map(([rule_id, directive_id, component]) => ({ rule_id: rule_id!, directive_id: directive_id!, component: component! }));
const QUIET = ['result_success', 'result_success', 'result_repaired', 'result_na', 'audit_compliant'];
const BASE_S = Date.parse('2024-06-01T08:00:00Z') / 1000;
const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 3600, applying_s: 600 });
const iso = (s: number) => new Date(s * 1000).toISOString();
const same = (a: Component, b: Component) => a.rule_id === b.rule_id && a.directive_id === b.directive_id && a.component === b.component;

async function drive(store: Store, db: Db, batch: boolean) {
  const r = prng(20261206);
  let now = BASE_S;
  for (const id of NODES) {
    await store.upsertFromInventory(inventory(id, { received_at: iso(now) }));
    await setAcceptance(store, id, 'accepted', iso(now));
  }
  const lists = new Map<string, Component[]>(NODES.map((id) => [id, POOL.slice(0, 3 + r.int(3)).filter(() => r.next() < 0.8)]));
  const out = [];
  let started = 0;
  for (let round = 0; round < 4; round++) {
    const writes: PolicyWrite[] = NODES.map((id) => ({ bundle: { node_id: id, config_id: `cfg-${round}-${lists.get(id)!.length}`, generated_at: iso(now), bundle: '{}' }, expected: lists.get(id)! }));
    if (batch) await store.putPolicies(writes);
    else for (const w of writes) await store.setExpectations(w.bundle.node_id, w.bundle.config_id, w.expected, w.bundle.generated_at);
    out.push(await roundOf(store, db, clockAt(now + 60), NODES));
    now += 120;
    // Runs of that policy: every listed component reported, now and then one more, or a failure.
    for (const id of NODES) {
      if (r.next() < 0.2) continue;
      const list = lists.get(id)!;
      const outcomes = list.map((c) => ({ ...c, outcome: r.next() < 0.1 ? 'result_error' : r.pick(QUIET), count: 1 + r.int(2) }));
      const others = POOL.filter((c) => !list.some((l) => same(l, c)));
      if (others.length > 0 && r.next() < 0.35) outcomes.push({ ...r.pick(others), outcome: r.next() < 0.4 ? 'result_error' : 'result_success', count: 1 });
      const policy = (await store.getNode(id))!.policy_config_id!;
      await store.insertRun(run(id, `${iso(now).slice(0, 19)}.${String(started++ % 1000).padStart(3, '0')}Z`, { config_id: policy, outcomes, received_at: iso(now) }));
    }
    now += 120;
    // The next generation adds components: to a directive the nodes have, or one of their own.
    for (const id of NODES) {
      const list = lists.get(id)!;
      const others = POOL.filter((c) => !list.some((l) => same(l, c)));
      if (r.next() < 0.85) lists.set(id, [...list, ...others.filter(() => r.next() < 0.4)]);
    }
  }
  return out;
}

async function parity(t: Test, backend: Backend) {
  const batched = await batchedAgainstSingle(t, backend, drive, (i) => `round ${i}: as one setExpectations per node`);
  const last = batched[batched.length - 1]!.snap;
  t.ok(last.findings.length > 0, `findings met (${last.findings.length})`);
  // As stored (the reads show a node with a new policy as applying).
  const rows = batched.flatMap((s) => s.snap.rows);
  t.ok(rows.some((x) => Number(x.missing) > 0) && rows.some((x) => Number(x.unexpected) > 0), 'missing and unexpected items met');
}

t.test('putPolicies on SQLite: lists that only add components, as one setExpectations per node', (t) => parity(t, sqliteTemplateBackend));

const why = await pgUnavailable();
t.test('putPolicies on PostgreSQL: lists that only add components, as one setExpectations per node', { skip: why ?? false }, (t) => parity(t, postgresBackend('capstan_padd')));

/**
 * A node whose list gains components under one directive has only that directive's row read and
 * written; its others stay. Its next run then drops a directive it reported unexpectedly before,
 * under one that gained nothing: that row must go (on PostgreSQL, the directive cache must not
 * take the rows written for the gain as all of the node's).
 */
async function partialThenRun(t: Test, backend: Backend) {
  const { store, db } = await setup(t, backend);
  const at = (s: number) => iso(BASE_S + s);
  await store.upsertFromInventory(inventory('p1', { received_at: at(0) }));
  await setAcceptance(store, 'p1', 'accepted', at(0));
  const [motd, sshd, vim, check] = POOL as [Component, Component, Component, Component];
  const policy = async (config: string, list: Component[], s: number) =>
    t.equal(await store.putPolicies([{ bundle: { node_id: 'p1', config_id: config, generated_at: at(s), bundle: '{}' }, expected: list }]), 1);
  // Through the ingest's batch path (on PostgreSQL, the one that uses the directive cache).
  const report = async (config: string, s: number, outcomes: Array<Component & { outcome: string; count: number }>) =>
    t.match(await store.insertRuns([run('p1', at(s), { config_id: config, outcomes, received_at: at(s) })]), [{ ok: true }]);
  const ok = (c: Component) => ({ ...c, outcome: 'result_success', count: 1 });
  await policy('c1', [motd, vim], 10);
  // Its run reports r2/d3 too, which no list has: an unexpected item, under a directive that gains nothing.
  await report('c1', 20, [ok(motd), ok(vim), ok(check)]);
  const rows = async () => (await db.rows!('SELECT rule_id, directive_id, missing, unexpected FROM node_compliance_directives WHERE node_id = \'p1\' ORDER BY rule_id, directive_id'))
    .map((r) => `${r.rule_id}/${r.directive_id} missing ${Number(r.missing)} unexpected ${Number(r.unexpected)}`);
  t.same(await rows(), ['r1/d1 missing 0 unexpected 0', 'r1/d2 missing 0 unexpected 0', 'r2/d3 missing 0 unexpected 1']);
  // r1/d1 gains Service sshd: that row alone is made from the stored one.
  await policy('c2', [motd, vim, sshd], 30);
  t.same(await rows(), ['r1/d1 missing 1 unexpected 0', 'r1/d2 missing 0 unexpected 0', 'r2/d3 missing 0 unexpected 1'], 'the gain counted, the other rows as they were');
  t.match((await store.getComplianceBase('p1'))?.outcomes, [{}, {}, {}], 'the run stays the base');
  // The next run of c2 no longer reports r2/d3: its row goes.
  await report('c2', 40, [ok(motd), ok(sshd), ok(vim)]);
  t.same(await rows(), ['r1/d1 missing 0 unexpected 0', 'r1/d2 missing 0 unexpected 0'], 'the row of what the run no longer reports is gone');
}

t.test('SQLite: a gain under one directive, then a run that drops an unexpected one', (t) => partialThenRun(t, sqliteTemplateBackend));
t.test('PostgreSQL: a gain under one directive, then a run that drops an unexpected one', { skip: why ?? false }, (t) => partialThenRun(t, postgresBackend('capstan_padd_run')));
