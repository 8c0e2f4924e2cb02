/**
 * `npm run bench` (vulns): vulnerability matching in process, at fleet scale.
 *
 * A generated feed of 50,000 OSV advisories (Debian 12 and Rocky Linux 9, one or two affected
 * packages each, fixed/last_affected ranges, some `versions` lists, CVSS v3 vectors) is indexed,
 * then 100,000 nodes of 550 packages each are matched against it: three quarters Debian 12 (binary
 * names with their source packages), a quarter Rocky Linux 9 (epochs given). Package names come
 * from a pool of 3,000 (150 on every node, the rest drawn per node), each installed at one of four
 * versions, so nodes overlap as a fleet's do. Most advisories are fixed below every installed
 * version (a patched fleet); one in twenty falls between installed versions.
 *
 * Figures: the index build, the full match (only the matching is timed: each node's package list
 * is made before its clock starts), findings per node, the heap the index holds, and one new
 * advisory for the most widespread package (on every node): `nodesAffectedBy` over the rows of
 * the nodes having it, as the server's package index gives them, plus adding it to the index.
 */
import { loadavg } from 'node:os';
import { readAdvisory, type Advisory } from '@capstan/server/vulns/osv';
import { nodesAffectedBy, VulnIndex, type NodeInput, type NodePackage, type PackageHolder } from '@capstan/server/vulns/match';

export interface VulnsBenchOptions {
  nodes?: number;
  packagesPerNode?: number;
  advisories?: number;
  log?: (line: string) => void;
}

const NAMES = 3000;
const COMMON = 150;
const VERSIONS = 4;

function mix(i: number, k: number): number {
  let h = Math.imul(i ^ 0x9e3779b9, 0x85ebca6b) ^ Math.imul(k + 0x632be5ab, 0xc2b2ae35);
  h ^= h >>> 15;
  h = Math.imul(h, 0x2c1b3c6d);
  return (h ^ (h >>> 13)) >>> 0;
}

const pkgName = (k: number) => `pkg-${String(k).padStart(4, '0')}`;
/** Every fourth package is a binary built from a source of another name (libfoo from foo). */
const srcName = (k: number) => (k % 4 === 0 ? `src-${String(k).padStart(4, '0')}` : pkgName(k));
const debVersion = (k: number, j: number) => `${(k % 7) + 1}.${k % 13}.${j * 2 + 2}-1${j === 3 ? '~deb12u1' : ''}`;
const rpmVersion = (k: number, j: number) => `${(k % 5) + 1}.${k % 11}.${j * 2 + 2}-${j + 1}.el9`;
const rpmEpoch = (k: number) => (k % 10 === 0 ? '1' : '0');

const VECTORS = ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 'CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H', 'CVSS:3.1/AV:N/AC:H/PR:N/UI:R/S:U/C:L/I:N/A:N', 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:H'];

/** One generated advisory: package, ranges and severity all from the hash of its number. */
function advisory(n: number): Advisory {
  const affected = [];
  const count = mix(n, 1) % 5 === 0 ? 2 : 1;
  for (let e = 0; e < count; e++) {
    const k = mix(n, 10 + e) % NAMES;
    const rocky = mix(n, 2) % 10 < 3;
    const ver = (j: number) => (rocky ? `${rpmEpoch(k) === '1' ? '1:' : ''}${rpmVersion(k, j)}` : debVersion(k, j));
    const roll = mix(n, 3 + e) % 20;
    // 19 in 20: fixed before the oldest installed version; else fixed between installed versions.
    const fixed = roll === 0 ? ver(1 + (mix(n, 4) % 3)) : rocky ? `${rpmEpoch(k) === '1' ? '1:' : ''}0.${n % 9}-1.el9` : `0.${n % 9}-1`;
    const events = mix(n, 5) % 8 === 0 ? [{ introduced: '0' }, { last_affected: roll === 0 ? ver(0) : '0.1-1' }] : [{ introduced: '0' }, { fixed }];
    affected.push({
      package: { ecosystem: rocky ? 'Rocky Linux:9' : 'Debian:12', name: rocky ? pkgName(k) : srcName(k) },
      ranges: [{ type: 'ECOSYSTEM', events }],
      ...(mix(n, 6) % 10 === 0 && { versions: [rocky ? '0.0-1.el9' : '0.0-1'] }),
    });
  }
  return readAdvisory({
    id: `CAPSTAN-BENCH-${n}`, modified: '2026-01-01T00:00:00Z', aliases: [`CVE-2026-${10000 + n}`],
    severity: [{ type: 'CVSS_V3', score: VECTORS[n % VECTORS.length] }], affected,
  });
}

