/**
 * Events written by concurrent writers on PostgreSQL: every writer of events takes one advisory
 * lock to its commit (ids follow the order of commits, store/events/postgres.ts), so the events
 * of a fleet's servers are written one transaction at a time, and what counts is how long each
 * holds the lock. `writers` loops each write one event per transaction through the store for
 * `seconds`, first with the process otherwise idle, then with its event loop kept busy half the
 * time (`busy_ms` of synchronous work every 2 × `busy_ms`), as a server's is while it parses run
 * logs: a holder whose next statement waits for its event loop to turn holds the lock the longer.
 */
import { withPostgres } from './store.js';

export interface EventsOptions {
  databaseUrl?: string;
  writers?: number;
  seconds?: number;
  busyMs?: number;
  log?: (line: string) => void;
}

interface Phase {
  events: number;
  per_s: number;
  p50_ms: number;
  p99_ms: number;
}

export interface EventsResult {
  writers: number;
  seconds: number;
  busy_ms: number;
  idle: Phase;
  busy: Phase;
}

const quantile = (xs: number[], q: number) => {
  const s = [...xs].sort((a, b) => a - b);
  return s.length === 0 ? 0 : Math.round(s[Math.min(s.length - 1, Math.floor(q * s.length))]! * 10) / 10;
};

/** Without PostgreSQL there is nothing to measure: one figure without a value says why. */
export async function benchEvents(o: EventsOptions = {}): Promise<EventsResult | { figures: Array<{ name: string; value: null; unit: string; note: string }> }> {
  if (!o.databaseUrl) return { figures: [{ name: 'postgres', value: null, unit: '', note: 'PostgreSQL unreachable: the lock measured is its own' }] };
  const writers = o.writers ?? 16;
  const seconds = o.seconds ?? 10;
  const busyMs = o.busyMs ?? 5;
  for (const [name, v] of [['writers', writers], ['seconds', seconds], ['busyMs', busyMs]] as const) {
    if (!Number.isSafeInteger(v) || v < 1) throw new Error(`events bench: ${name} must be a positive integer (got ${v})`);
  }
  const log = o.log ?? (() => undefined);
  return withPostgres(o.databaseUrl, { schemaPrefix: 'capstan_bench_', poolSize: writers }, async (store) => {
    const phase = async (name: string): Promise<Phase> => {
      const times: number[] = [];
      const end = performance.now() + seconds * 1000;
      await Promise.all(Array.from({ length: writers }, async (_, w) => {
        while (performance.now() < end) {
          const t0 = performance.now();
          await store.insertEvents([{ at: new Date().toISOString(), type: 'node.accepted', severity: 'info', node_id: `bench-${w}`, data: { by: 'bench' } }]);
          times.push(performance.now() - t0);
        }
      }));
      const p = { events: times.length, per_s: Math.round(times.length / seconds), p50_ms: quantile(times, 0.5), p99_ms: quantile(times, 0.99) };
      log(`events bench: ${name}: ${p.events} events by ${writers} writers in ${seconds} s (${p.per_s}/s), p50 ${p.p50_ms} ms, p99 ${p.p99_ms} ms`);
      return p;
    };
    const idle = await phase('event loop idle');
    const spin = setInterval(() => {
      const until = performance.now() + busyMs;
      while (performance.now() < until) { /* the event loop held, as by a run log's parse */ }
    }, busyMs * 2);
    try {
      const busy = await phase(`event loop busy ${busyMs} ms of every ${busyMs * 2}`);
      return { writers, seconds, busy_ms: busyMs, idle, busy };
    } finally {
      clearInterval(spin);
    }
  });
}
