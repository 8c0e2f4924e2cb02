/**
 * Upgrading a database written by the schema before findings (version 17), where every audit
 * run's non-compliance was a change, repeated run after run: the repeated rows become findings
 * (one per stretch of consecutive runs), open when the node's compliance still comes from the run
 * that reported it last, closed by the next run otherwise (repaired when that run repaired the
 * component); they leave the changes, which keep the repairs. The first run after the upgrade
 * carries an open finding on, counting it. On SQLite and PostgreSQL.
 */
import { join } from 'node:path';
import t, { type Test } from 'tap';
import type { Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { postgresAt, sqliteAt } from '../helpers/old-schema.js';
import { programDir } from '../helpers/programs.js';
import { pgUnavailable, PG_URL } from './pg.js';

const OLD = 17;
const K = ['r1', 'd1', 'Package absent telnetd'] as const;
const K2 = ['r1', 'd2', 'File /etc/motd'] as const;
const at = (h: number) => `2026-11-20T${String(h).padStart(2, '0')}:00:00.000Z`;

/** Old rows as the store of version 17 wrote them; `p(i)` is the dialect's placeholder. */
function oldRows(p: (i: number) => string, bool: (b: boolean) => unknown): Array<[string, unknown[]]> {
  const rows: Array<[string, unknown[]]> = [];
  const ph = (n: number) => Array.from({ length: n }, (_, i) => p(i + 1)).join(', ');
  for (const id of ['node-a', 'node-b']) {
    rows.push([`INSERT INTO nodes (id, hostname, status, state, accepted, created_at, updated_at, name, state_changed_at) VALUES (${ph(7)}, ${p(8)}, ${p(9)})`,
      [id, `${id}.example.com`, 'reachable', 'running', 'accepted', at(0), at(0), id, at(0)]]);
  }
  // node-a ran every hour from 01:00 to 06:00 (ids 1..6); node-b's runs are gone (retention).
  for (let h = 1; h <= 6; h++) {
    rows.push([`INSERT INTO runs (node_id, started_at, started_at_utc, config_id, complete, report_count, counts, outcomes, file_name, sha256, received_at, log_compressed)
      VALUES (${ph(12)})`, ['node-a', at(h), at(h), 'v1', bool(true), 3, '{}', '[]', `${h}.log`, 'ab'.repeat(32), at(h), Buffer.from('log')]]);
  }
  const change = (node: string, run: number | null, h: number, key: readonly string[], type: string, message: string) => [
    `INSERT INTO changes (node_id, run_id, run_started_at, at, rule_id, directive_id, component, key_value, event_type, message, label, config_id, diff)
      VALUES (${ph(13)})`, [node, run, at(h), at(h), key[0], key[1], key[2], 'telnetd', type, message, 'corrective', 'v1', type === 'audit_noncompliant' ? 'would remove' : null]] as [string, unknown[]];
  // K: non-compliant at 01–03, compliant at 04, non-compliant again at 05–06 (the node's base run).
  for (const h of [1, 2, 3, 5, 6]) rows.push(change('node-a', h, h, K, 'audit_noncompliant', `telnetd is installed (${h})`));
  // K2: non-compliant at 02 only, repaired by the 03 run.
  rows.push(change('node-a', 2, 2, K2, 'audit_noncompliant', 'motd differs'));
  rows.push(change('node-a', 3, 3, K2, 'result_repaired', 'motd repaired'));
  // node-b: three runs reported it, all gone since.
  for (const h of [1, 2, 3]) rows.push(change('node-b', 100 + h, h, K, 'audit_noncompliant', 'telnetd is installed'));
  rows.push([`INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected, computed_at, outcomes,
      success, repaired, error, non_compliant, missing, unexpected, not_applicable) VALUES (${ph(15)})`,
  ['node-a', 6, at(6), at(6), 'v1', bool(false), at(6), JSON.stringify([{ rule_id: K[0], directive_id: K[1], component: K[2], outcome: 'audit_noncompliant', count: 1 }]),
    0, 0, 0, 1, 0, 0, 0]]);
  return rows;
}

async function check(t: Test, store: Store): Promise<void> {
  const all = (await store.listFindings({}, 1, 100)).data;
  const of = (node: string, component: string) => all.filter((f) => f.node_id === node && f.component === component).sort((a, b) => a.first_seen_at.localeCompare(b.first_seen_at));
  const a = of('node-a', K[2]);
  t.equal(a.length, 2, 'two stretches of node-a: two findings');
  t.match(a[0], { status: 'closed', first_seen_at: at(1), first_run_id: 1, last_seen_at: at(3), last_run_id: 3, runs: 3,
    closed_at: at(4), closed_run_id: 4, close_reason: 'fixed', message: 'telnetd is installed (1)', diff: 'would remove', kind: 'non_compliant' });
  t.match(a[1], { status: 'open', first_seen_at: at(5), first_run_id: 5, runs: 2, last_run_id: 6, last_seen_at: at(6), closed_at: null });
  t.match(of('node-a', K2[2]), [{ status: 'closed', runs: 1, closed_run_id: 3, close_reason: 'repaired' }]);
  t.match(of('node-b', K[2]), [{ status: 'closed', first_seen_at: at(1), runs: 3, closed_at: at(3), closed_run_id: null, close_reason: 'fixed' }],
    'runs gone: one stretch, closed at its last sighting');
  const changes = (await store.listChanges({}, 1, 100)).data;
  t.same(changes.map((c) => c.event_type), ['result_repaired'], 'the repeated audit rows left the changes; the repair stays');
  // The first run after the upgrade takes the full compliance write and carries the open finding on.
  await store.insertRun({
    node_id: 'node-a', started_at: at(7), config_id: 'v1', complete: true, report_count: 1, counts: { audit_noncompliant: 1 },
    outcomes: [{ rule_id: K[0], directive_id: K[1], component: K[2], outcome: 'audit_noncompliant', count: 1 }],
    file_name: '7.log', sha256: 'cd'.repeat(32), log_compressed: Buffer.from('log'), received_at: at(7),
  });
  t.match((await store.listFindings({ status: 'open' }, 1, 10)).data, [{ node_id: 'node-a', runs: 3, last_seen_at: at(7) }]);
  t.equal((await store.listEvents({ types: ['finding.*'] }, 10)).length, 0, 'carrying a finding on is no event');
}

t.test('SQLite: a version 17 database turns its repeated audit changes into findings', async (t) => {
  const path = join(programDir(t), 'capstan.db');
  const db = sqliteAt(path, OLD);
  for (const [sql, values] of oldRows(() => '?', (b) => (b ? 1 : 0))) db.prepare(sql).run(...values);
  db.close();
  const store = await openRegistry({ sqlitePath: path });
  t.teardown(() => store.close());
  await check(t, store);
});

t.test('PostgreSQL: a version 17 database turns its repeated audit changes into findings', async (t) => {
  const why = await pgUnavailable();
  if (why) return t.plan(0, why);
  const { client, schema } = await postgresAt(t, OLD, 'capstan_findings');
  for (const [sql, values] of oldRows((i) => `$${i}`, (b) => b)) await client.query(sql, values);
  const store = await openRegistry({ databaseUrl: PG_URL, schema });
  t.teardown(() => store.close());
  await check(t, store);
});
