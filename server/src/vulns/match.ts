/**
 * Which of a node's packages the advisories affect, and why. The index holds each advisory's
 * affected entries by (ecosystem, package name), so matching a node costs a lookup or two per
 * package; what one installed version gives against one package's entries is computed once
 * and shared by every node with that version (bucket.ts).
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
import { Bucket, type Match, type Mode, type Unevaluated } from './bucket.js';
import { lookupKeys, nodeEcosystem, versionOrder, type Ecosystem, type Family } from './ecosystems.js';
import { cveIds, pickSeverity, type Advisory } from './osv.js';
import { compileEntry } from './ranges.js';

export type { Match, Unevaluated } from './bucket.js';

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

export interface Finding {
  /** The installed package (binary) and its installed version. */
  package: string;
  version: string;
  match: Match;
  /** Set by applyMutes (mute.ts). */
  muted?: { mute: string; reason: string; expires: string | null };
}

export interface NodeMatch {
  node: string;
  /** The node's ecosystem key, or null when its OS is not one Capstan matches. */
  ecosystem: string | null;
  findings: Finding[];
  /** Entries for its packages that could not be decided (no order for their ranges). */
  unevaluated: Unevaluated[];
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
