/**
 * The kept counters' upkeep benchmark runs on a small fleet (the full one is
 * `npm run bench -- --only upkeep`): every step updates every compliance row, the mode step
 * leaves every kept node applying (checked by the benchmark itself), and the triggers' log rows
 * are counted, and the fleet goes silent twice, swept at once and in steps. Without PostgreSQL it says so in a figure without a value.
 * Skipped with the reason when PostgreSQL is unreachable (and failed instead when CI=true).
 */
import t from 'tap';
import { benchUpkeep, type UpkeepResult } from '@capstan/bench/upkeep';
import { PG_URL, postgresOrSkipFile } from '../server/pg.js';

t.test('without PostgreSQL: one figure saying why, no value', async (t) => {
  const r = await benchUpkeep({});
  t.match(r, { figures: [{ name: 'postgres', value: null, note: /PostgreSQL/ }] });
});

t.test('a batch or fleet that is not a positive integer is refused before anything is loaded', async (t) => {
  await t.rejects(benchUpkeep({ databaseUrl: PG_URL, batch: 0 }), /batch must be a positive integer/);
  await t.rejects(benchUpkeep({ databaseUrl: PG_URL, nodes: -3 }), /nodes must be a positive integer/);
  await t.rejects(benchUpkeep({ databaseUrl: PG_URL, batch: 1.5 }), /batch must be a positive integer/);
  await t.rejects(benchUpkeep({ databaseUrl: PG_URL, sweepStep: 0 }), /sweepStep must be a positive integer/);
});

if (await postgresOrSkipFile(t)) {
  t.test('on a small fleet: every step over every compliance row, the log rows counted', async (t) => {
    const lines: string[] = [];
    const r = (await benchUpkeep({ databaseUrl: PG_URL, nodes: 400, batch: 64, sweepStep: 50, log: (l) => lines.push(l) })) as UpkeepResult;
    t.equal(r.nodes, 400);
    t.ok(r.compliance_rows > 300 && r.compliance_rows <= 400, `${r.compliance_rows} compliance rows`);
    for (const [name, s] of Object.entries(r.steps)) {
      t.ok(s.wall_ms >= 0, `${name}: timed`);
      t.ok(s.db_cpu_ms === null || s.db_cpu_ms >= 0, `${name}: the database's CPU when it runs here`);
    }
    t.ok(r.log_rows.fleet > 0 && r.log_rows.groups > 0 && r.log_rows.directives > 0 && r.log_rows.rules > 0, 'the counters moved into their logs');
    t.equal(lines.filter((l) => l.includes(`${r.compliance_rows} rows`)).length, 4, 'each step logged');
    // Both sweeps leave every node silent (the benchmark checks it); the stepped one in steps of 50.
    t.equal(r.sweeps.one_step.steps, 1, 'one step');
    t.ok(r.sweeps.one_step.nodes_moved >= r.compliance_rows, `every node moved at once (${r.sweeps.one_step.nodes_moved})`);
    t.ok(r.sweeps.stepped.steps >= r.compliance_rows / 50, `in steps (${r.sweeps.stepped.steps})`);
    t.ok(r.sweeps.stepped.nodes_moved >= r.compliance_rows, `every node moved step by step (${r.sweeps.stepped.nodes_moved})`);
    t.ok(r.sweeps.stepped.longest_step_ms <= r.sweeps.stepped.wall_ms, 'the longest step is part of the sweep');
  });
}
