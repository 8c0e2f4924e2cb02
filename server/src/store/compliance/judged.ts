/**
 * Runs judged once per outcome set, for a policy generation's batch. A fleet's nodes under the
 * same rules report the same outcomes run after run (a component's outcome and count, no time,
 * no host name: shared RunOutcome), and their packed form is the same bytes (packing is
 * deterministic, runs/outcomes.ts). A generation judges each node's last run against its new
 * list: most of the batch's nodes then unpack, parse and judge the same bytes against the same
 * list. A RunJudge does it once per distinct packed value and once per (list, outcome set).
 *
 * What it hands out is shared between the nodes of the batch, so it is frozen: a caller that
 * changed a node's outcomes or rows in place would change every node's (and throws instead).
 * Rows without a packed form (stored before migration 8) are parsed each time and not shared.
 *
 * A stored value that cannot be read is judged as no outcomes (runs/outcomes.ts
 * complianceOutcomes) and told to `onUnreadable` for each node that holds it; it is not shared.
 *
 * Bounded: at most MAX_SETS outcome sets and MAX_KEY_BYTES of packed bytes are remembered (a
 * batch whose runs all differ stops remembering and judges each as before). A RunJudge lives as
 * long as the batch that made it.
 */
import { complianceOutcomes, type OnUnreadable } from '../runs/outcomes.js';
import type { RunSummaryOutcome } from '../runs/types.js';
import { complianceRows, type ComplianceInput, type ComplianceRows } from './rows.js';
import type { ExpectedComponent } from './types.js';

/** Outcome sets remembered by one RunJudge. */
export const MAX_SETS = 1024;
/** Packed bytes remembered by one RunJudge (the keys). */
export const MAX_KEY_BYTES = 8 * 1024 * 1024;

/** Each element and the array made read-only. */
function frozen<T extends object>(list: T[]): T[] {
  for (const x of list) Object.freeze(x);
  return Object.freeze(list) as T[];
}

/** A judgement made read-only: its items, its counts and its directives' rows. */
function frozenRows(rows: ComplianceRows): ComplianceRows {
  frozen(rows.items);
  for (const d of rows.directives) Object.freeze(d.counts);
  frozen(rows.directives);
  Object.freeze(rows.counts);
  return Object.freeze(rows);
}

export class RunJudge {
  private readonly parsed = new Map<string, RunSummaryOutcome[]>();
  /** The outcome arrays this judge handed out: only those are judged once per list. */
  private readonly own = new WeakSet<readonly RunSummaryOutcome[]>();
  private readonly judged = new WeakMap<readonly ExpectedComponent[], WeakMap<readonly RunSummaryOutcome[], ComplianceRows>>();
  private keyBytes = 0;

  /** Sets parsed, and asks answered from what was parsed or judged before (for tests and benchmarks). */
  readonly stats = { parsed: 0, shared: 0, judged: 0, reused: 0 };

  constructor(private readonly onUnreadable?: OnUnreadable) {}

  /** Node `nodeId`'s stored outcomes (complianceOutcomes), the same array for the same packed bytes. */
  outcomes(nodeId: string, packed: unknown, legacy: unknown): RunSummaryOutcome[] {
    if (!Buffer.isBuffer(packed)) return complianceOutcomes(nodeId, packed, legacy, this.onUnreadable);
    const key = packed.toString('latin1');
    const known = this.parsed.get(key);
    if (known !== undefined) {
      this.stats.shared++;
      return known;
    }
    this.stats.parsed++;
    let unreadable = false;
    const outcomes = frozen(complianceOutcomes(nodeId, packed, legacy, (what) => {
      unreadable = true;
      this.onUnreadable?.(what);
    }));
    if (unreadable) return outcomes;
    if (this.parsed.size < MAX_SETS && this.keyBytes + key.length <= MAX_KEY_BYTES) {
      this.parsed.set(key, outcomes);
      this.keyBytes += key.length;
    }
    this.own.add(outcomes);
    return outcomes;
  }

  /** rows.ts complianceRows, once per (list, outcome set) for the outcome sets this judge handed out. */
  rows(input: ComplianceInput): ComplianceRows {
    const expected = input.expected;
    if (expected === null || !this.own.has(input.outcomes)) return complianceRows(input);
    let byOutcomes = this.judged.get(expected);
    if (byOutcomes === undefined) this.judged.set(expected, (byOutcomes = new WeakMap()));
    const known = byOutcomes.get(input.outcomes);
    if (known !== undefined) {
      this.stats.reused++;
      return known;
    }
    this.stats.judged++;
    const rows = frozenRows(complianceRows(input));
    byOutcomes.set(input.outcomes, rows);
    return rows;
  }
}
