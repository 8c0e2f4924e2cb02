/**
 * Which of a node's packages the advisories affect, and why. The index holds each advisory's
 * affected entries by (ecosystem, package name), so matching a node costs two map lookups per
 * package; what one installed version gives against one package's entries is computed once
 * and shared by every node with that version (a fleet has few versions of each package).
 *
 * Names and versions, per family (docs/vulnerabilities.md, *Package names*):
 * - deb (Debian, Ubuntu): feeds name source packages with source versions; an inventory's
 *   package carries its binary name and version and, from current agents, `source` and
 *   `source_version` (dpkg's `${source:Package}` and `${source:Version}`). Without them the
 *   binary name and version stand in: exact for binaries named as their source, blind to the
 *   others (libssl3 built from openssl).
 * - rpm (AlmaLinux, Rocky): entries name binary RPMs in practice (the schema says source), so
 *   both the package's name and its source RPM's name are looked up; versions are compared as
 *   `epoch:version-release`, the epoch from the inventory's `epoch`. A package without `epoch`
 *   (older agents, RUDDER inventories) is compared with epochs left out on both sides, and its
 *   reason says so.
 * - apk (Alpine): the origin (`source`) or the name; `versions` lists only (ecosystems.ts).
 *
 * Incremental work: `match` answers one node (a new inventory); `nodesAffectedBy` answers one
 * advisory for the rows of the nodes that have one of its packages (a new or changed advisory).
 */
import { compareRpmVersions, parseEvr } from '@capstan/shared/filter/rpm-version';
import { lookupKeys, nodeEcosystem, versionOrder, type Ecosystem, type Family } from './ecosystems.js';
import { cveIds, pickSeverity, type Advisory, type Affected, type Severity } from './osv.js';
import { compileEntry, evaluate, type CompiledEntry, type Order, type RangeReason } from './ranges.js';

export interface NodePackage {
  name: string;
  version: string;
  source?: string;
  source_version?: string;
  /** RPM epoch as the agent sends it ('0' when none); absent when unknown. */
  epoch?: string;
}

export interface NodeInput {
  id: string;
  os: { name: string; version: string };
  packages: NodePackage[];
  /** The node gets Ubuntu Pro (ESM) fixes: Ubuntu:Pro entries apply to it. */
  ubuntu_pro?: boolean;
}

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

export interface Finding {
  /** The installed package (binary) and its installed version. */
  package: string;
  version: string;
  match: Match;
  /** Set by applyMutes (mute.ts). */
  muted?: { mute: string; reason: string; expires: string | null };
}

export interface Unevaluated {
  advisory: string;
  package: string;
  ecosystem: string;
  why: string;
}

export interface NodeMatch {
  node: string;
  /** The node's ecosystem key, or null when its OS is not one Capstan matches. */
  ecosystem: string | null;
  findings: Finding[];
  /** Entries for its packages that could not be decided (no order for their ranges). */
  unevaluated: Unevaluated[];
}

interface Entry {
  advisory: Advisory;
  affected: Affected;
  compiled: CompiledEntry;
  cves: string[];
  severity: Severity | null;
}

type Mode = 'exact' | 'no-epoch';
type Outcome = { match: Match } | { unevaluated: Unevaluated };

/** One (ecosystem, name): its entries and what each version seen so far gives. */
class Bucket {
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

/** The version a package is compared with, in its family: source version (deb), epoch:version-release (rpm). */
function comparedVersion(p: NodePackage, family: Family): string {
  if (family === 'deb') return p.source_version ?? p.version;
  const e = p.epoch;
  if (family === 'rpm' && e !== undefined && e !== '0' && e !== '' && !/^0+$/.test(e)) return `${e}:${p.version}`;
  return p.version;
}

export class VulnIndex {
  private byEco = new Map<string, Map<string, Bucket>>();
  private where = new Map<string, Array<{ eco: string; name: string }>>();

  /** Advisories indexed (withdrawn ones are not). */
  get size(): number {
    return this.where.size;
  }

  /** Add or replace an advisory (by id); a withdrawn one is removed. Entries of other ecosystems are left out. */
  add(a: Advisory): void {
    this.remove(a.id);
    if (a.withdrawn !== undefined) return;
    const places: Array<{ eco: string; name: string }> = [];
    for (const affected of a.affected) {
      const eco = affected.eco;
      if (!eco) continue;
      let names = this.byEco.get(eco.key);
      if (!names) this.byEco.set(eco.key, (names = new Map()));
      let bucket = names.get(affected.name);
      if (!bucket) names.set(affected.name, (bucket = new Bucket(eco.family)));
      bucket.entries.push({ advisory: a, affected, compiled: compileEntry(affected, versionOrder(eco.family)), cves: cveIds(a), severity: pickSeverity(a, affected) });
      bucket.invalidate();
      places.push({ eco: eco.key, name: affected.name });
    }
    if (places.length) this.where.set(a.id, places);
  }

