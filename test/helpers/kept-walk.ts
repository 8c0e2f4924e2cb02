/**
 * The random walk the kept-counter tests take over a small fleet, on either store: policies (some
 * expecting nothing; one node's, or a generation's batch of several), runs (complete or not,
 * back-filled, with unexpected items), deletions and re-registrations, acceptance, relay and
 * state changes, agentless nodes, expiration policies, sweeps and clock moves. After each step
 * the caller's `compare` reads what it keeps against what it computes afresh, at the current
 * moment and now and then at another.
 *
 * A step's reads run together (on PostgreSQL, over the pool's connections: most of a read is
 * waiting for the server), and only reads: nothing is written while they run. `compare` takes
 * what it draws from the generator before its first `await`, so the walk draws the same numbers
 * in the same order as one read after the other would.
 */
import type { ComplianceClock, Store } from '@capstan/server/store/index';
import { inventory, run } from '../server/store-suite.js';
import { setAcceptance, setState, updateNode } from './node-changes.js';
import type { prng } from './prng.js';

export const AGENTS = Array.from({ length: 14 }, (_, i) => `w${String(i).padStart(2, '0')}`);
export const MANUAL = ['m0', 'm1', 'm2'];
export const NODES = [...AGENTS, ...MANUAL];
export const COMPONENTS = [
  ['r1', 'd1', 'File /etc/motd'], ['r1', 'd1', 'Service sshd'], ['r1', 'd2', 'Package vim'],
  ['r2', 'd3', 'Command check'], ['r2', 'd3', 'Sysctl'], ['r3', 'd4', 'User ops'],
] as const;
export const OUTCOMES = ['result_success', 'result_repaired', 'result_error', 'result_na', 'audit_compliant', 'audit_noncompliant'];
export const BASE_S = Date.parse('2024-05-01T08:00:00Z') / 1000;
export const clockAt = (now_s: number): ComplianceClock => ({ now_s, silence_s: 900, applying_s: 600 });
export const iso = (s: number) => new Date(s * 1000).toISOString();

export type Compare = (clock: ComplianceClock, step: number, what: string) => Promise<void>;

/**
 * Every promise settled, then the first failure thrown (Promise.all would throw at once and leave
 * the others running against the store while the test goes on or closes it).
 */
export async function settled<T extends readonly unknown[] | []>(ps: T): Promise<{ -readonly [P in keyof T]: Awaited<T[P]> }> {
  const out = await Promise.allSettled(ps as readonly unknown[]);
  const failed = out.find((o): o is PromiseRejectedResult => o.status === 'rejected');
  if (failed) throw failed.reason;
  return out.map((o) => (o as PromiseFulfilledResult<unknown>).value) as { -readonly [P in keyof T]: Awaited<T[P]> };
}

/**
 * Every node registered, then `steps` random steps, each followed by `compare`; then a last
 * sweep and comparison. Answers the moment the walk ended and how many times a node applying or
 * silent with only unexpected items was met (the walk must meet some).
 */
