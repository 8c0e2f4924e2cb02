/**
 * PostgreSQL's counters' logs (migrations 23, 25 and 38): a statement that writes many compliance
 * directive rows or policy group memberships appends one log row per counter it moves, summed by
 * key, not one per row; the counters read through the logs, and after the sweep folds them, equal
 * the figures summed afresh from every node's rows.
 */
import t from 'tap';
import { inventory, run, setup } from './store-suite.js';
import { postgresBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';
import { setAcceptance } from '../helpers/node-changes.js';

const BASE_S = Date.parse('2024-05-01T08:00:00Z') / 1000;
const iso = (s: number) => new Date(s * 1000).toISOString();
const clock = (now_s: number) => ({ now_s, silence_s: 900, applying_s: 600 });
const NODES = Array.from({ length: 12 }, (_, i) => `log-${String(i).padStart(2, '0')}`);
const ITEMS = [
  { rule_id: 'r1', directive_id: 'd1', component: 'File /etc/motd' }, { rule_id: 'r1', directive_id: 'd2', component: 'Package vim' },
  { rule_id: 'r2', directive_id: 'd3', component: 'Service sshd' },
];

if (await postgresOrSkipFile(t)) {
  t.test('a batch moves the counters with one log row per key', async (t) => {
    const { store, db } = await setup(t, postgresBackend('capstan_logs'));
    for (const id of NODES) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
    }
    const logRows = async () => Object.fromEntries(await Promise.all(['kept_directives_log', 'kept_rules_log', 'kept_groups_log']
      .map(async (table) => [table, Number((await db.rows!(`SELECT count(*) AS n FROM ${table}`))[0]!.n)] as const)));
    const same = async (at: number, what: string) => {
      const c = clock(at);
      t.same(await store.complianceByRule('directive', c), await store.complianceByRuleFresh('directive', c), `${what}: by directive`);
      t.same(await store.complianceByRule('rule', c), await store.complianceByRuleFresh('rule', c), `${what}: by rule`);
      t.same(await store.complianceByGroup(c), await store.complianceByGroupFresh(c), `${what}: by group`);
    };
    await store.sweepCompliance(clock(BASE_S + 30));
    const empty = await logRows();

    // One batch: every node's policy (36 directive rows written by one statement), then its groups (18 memberships).
    await store.putPolicies(NODES.map((id) => ({ bundle: { node_id: id, config_id: 'cfg-a', generated_at: iso(BASE_S + 60), bundle: '{"config_id":"cfg-a"}' }, expected: ITEMS })));
    t.equal(await store.putGroupMembers(NODES, new Map(NODES.map((id, i) => [id, i % 2 === 0 ? ['g1', 'g2'] : ['g1']]))), 18, 'eighteen memberships written');
    const written = await logRows();
    // Three directives and two rules, under one class and mode; two groups, each counted by class and by mode.
    t.equal(written.kept_directives_log - empty.kept_directives_log, 3, 'one directive log row per directive, not per node');
    t.equal(written.kept_rules_log - empty.kept_rules_log, 2, 'one rule log row per rule');
    t.equal(written.kept_groups_log - empty.kept_groups_log, 4, 'two log rows per group, not two per membership');
    await same(BASE_S + 90, 'logs summed');

    // Runs of the policy (rows updated), a new policy taking one directive away (rows deleted), and groups left.
    for (const [i, id] of NODES.entries()) {
      await store.insertRun(run(id, iso(BASE_S + 120 + i), {
        config_id: 'cfg-a', received_at: iso(BASE_S + 120 + i),
        outcomes: ITEMS.map((x, j) => ({ ...x, outcome: (i + j) % 4 === 0 ? 'result_error' : 'result_success', count: 1 })),
      }));
    }
    await same(BASE_S + 200, 'after runs');
    const before = await logRows();
    await store.putPolicies(NODES.map((id) => ({ bundle: { node_id: id, config_id: 'cfg-b', generated_at: iso(BASE_S + 240), bundle: '{"config_id":"cfg-b"}' }, expected: ITEMS.slice(0, 2) })));
    const removed = await logRows();
    // d3's rows deleted (one key), the nodes' remaining rows moved from mode 0 to applying (two
    // keys, taken and added) and then updated (two keys): 7 log rows for 36 rows moved.
    t.equal(removed.kept_directives_log - before.kept_directives_log, 7, 'a new policy for the batch appends a log row per key it moves');
    t.equal(await store.putGroupMembers(NODES, new Map(NODES.map((id) => [id, ['g1']]))), 6, 'six memberships dropped');
    t.equal((await logRows()).kept_groups_log - removed.kept_groups_log, 2, 'the memberships dropped append two group log rows');
    await same(BASE_S + 260, 'after a new policy and groups left');

    // Folded by the sweep: the counters alone, the same figures.
    const swept = await store.sweepCompliance(clock(BASE_S + 300));
    t.ok(swept.folded > 0, `the sweep folded ${swept.folded} log rows`);
    t.same(await logRows(), { kept_directives_log: 0, kept_rules_log: 0, kept_groups_log: 0 }, 'the logs emptied');
    await same(BASE_S + 300, 'folded');
  });
}