  remove(id: string): boolean {
    const places = this.where.get(id);
    if (!places) return false;
    for (const { eco, name } of places) {
      const names = this.byEco.get(eco);
      const bucket = names?.get(name);
      if (!bucket) continue;
      bucket.entries = bucket.entries.filter((e) => e.advisory.id !== id);
      bucket.invalidate();
      if (!bucket.entries.length) names!.delete(name);
    }
    this.where.delete(id);
    return true;
  }

  /** Every (advisory, package) of the index that affects the node, each with its reason. */
  match(node: NodeInput): NodeMatch {
    const eco = nodeEcosystem(node.os.name, node.os.version, { ubuntuPro: node.ubuntu_pro === true });
    const out: NodeMatch = { node: node.id, ecosystem: eco?.key ?? null, findings: [], unevaluated: [] };
    if (!eco) return out;
    const maps = this.mapsFor(eco);
    if (!maps.length) return out;
    for (const p of node.packages) collect(maps, eco.family, p, out);
    return out;
  }

  mapsFor(eco: Ecosystem): Array<Map<string, Bucket>> {
    return lookupKeys(eco).map((k) => this.byEco.get(k)).filter((m): m is Map<string, Bucket> => m !== undefined);
  }
}

function collect(maps: Array<Map<string, Bucket>>, family: Family, p: NodePackage, out: Pick<NodeMatch, 'findings' | 'unevaluated'>): void {
  const hasSource = p.source !== undefined && p.source !== p.name;
  // deb and apk feeds name the source package; rpm entries name binaries (and sometimes sources).
  const bySource = family !== 'rpm' && hasSource;
  const names = family === 'rpm' && hasSource ? 2 : 1;
  // An rpm package without an epoch (older agents) is compared with epochs left out.
  const mode: Mode = family === 'rpm' && p.epoch === undefined ? 'no-epoch' : 'exact';
  let compared: string | null = null;
  let buckets = 0;
  let seen: Set<string> | null = null;
  const start = out.findings.length;
  for (let n = 0; n < names; n++) {
    const name = n === 1 || bySource ? p.source! : p.name;
    const via: Match['via'] = n === 1 || bySource ? 'source' : 'name';
    for (const map of maps) {
      const bucket = map.get(name);
      if (!bucket) continue;
      compared ??= comparedVersion(p, family);
      const outcomes = bucket.outcomes(compared, via, mode);
      // One finding per (advisory, package): only a second bucket (another name or release key) can repeat one.
      if (++buckets === 2) seen = new Set(out.findings.slice(start).map((f) => f.match.advisory));
      for (const o of outcomes) {
        if ('unevaluated' in o) {
          out.unevaluated.push(o.unevaluated);
          continue;
        }
        if (seen) {
          if (seen.has(o.match.advisory)) continue;
          seen.add(o.match.advisory);
        }
        out.findings.push({ package: p.name, version: p.version, match: o.match });
      }
    }
  }
}

/** One row of the server's package index: a node and one package it has. */
export interface PackageHolder {
  node: string;
  os: { name: string; version: string };
  ubuntu_pro?: boolean;
  package: NodePackage;
}

/**
 * The nodes one advisory affects, from the rows of the nodes having one of its packages (by
 * name or source name: the caller asks its package index for each `affected[].package.name`).
 * Rows of other packages or ecosystems are ignored, so a broader query is only slower.
 */
export function nodesAffectedBy(advisory: Advisory, holders: Iterable<PackageHolder>): Map<string, NodeMatch> {
  const one = new VulnIndex();
  one.add(advisory);
  const out = new Map<string, NodeMatch>();
  // What each (os name, version, Pro) looks up, worked out once: a fleet has a few of them.
  const byOs = new Map<string, Map<string, { eco: Ecosystem; maps: Array<Map<string, Bucket>> } | null>>();
  for (const h of holders) {
    const osName = h.ubuntu_pro === true ? `${h.os.name}\u0000pro` : h.os.name;
    let versions = byOs.get(osName);
    if (!versions) byOs.set(osName, (versions = new Map()));
    let seen = versions.get(h.os.version);
    if (seen === undefined) {
      const eco = nodeEcosystem(h.os.name, h.os.version, { ubuntuPro: h.ubuntu_pro === true });
      const maps = eco ? one.mapsFor(eco) : [];
      versions.set(h.os.version, (seen = eco && maps.length ? { eco, maps } : null));
    }
    if (!seen) continue;
    let acc = out.get(h.node);
    const fresh = !acc;
    acc ??= { node: h.node, ecosystem: seen.eco.key, findings: [], unevaluated: [] };
    collect(seen.maps, seen.eco.family, h.package, acc);
    if (fresh && (acc.findings.length || acc.unevaluated.length)) out.set(h.node, acc);
  }
  return out;
}
