/**
 * The events benchmark runs briefly (the full one is `npm run bench -- --only events`): both
 * phases write events through the store, counted and timed, and what they wrote is there, in
 * the order of their ids. Without PostgreSQL it says so in a figure without a value.
 * Skipped with the reason when PostgreSQL is unreachable (and failed instead when CI=true).
 */
import t from 'tap';
import { benchEvents, type EventsResult } from '@capstan/bench/events';
import { PG_URL, postgresOrSkipFile } from '../server/pg.js';

t.test('without PostgreSQL: one figure saying why, no value', async (t) => {
  t.match(await benchEvents({}), { figures: [{ name: 'postgres', value: null, note: /PostgreSQL/ }] });
});

t.test('writers, seconds and the busy time must be positive integers', async (t) => {
  await t.rejects(benchEvents({ databaseUrl: PG_URL, writers: 0 }), /writers must be a positive integer/);
  await t.rejects(benchEvents({ databaseUrl: PG_URL, seconds: 0.5 }), /seconds must be a positive integer/);
  await t.rejects(benchEvents({ databaseUrl: PG_URL, busyMs: -1 }), /busyMs must be a positive integer/);
});

if (await postgresOrSkipFile(t)) {
  t.test('a second of each phase: events written, counted and timed', async (t) => {
    const lines: string[] = [];
    const r = (await benchEvents({ databaseUrl: PG_URL, writers: 4, seconds: 1, busyMs: 2, log: (l) => lines.push(l) })) as EventsResult;
    t.match(r, { writers: 4, seconds: 1, busy_ms: 2 });
    for (const [name, p] of [['idle', r.idle], ['busy', r.busy]] as const) {
      t.ok(p.events > 0 && p.per_s === p.events, `${name}: ${p.events} events`);
      t.ok(p.p50_ms > 0 && p.p50_ms <= p.p99_ms, `${name}: p50 ${p.p50_ms} ms ≤ p99 ${p.p99_ms} ms`);
    }
    t.equal(lines.length, 2, 'each phase logged');
  });
}
