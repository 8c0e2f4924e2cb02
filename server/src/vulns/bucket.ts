/**
 * One (ecosystem, package name) of the index: its advisories' affected entries, and what each
 * installed version seen so far gives against them, remembered. A fleet has a handful of versions
 * of each package, so the entries are evaluated a few times per package, not once per node, and
 * every node with the same version shares the same frozen `Match` objects.
 */
import { compareRpmVersions, parseEvr } from '@capstan/shared/filter/rpm-version';
import { versionOrder, type Family } from './ecosystems.js';
import type { Advisory, Affected, Severity } from './osv.js';
import { evaluate, type CompiledEntry, type Order, type RangeReason } from './ranges.js';

/** Why an advisory affects a package at an installed version: shared by every node with that version. */
export interface Match {
  advisory: string;
  cves: string[];
  /** The affected entry's ecosystem as the feed wrote it, and the release it applies to ('' = every release). */
  ecosystem: string;
  release: string;
  /** The feed's package name that matched, and whether it is the package's own name or its source's. */
  name: string;
  via: 'name' | 'source';
  /** The version compared with the feed's: source version (deb), epoch:version-release (rpm). */
  compared: string;
  /** Matched by the entry's `versions` list. */
  listed?: true;
  /** The range interval it falls in, bounds as the feed wrote them. */
  range?: RangeReason;
  /** The first version that fixes it, when the feed gives one. */
  fixed: string | null;
  severity: Severity | null;
  /** A caveat on this match (an epoch the inventory did not give). */
  note?: string;
}

export interface Unevaluated {
  advisory: string;
  package: string;
  ecosystem: string;
  why: string;
}

export interface Entry {
  advisory: Advisory;
  affected: Affected;
  compiled: CompiledEntry;
  cves: string[];
  severity: Severity | null;
}

/** `exact`, or `no-epoch` for an RPM package whose inventory gives no epoch. */
export type Mode = 'exact' | 'no-epoch';
export type Outcome = { match: Match } | { unevaluated: Unevaluated };

/** One (ecosystem, name): its entries and what each version seen so far gives. */
export class Bucket {
  entries: Entry[] = [];
  /**
   * Installed version → outcomes, per (via, mode): a short list scanned in place, because a
   * fleet has a handful of versions of a package and comparing a few strings (the same string
   * objects, mostly) costs less than a hash lookup's hops through memory; a map past that.
   */
  private keys: Array<string[] | undefined> = [];
  private vals: Array<Outcome[][] | undefined> = [];
  private more: Array<Map<string, Outcome[]> | undefined> = [];
  private cached = 0;
  /** Versions kept in the scanned list; then in a map. */
  static SHORT = 8;
  /** Distinct versions remembered per package; beyond it the memo restarts (bounded memory). */
  static MAX_CACHED = 256;

  constructor(readonly family: Family) {}

  invalidate(): void {
    this.keys = [];
    this.vals = [];
    this.more = [];
    this.cached = 0;
  }

  outcomes(compared: string, via: Match['via'], mode: Mode): Outcome[] {
    const slot = (via === 'name' ? 0 : 2) + (mode === 'exact' ? 0 : 1);
    const keys = this.keys[slot];
    if (keys) {
      for (let i = 0; i < keys.length; i++) if (keys[i] === compared) return this.vals[slot]![i]!;
      const hit = this.more[slot]?.get(compared);
      if (hit) return hit;
    }
    const out = this.compute(compared, via, mode);
    if (this.cached >= Bucket.MAX_CACHED) this.invalidate();
    this.cached++;
    const k = (this.keys[slot] ??= []);
    if (k.length < Bucket.SHORT) {
      k.push(compared);
      (this.vals[slot] ??= []).push(out);
    } else (this.more[slot] ??= new Map()).set(compared, out);
    return out;
  }

  private compute(compared: string, via: Match['via'], mode: Mode): Outcome[] {
    const base = versionOrder(this.family);
    const order: Order | null = base && mode === 'no-epoch' ? withoutEpochs : base;
    const out: Outcome[] = [];
    const matched = new Set<string>();
    for (const e of this.entries) {
      const v = evaluate(e.compiled, compared, order);
      if (v.affected) {
        // One outcome per advisory: a second entry of it for this package adds nothing.
        if (matched.has(e.advisory.id)) continue;
        matched.add(e.advisory.id);
        const m: Match = {
          advisory: e.advisory.id, cves: e.cves, ecosystem: e.affected.ecosystem, release: e.affected.eco!.release,
          name: e.affected.name, via, compared, fixed: v.listed ? null : v.fixed, severity: e.severity,
        };
        if (v.listed) m.listed = true;
        else m.range = v.range;
        if (mode === 'no-epoch') m.note = 'the inventory gives no epoch: compared without epochs';
        out.push({ match: Object.freeze(m) });
      } else if (v.unevaluated) {
        out.push({ unevaluated: { advisory: e.advisory.id, package: e.affected.name, ecosystem: e.affected.ecosystem, why: v.unevaluated } });
      }
    }
    return out;
  }
}

function withoutEpochs(a: string, b: string): number {
  const x = parseEvr(a);
  const y = parseEvr(b);
  return compareRpmVersions(`${x.version}-${x.release}`, `${y.version}-${y.release}`);
}

