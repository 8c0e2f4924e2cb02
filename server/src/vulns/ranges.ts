/**
 * Whether an installed version falls in an OSV affected entry, and which part of the entry says
 * so: the schema's evaluation (a version in `versions`, or in a range whose sorted events leave
 * it vulnerable, below a `limit` when there is one), plus the interval it fell in as the feed
 * wrote it (introduced, and the fixed or last_affected that closes it), which is the reason
 * Capstan shows.
 *
 * An entry is compiled once (its events sorted in the ecosystem's order) and then answers any
 * number of versions. Ranges Capstan cannot order (GIT, SEMVER in a distribution's feed, any
 * range of an ecosystem without a checked order) are reported as not evaluated, never guessed.
 */
import type { Affected, OsvEvent, OsvRange } from './osv.js';

export type Order = (a: string, b: string) => number;

/** The interval of one range the version fell in, as the feed wrote its bounds. */
export interface RangeReason {
  type: OsvRange['type'];
  introduced: string;
  fixed?: string;
  last_affected?: string;
  limit?: string;
}

export type Verdict =
  | { affected: true; listed: true }
  | { affected: true; listed: false; range: RangeReason; fixed: string | null }
  | { affected: false; unevaluated?: string };

interface CompiledRange {
  source: OsvRange;
  events: Array<{ kind: keyof OsvEvent; value: string }>;
  limits: string[];
}

export interface CompiledEntry {
  versions: Set<string>;
  ranges: CompiledRange[];
  /** Why the entry cannot be decided (only ranges Capstan cannot order, no `versions`); '' when it can. */
  unevaluable: string;
}

/** introduced "0" sorts before every version; otherwise the ecosystem's order; ties keep the feed's order. */
function sortEvents(events: OsvEvent[], order: Order): CompiledRange['events'] {
  const flat = events.map((e, i) => {
    const kind = Object.keys(e)[0] as keyof OsvEvent;
    return { kind, value: e[kind]!, i };
  });
  flat.sort((a, b) => {
    const za = a.kind === 'introduced' && a.value === '0';
    const zb = b.kind === 'introduced' && b.value === '0';
    if (za || zb) return za && zb ? a.i - b.i : za ? -1 : 1;
    return order(a.value, b.value) || a.i - b.i;
  });
  return flat.map(({ kind, value }) => ({ kind, value }));
}

export function compileEntry(entry: Affected, order: Order | null): CompiledEntry {
  const ranges: CompiledRange[] = [];
  const why: string[] = [];
  for (const r of entry.ranges) {
    if (r.type === 'GIT') {
      why.push('GIT ranges need the repository');
      continue;
    }
    if (r.type === 'SEMVER') {
      why.push('SEMVER ranges are not a distribution package order');
      continue;
    }
    if (!order) {
      why.push(`no checked version order for ${entry.ecosystem}`);
      continue;
    }
    const limits = r.events.filter((e) => e.limit !== undefined && e.limit !== '*').map((e) => e.limit!);
    const onlyStar = r.events.some((e) => e.limit === '*');
    ranges.push({ source: r, events: sortEvents(r.events.filter((e) => e.limit === undefined), order), limits: onlyStar ? [] : limits });
  }
  // Decided when some range can be evaluated, or when the feed lists the affected versions
  // (osv.dev expands ranges into `versions` for the ecosystems it can order, Alpine's included).
  const decided = ranges.length > 0 || entry.versions.length > 0 || entry.ranges.length === 0;
  return { versions: new Set(entry.versions), ranges, unevaluable: decided ? '' : [...new Set(why)].join('; ') };
}

/** The schema's IncludedInRanges for one range, keeping the interval that made it vulnerable. */
function inRange(r: CompiledRange, v: string, order: Order): RangeReason | null {
  if (r.limits.length && !r.limits.some((l) => order(v, l) < 0)) return null;
  let open: { introduced: string; at: number } | null = null;
  r.events.forEach((e, at) => {
    if (e.kind === 'introduced' && (e.value === '0' || order(v, e.value) >= 0)) open = { introduced: e.value, at };
    else if (e.kind === 'fixed' && order(v, e.value) >= 0) open = null;
    else if (e.kind === 'last_affected' && order(v, e.value) > 0) open = null;
  });
  if (!open) return null;
  const { introduced, at } = open as { introduced: string; at: number };
  const reason: RangeReason = { type: r.source.type, introduced };
  // The event that closes this interval: the next fixed or last_affected after its start.
  const close = r.events.slice(at + 1).find((e) => e.kind === 'fixed' || e.kind === 'last_affected');
  if (close?.kind === 'fixed') reason.fixed = close.value;
  if (close?.kind === 'last_affected') reason.last_affected = close.value;
  if (r.limits.length) reason.limit = r.limits.find((l) => order(v, l) < 0)!;
  return reason;
}

/** Is `version` affected by the entry? A `versions` list hit needs no order; ranges do. */
export function evaluate(c: CompiledEntry, version: string, order: Order | null): Verdict {
  if (c.versions.has(version)) return { affected: true, listed: true };
  if (order) {
    for (const r of c.ranges) {
      const range = inRange(r, version, order);
      if (range) return { affected: true, listed: false, range, fixed: range.fixed ?? null };
    }
  }
  return c.unevaluable ? { affected: false, unevaluated: c.unevaluable } : { affected: false };
}
