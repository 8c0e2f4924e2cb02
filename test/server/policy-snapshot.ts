/**
 * What a store shows of its nodes' compliance after a generation, for tests that compare two
 * stores driven the same way (a generation's batch against one setExpectations per node): every
 * node's base, every directive row as stored, the kept reads, findings and events.
 */
import type { ComplianceClock, Store } from '@capstan/server/store/index';
import { RUN_STATES } from '@capstan/shared/compliance/compute';
import type { Test } from 'tap';
import { setup, type Backend, type Db } from './store-suite.js';

/** Every directive row as stored: the aggregates above them can hide a stale one (an applying node shows no unexpected item). */
const ROWS_SQL = `SELECT node_id, rule_id, directive_id, ${RUN_STATES.join(', ')} FROM node_compliance_directives ORDER BY node_id, rule_id, directive_id`;

/** The snapshot of `store` at `clock`, with the bases of `ids`. */
export async function snapshot(store: Store, db: Db, clock: ComplianceClock, ids: readonly string[]) {
  const nodes = [];
  for (const id of ids) nodes.push(await store.getComplianceBase(id));
  return {
    nodes,
    rows: await db.rows!(ROWS_SQL),
    list: await store.complianceNodes(null, 1000, clock),
    directives: await store.complianceByRule('directive', clock),
    rules: await store.complianceByRule('rule', clock),
    summary: await store.complianceSummary([], clock),
    findings: (await store.listFindings({}, 1, 1000)).data,
    events: (await store.listEvents({}, 1000)).map(({ id: _id, ...e }) => e),
  };
}


/** A round's snapshot, with the fleet's directives and summary summed afresh beside it. */
export async function roundOf(store: Store, db: Db, clock: ComplianceClock, ids: readonly string[]) {
  return {
    snap: await snapshot(store, db, clock, ids),
    fresh: { directives: await store.complianceByRuleFresh('directive', clock), summary: await store.complianceSummaryFresh(clock) },
  };
}

type Round = Awaited<ReturnType<typeof roundOf>>;

/**
 * Two stores of `backend` driven the same way, one through putPolicies batches and one through
 * setExpectations per node: each round's snapshots must be equal, and the kept counters the
 * fresh sums. Returns the batched store's rounds.
 */
export async function batchedAgainstSingle<R extends Round>(
  t: Test, backend: Backend, drive: (store: Store, db: Db, batch: boolean) => Promise<R[]>, name: (i: number, round: R) => string,
): Promise<R[]> {
  const a = await setup(t, backend);
  const b = await setup(t, backend);
  const batched = await drive(a.store, a.db, true);
  const single = await drive(b.store, b.db, false);
  for (const [i, s] of batched.entries()) {
    t.same(s.snap, single[i]!.snap, name(i, s));
    t.same({ directives: s.snap.directives, summary: s.snap.summary }, s.fresh, `round ${i}: kept counters equal the fresh sums`);
  }
  return batched;
}