/** Four versions of each package, as shared objects (a fleet has few distinct ones). */
function packagePool(): { deb: NodePackage[][]; rpm: NodePackage[][] } {
  const deb: NodePackage[][] = [];
  const rpm: NodePackage[][] = [];
  for (let k = 0; k < NAMES; k++) {
    deb.push(Array.from({ length: VERSIONS }, (_, j) => (srcName(k) === pkgName(k) ? { name: pkgName(k), version: debVersion(k, j) } : { name: pkgName(k), version: debVersion(k, j), source: srcName(k) })));
    rpm.push(Array.from({ length: VERSIONS }, (_, j) => ({ name: pkgName(k), version: rpmVersion(k, j), epoch: rpmEpoch(k), source: pkgName(k) })));
  }
  return { deb, rpm };
}

function makeNode(i: number, perNode: number, pool: ReturnType<typeof packagePool>): NodeInput {
  const rocky = i % 4 === 3;
  const p = rocky ? pool.rpm : pool.deb;
  const packages: NodePackage[] = [];
  for (let k = 0; k < COMMON; k++) packages.push(p[k]![mix(i, k) % VERSIONS]!);
  // The rest: each of the other names with the probability that gives perNode packages on average.
  const threshold = Math.floor(((perNode - COMMON) / (NAMES - COMMON)) * 0x100000000);
  for (let k = COMMON; k < NAMES; k++) if (mix(k, i) < threshold) packages.push(p[k]![mix(i, k) % VERSIONS]!);
  return { id: `node-${i}`, os: rocky ? { name: 'rocky', version: '9.3' } : { name: 'debian', version: '12' }, packages };
}

const mb = (b: number) => Math.round(b / 1024 / 1024);

