/**
 * A new expectation list that only adds components to a node's previous one (a directive added
 * to a rule the node has, a rule added to one of its groups: a fleet's commonest wide change),
 * applied to the node's stored directive rows instead of its run. The rows were counted from the
 * node's last run against the previous list; an added component the run reported on shows in its
 * directive's row as an unexpected item (it was not expected then). A directive row without one
 * means the run reported on none of that directive's added components, so under the new list
 * each of them is one more missing item and nothing else moves: the run's outcomes need not be
 * unpacked and judged again. Any unexpected item under such a directive, and the node is judged
 * from its run as before.
 */
import { COUNT_COLUMNS, type DirectiveRow } from './rows.js';
import { zeroCounts } from '@capstan/shared/compliance/compute';
import type { ExpectedComponent } from './types.js';

/** The components a list adds under one (rule, directive). */
export interface DirectiveAddition {
  rule_id: string;
  directive_id: string;
  added: number;
}

type List = readonly ExpectedComponent[];
const componentKey = (c: ExpectedComponent) => `${c.rule_id}\u0000${c.directive_id}\u0000${c.component}`;
const directiveKey = (rule: string, directive: string) => `${rule}\u0000${directive}`;
/** listAdditions' answers, by pair of lists (a batch's nodes share a handful; parsed lists are kept by digest). */
const ADDITIONS = new WeakMap<List, WeakMap<List, ReadonlyMap<string, DirectiveAddition> | null>>();

/**
 * What `b` adds to `a`, by (rule, directive), when it only adds: both lists expect something and
 * every component of `a` is in `b`. null otherwise; empty when they have the same components.
 * Worked out once per pair of lists.
 */
export function listAdditions(a: List, b: List): ReadonlyMap<string, DirectiveAddition> | null {
  let byB = ADDITIONS.get(a);
  if (!byB) ADDITIONS.set(a, (byB = new WeakMap()));
  let out = byB.get(b);
  if (out !== undefined) return out;
  out = null;
  if (a.length > 0 && b.length > 0) {
    const inA = new Set(a.map(componentKey));
    const inB = new Set<string>();
    const added = new Map<string, DirectiveAddition>();
    for (const c of b) {
      const k = componentKey(c);
      if (inB.has(k)) continue;
      inB.add(k);
      if (inA.has(k)) continue;
      const dk = directiveKey(c.rule_id, c.directive_id);
      const d = added.get(dk);
      if (d) d.added++;
      else added.set(dk, { rule_id: c.rule_id, directive_id: c.directive_id, added: 1 });
    }
    if ([...inA].every((k) => inB.has(k))) out = added;
  }
  byB.set(b, out);
  return out;
}

/**
 * A node's directive rows under the new list: its stored rows (arrays in DIRECTIVE_ROW_COLUMNS
 * order) with each added component one more missing, and a row for a directive it had none of;
 * null when a directive with added components has an unexpected item (the run may have
 * reported on one of them: judge it from the run). Given only the stored rows of the directives
 * that gain components, it gives only theirs: the others stay as they are.
 */
export function rowsWithAdditions(stored: readonly unknown[][], added: ReadonlyMap<string, DirectiveAddition>): DirectiveRow[] | null {
  const rows = directiveRowsOf(stored);
  const met = new Set<string>();
  for (const { rule_id, directive_id, counts } of rows) {
    const k = directiveKey(rule_id, directive_id);
    const a = added.get(k);
    if (a) {
      if (counts.unexpected !== 0) return null;
      counts.missing += a.added;
      met.add(k);
    }
  }
  for (const [k, a] of added) if (!met.has(k)) rows.push({ rule_id: a.rule_id, directive_id: a.directive_id, counts: { ...zeroCounts(), missing: a.added } });
  return rows;
}

/** Stored directive rows (arrays in DIRECTIVE_ROW_COLUMNS order) as rows. */
export function directiveRowsOf(stored: readonly unknown[][]): DirectiveRow[] {
  return stored.map((r) => {
    const counts = zeroCounts();
    COUNT_COLUMNS.forEach((c, i) => (counts[c] = Number(r[i + 2])));
    return { rule_id: r[0] as string, directive_id: r[1] as string, counts };
  });
}

/**
 * A node's counts under the new list, from its stored counts (`cur`: a row with the count
 * columns): each added component one more missing, as rowsWithAdditions counts it under its
 * directive (a node's counts are the sum of its directive rows).
 */
export function countsWithAdditions(cur: Readonly<Record<string, unknown>>, added: ReadonlyMap<string, DirectiveAddition>): DirectiveRow['counts'] {
  const counts = zeroCounts();
  for (const c of COUNT_COLUMNS) counts[c] = Number(cur[c]);
  for (const a of added.values()) counts.missing += a.added;
  return counts;
}

/** A node's counts: the sum of its directive rows (each item is under one). */
export function countsOfRows(rows: readonly DirectiveRow[]): DirectiveRow['counts'] {
  const counts = zeroCounts();
  for (const r of rows) for (const c of COUNT_COLUMNS) counts[c] += r.counts[c];
  return counts;
}
