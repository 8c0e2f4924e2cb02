/**
 * U+0000 at the store's door. PostgreSQL cannot hold it in text and SQLite can, so without one
 * rule in front each backend answered its own way: a coded refusal, a driver error, "not found",
 * or a row SQLite stored that PostgreSQL never could. Every method of every part of the store
 * says what it does with U+0000, in a table beside its interface (typed by it, so a new method
 * cannot be added without a rule), and the facade applies the rule before the method runs:
 *
 * - REFUSE: the arguments are values to store or to compare with: ERR_BAD_REQUEST when one holds
 *   U+0000 anywhere (input.ts refuseNul).
 * - lookup(keys, absent): the arguments at `keys` name stored rows, and no stored name holds
 *   U+0000 (it was refused on the way in): such a name finds nothing, so the method answers
 *   `absent` without asking; from a list of names those with U+0000 are dropped, and an object of
 *   names (a cloud identity, an audit query) is absent as a whole. Other arguments are REFUSEd.
 * - CHECKED: the method's own input check in input.ts decides, because part of what it carries
 *   is kept as sent (an inventory document, a run's outcomes) or a batch refuses run by run.
 * - STRIP: U+0000 is dropped from the strings (the audit log records every request, even one
 *   whose path carried it).
 */
import { refuseNul } from './input.js';

export const REFUSE = 'refuse';
export const CHECKED = 'checked';
export const STRIP = 'strip';

export interface Lookup<R> {
  keys: readonly number[];
  /** The answer for a name that cannot exist; absent for lists of names only. */
  absent?: (...args: never[]) => R;
}

export type NulRule<R = unknown> = typeof REFUSE | typeof CHECKED | typeof STRIP | Lookup<R>;

/** One rule per method of `T`, each typed by the method's answer. */
export type NulRules<T> = {
  readonly [K in keyof T]-?: T[K] extends (...args: never[]) => Promise<infer R> ? NulRule<R> : never;
};

export function lookup<R>(keys: readonly number[], absent?: (...args: never[]) => R): Lookup<R> {
  return absent ? { keys, absent } : { keys };
}

const hasNul = (v: unknown) => typeof v === 'string' && v.includes('\u0000');
const NO_ANSWER = Symbol('no answer');

/** `impl`'s methods named in `rules`, each behind its rule. */
export function guard<T extends object>(impl: T, rules: NulRules<T>): T {
  const out: Record<string, unknown> = {};
  for (const [name, rule] of Object.entries(rules) as Array<[string, NulRule]>) {
    const method = (impl as Record<string, (...args: unknown[]) => Promise<unknown>>)[name]!.bind(impl);
    out[name] = rule === CHECKED ? method : async (...args: unknown[]) => {
      if (rule === STRIP) return method(...args.map(strip));
      const keys = rule === REFUSE ? [] : rule.keys;
      for (const [i, a] of args.entries()) if (!keys.includes(i)) refuseNul(a);
      const answer = rule === REFUSE ? NO_ANSWER : absentFor(rule, args);
      return answer === NO_ANSWER ? method(...args) : answer;
    };
  }
  return out as T;
}

/** The answer of a lookup naming what cannot exist, or NO_ANSWER (lists of names filtered in place). */
function absentFor(rule: Lookup<unknown>, args: unknown[]): unknown {
  for (const i of rule.keys) {
    const a = args[i];
    if (Array.isArray(a)) {
      if (a.some(hasNul)) args[i] = a.filter((v) => !hasNul(v));
      continue;
    }
    const named = typeof a === 'string' ? hasNul(a) : a !== null && typeof a === 'object' && Object.values(a).some(hasNul);
    if (!named) continue;
    // A list-only rule given a single name: that name is a value like any other.
    if (!rule.absent) refuseNul(a);
    return (rule.absent as (...args: unknown[]) => unknown)(...args);
  }
  return NO_ANSWER;
}

function strip(v: unknown): unknown {
  if (typeof v === 'string') return v.replaceAll('\u0000', '');
  if (v === null || typeof v !== 'object' || Array.isArray(v) || Buffer.isBuffer(v)) return v;
  return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, typeof x === 'string' ? x.replaceAll('\u0000', '') : x]));
}