export async function benchVulns(opts: VulnsBenchOptions = {}) {
  const nodes = opts.nodes ?? 100_000;
  const perNode = opts.packagesPerNode ?? 550;
  const count = opts.advisories ?? 50_000;
  const log = opts.log ?? (() => undefined);
  const pool = packagePool();

  global.gc?.();
  const heap0 = process.memoryUsage().heapUsed;
  const feed: Advisory[] = [];
  for (let n = 0; n < count; n++) feed.push(advisory(n));
  const t0 = performance.now();
  const index = new VulnIndex();
  for (const a of feed) index.add(a);
  const buildMs = performance.now() - t0;
  global.gc?.();
  const indexMb = mb(process.memoryUsage().heapUsed - heap0);
  log(`vulns: ${count} advisories indexed in ${Math.round(buildMs)} ms`);

  // Nodes are made a hundred at a time before the clock starts (the server reads inventories
  // from its store; making them here is not matching), then matched with both clocks running:
  // wall time, and this process's CPU time, which other work on the machine does not inflate.
  let matchMs = 0;
  let matchCpuMs = 0;
  let findings = 0;
  let packages = 0;
  let worstNodeMs = 0;
  const BATCH = 100;
  for (let start = 0; start < nodes; start += BATCH) {
    const batch: NodeInput[] = [];
    for (let i = start; i < Math.min(nodes, start + BATCH); i++) batch.push(makeNode(i, perNode, pool));
    const cpu = process.cpuUsage();
    for (const node of batch) {
      packages += node.packages.length;
      const s = performance.now();
      findings += index.match(node).findings.length;
      const d = performance.now() - s;
      matchMs += d;
      if (d > worstNodeMs) worstNodeMs = d;
    }
    const used = process.cpuUsage(cpu);
    matchCpuMs += (used.user + used.system) / 1000;
    if ((start + BATCH) % 20_000 === 0) log(`vulns: ${start + BATCH} nodes matched, ${Math.round(matchMs)} ms so far (${Math.round(matchCpuMs)} ms CPU)`);
  }
  log(`vulns: ${nodes} nodes × ${Math.round(packages / nodes)} packages matched in ${Math.round(matchMs)} ms (${Math.round(matchCpuMs)} ms CPU), ${findings} findings`);

  // One new advisory for package 0, which every node has: the holders are what the server's
  // package index answers for its name (made here untimed, as that query is the store's).
  const fresh = readAdvisory({
    id: 'CAPSTAN-BENCH-NEW', modified: '2026-02-01T00:00:00Z', aliases: ['CVE-2026-99999'], severity: [{ type: 'CVSS_V3', score: VECTORS[0] }],
    affected: [
      { package: { ecosystem: 'Debian:12', name: srcName(0) }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: debVersion(0, 2) }] }] },
      { package: { ecosystem: 'Rocky Linux:9', name: pkgName(0) }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: `1:${rpmVersion(0, 2)}` }] }] },
    ],
  });
  const holders: PackageHolder[] = [];
  for (let i = 0; i < nodes; i++) {
    const node = makeNode(i, perNode, pool);
    const p = node.packages.find((x) => x.name === pkgName(0));
    if (p) holders.push({ node: node.id, os: node.os, package: p });
  }
  const s1 = performance.now();
  const cpu1 = process.cpuUsage();
  const affected = nodesAffectedBy(fresh, holders);
  index.add(fresh);
  const oneMs = performance.now() - s1;
  const used1 = process.cpuUsage(cpu1);
  const oneCpuMs = (used1.user + used1.system) / 1000;
  log(`vulns: one new advisory over ${holders.length} holders: ${affected.size} nodes affected in ${Math.round(oneMs)} ms`);

  const round = (x: number) => Math.round(x * 10) / 10;
  return {
    figures: [
      { name: `full match: ${nodes.toLocaleString('en')} nodes × ${perNode} packages against ${count.toLocaleString('en')} advisories`, value: Math.round(matchMs), unit: 'ms', target: { op: '<=', value: 60_000 } },
      { name: 'one new advisory: the nodes it affects, from the nodes having its package', value: round(oneMs), unit: 'ms', target: { op: '<=', value: 1000 } },
      { name: 'full match, CPU time of the matching process', value: Math.round(matchCpuMs), unit: 'ms', target: { op: '<=', value: 60_000 } },
      { name: 'one new advisory, CPU time', value: round(oneCpuMs), unit: 'ms', target: { op: '<=', value: 1000 } },
      { name: 'machine load average (1 min) at the end', value: round(loadavg()[0]!), unit: '' },
      { name: `index build (${count.toLocaleString('en')} advisories)`, value: Math.round(buildMs), unit: 'ms' },
      { name: 'index heap', value: indexMb, unit: 'MB' },
      { name: 'slowest node', value: round(worstNodeMs), unit: 'ms' },
      { name: 'findings per node (mean)', value: round(findings / nodes), unit: '' },
      { name: 'packages per node (mean)', value: Math.round(packages / nodes), unit: '' },
      { name: 'nodes the new advisory affects', value: affected.size, unit: '' },
      { name: 'nodes having its package', value: holders.length, unit: '' },
    ],
    nodes, advisories: count,
  };
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const n = Number(process.argv[2] ?? 100_000);
  benchVulns({ nodes: n, log: (l) => process.stderr.write(`${l}\n`) }).then((r) => process.stdout.write(`${JSON.stringify(r, null, 2)}\n`));
}