export async function keptWalk(store: Store, r: ReturnType<typeof prng>, steps: number, compare: Compare): Promise<{ now: number; forcedUnexpected: number }> {
  let now = BASE_S;
  const present = new Set<string>();
  let started = 0;
  let forced = 0;
  const register = async (id: string) => {
    if (MANUAL.includes(id)) await store.createNode({ id, hostname: `${id}.example.com` });
    else await store.upsertFromInventory(inventory(id, { received_at: iso(now) }));
    if (r.next() < 0.85) await setAcceptance(store, id, 'accepted', iso(now));
    present.add(id);
  };
  for (const id of NODES) await register(id);
  // Nodes the sorts treat apart: applying or silent at `clock` with unexpected items alone.
  const forcedUnexpected = async (clock: ComplianceClock) => {
    const [stored, atClock] = await settled([
      store.complianceNodes(null, 100, { now_s: clock.now_s, silence_s: 1e10, applying_s: -1e10 }), store.complianceNodes(null, 100, clock),
    ]);
    const judged = new Map(atClock.map((n) => [n.node_id, n]));
    return stored.filter((n) => n.class === 'agent' && n.counts.unexpected > 0
      && Object.values(n.counts).reduce((a, b) => a + b, 0) === n.counts.unexpected
      && judged.get(n.node_id)!.counts.unexpected === 0).length;
  };

  for (let step = 0; step < steps; step++) {
    const id = r.pick(NODES);
    const op = r.int(100);
    let what: string;
    if (!present.has(id)) {
      what = `register ${id}`;
      await register(id);
    } else if (op < 25) {
      what = `policy ${id}`;
      // Now and then a policy expecting nothing: a run's items are then all unexpected.
      const items = r.next() < 0.15 ? [] : COMPONENTS.filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
      if (r.next() < 0.5) {
        await store.setExpectations(id, `cfg-${r.int(3)}`, items, iso(now), r.next() < 0.2 ? { keep_last_s: r.pick([0, 600, 3600]) } : {});
      } else {
        // A generation's batch (putPolicies): several nodes' policies in one write, as the
        // generator writes them, with the drill-down keys made once for the batch on SQLite.
        const others = [...present].filter((o) => o !== id && r.next() < 0.25);
        what = `policies ${[id, ...others].join(' ')}`;
        // Now and then the same components under another config id (a template's new values):
        // the node's rows stay as they were counted, its marks move.
        const previous = (await store.getNode(id))?.policy_config_id ?? null;
        const same = previous !== null && r.next() < 0.4 ? await store.getExpectations(id, previous) : null;
        await store.putPolicies([id, ...others].map((node_id, k) => {
          const mine = k === 0 ? same ?? items : COMPONENTS.filter(() => r.next() < 0.6).map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
          const config_id = `cfg-${r.int(3)}`;
          return { bundle: { node_id, config_id, generated_at: iso(now), bundle: `{"config_id":"${config_id}"}` }, expected: mine };
        }));
      }
    } else if (op < 62) {
      what = `run ${id}`;
      const at = now - (r.next() < 0.15 ? 3600 : 0) - r.int(30);
      const outcomes: Array<{ rule_id: string; directive_id: string; component: string; outcome: string; count: number }> = COMPONENTS.filter(() => r.next() < 0.6)
        .map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component, outcome: r.pick(OUTCOMES), count: 1 }));
      if (r.next() < 0.3) outcomes.push({ rule_id: 'r9', directive_id: 'd9', component: 'Extra', outcome: r.pick(OUTCOMES), count: 1 });
      // Now and then a report type that is not RUDDER's alone: unexpected, even with nothing expected.
      if (r.next() < 0.15) outcomes.splice(0, outcomes.length, { rule_id: 'r9', directive_id: 'd9', component: 'Odd', outcome: 'result_odd', count: 1 });
      const config = (await store.getNode(id))?.policy_config_id ?? null;
      await store.insertRun(run(id, `${iso(at).slice(0, 19)}.${String(started++ % 1000).padStart(3, '0')}Z`, {
        config_id: r.next() < 0.8 ? config ?? 'cfg-x' : `cfg-${r.int(3)}`, complete: r.next() < 0.9, outcomes, received_at: iso(now),
      }));
    } else if (op < 68) {
      what = `delete ${id}`;
      await store.deleteNode(id, iso(now));
      present.delete(id);
    } else if (op < 76) {
      const to = r.pick(['accepted', 'refused', 'pending'] as const);
      what = `acceptance ${id} ${to}`;
      await setAcceptance(store, id, to, iso(now)).catch(() => undefined);
    } else if (op < 82) {
      what = `relay ${id}`;
      await updateNode(store, id, { relay: r.next() < 0.5 }, iso(now)).catch(() => undefined);
    } else if (op < 86) {
      const to = r.pick(['running', 'stopped', 'missing']);
      what = `state ${id} ${to}`;
      await setState(store, id, to, iso(now)).catch(() => undefined);
    } else if (op < 89) {
      what = 'keep last';
      await store.setKeepLast(NODES.filter(() => r.next() < 0.5), r.pick([0, 300, 1800]));
    } else if (op < 95) {
      what = 'sweep';
      await store.sweepCompliance(clockAt(now + r.int(1200) - 300));
    } else {
      what = 'clock';
    }
    // Time goes by, mostly a little, now and then past the silence window.
    now += r.next() < 0.1 ? 1200 + r.int(2400) : r.int(240);
    const reads = [compare(clockAt(now), step, what)];
    if (step % 3 === 0) reads.push(compare(clockAt(now + r.int(4000) - 2000), step, `${what}, read at another moment`));
    reads.push(forcedUnexpected(clockAt(now)).then((n) => {
      forced += n;
    }));
    await settled(reads);
  }
  await store.sweepCompliance(clockAt(now));
  await compare(clockAt(now), steps, 'last sweep');
  return { now, forcedUnexpected: forced };
}
