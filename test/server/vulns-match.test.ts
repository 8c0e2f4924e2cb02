/**
 * Matching nodes against vulnerability feeds: on feeds the test generates (Debian 12 and Rocky
 * Linux 9: several ranges, epochs, `~` versions, last_affected, `versions` lists, several
 * affected entries, withdrawn entries, CVE aliases), every node's findings are exactly what the
 * OSV schema's evaluation gives when every version comparison is asked of dpkg or rpm
 * themselves, and every finding says why: the feed's name and release, the version compared, the
 * interval as the feed wrote it. Then the rules around it: releases, source packages, epochs,
 * Alpine, Ubuntu Pro, one advisory against the nodes having its package, and mutes.
 */
import t, { type Test } from 'tap';
import { readAdvisory, type Advisory } from '@capstan/server/vulns/osv';
import { nodesAffectedBy, VulnIndex, type NodeInput, type NodePackage, type PackageHolder } from '@capstan/server/vulns/match';
import { applyMutes, checkMute } from '@capstan/server/vulns/mute';
import { thrownCode } from '../helpers/thrown.js';
import { debianVersion, dpkgCompare, oracleMissing, rpmCompare, rpmVersion, seeded } from '../helpers/version-oracles.js';

type Events = Array<Record<string, string>>;
interface Gen { name: string; versions: string[]; advisories: Array<{ id: string; events?: Events[]; listed?: string[]; withdrawn?: boolean }> }

/** Packages, each with installed versions to pick from and advisories whose bounds come from the same generator. */
function generate(seed: number, packages: number, gen: (r: ReturnType<typeof seeded>) => string): Gen[] {
  const r = seeded(seed);
  const out: Gen[] = [];
  for (let p = 0; p < packages; p++) {
    const versions = [...new Set(Array.from({ length: 4 }, () => gen(r)))];
    const bound = () => (r.next() < 0.4 ? r.pick(versions) : gen(r));
    const advisories: Gen['advisories'] = [];
    for (let a = 0; a < 3; a++) {
      const id = `ADV-${seed}-${p}-${a}`;
      const shape = r.int(5);
      if (shape === 0) advisories.push({ id, events: [[{ introduced: '0' }, { fixed: bound() }]] });
      else if (shape === 1) advisories.push({ id, events: [[{ introduced: bound() }, { fixed: bound() }, { introduced: bound() }, { fixed: bound() }]] });
      else if (shape === 2) advisories.push({ id, events: [[{ introduced: '0' }, { last_affected: bound() }]] });
      else if (shape === 3) advisories.push({ id, events: [[{ introduced: bound() }], [{ introduced: '0' }, { fixed: bound() }]], listed: [r.pick(versions)] });
      else advisories.push({ id, events: [[{ introduced: '0' }]], withdrawn: true });
    }
    out.push({ name: `pkg${p}`, versions, advisories });
  }
  return out;
}

function feed(g: Gen[], ecosystem: string, sourceOf: (name: string) => string): Advisory[] {
  return g.flatMap((p) => p.advisories.map((a) => readAdvisory({
    id: a.id, modified: '2026-01-01T00:00:00Z', aliases: [`CVE-2026-${a.id.length}${a.id.replace(/\D/g, '')}`],
    ...(a.withdrawn && { withdrawn: '2026-01-02T00:00:00Z' }),
    severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H' }],
    // Two affected entries for the same package: the second one's ranges; a finding counts once.
    affected: (a.events ?? []).map((events) => ({ package: { ecosystem, name: sourceOf(p.name) }, ranges: [{ type: 'ECOSYSTEM', events }], ...(a.listed && { versions: a.listed }) })),
  })));
}

/** The OSV schema's evaluation (IncludedInVersions / IncludedInRanges), every comparison by the oracle. */
function expected(v: string, events: Events[], listed: string[] | undefined, cmp: (a: string, b: string) => number): boolean {
  if (listed?.includes(v)) return true;
  return events.some((ev) => {
    const sorted = [...ev].sort((a, b) => {
      const za = a.introduced === '0';
      const zb = b.introduced === '0';
      if (za || zb) return za === zb ? 0 : za ? -1 : 1;
      return cmp(Object.values(a)[0]!, Object.values(b)[0]!);
    });
    let vulnerable = false;
    for (const e of sorted) {
      if (e.introduced !== undefined && (e.introduced === '0' || cmp(v, e.introduced) >= 0)) vulnerable = true;
      else if (e.fixed !== undefined && cmp(v, e.fixed) >= 0) vulnerable = false;
      else if (e.last_affected !== undefined && cmp(v, e.last_affected) > 0) vulnerable = false;
    }
    return vulnerable;
  });
}

/** Every comparison the expectation needs, asked of the oracle in one batch. */
async function oracleFor(g: Gen[], ask: (pairs: Array<[string, string]>) => Promise<Array<number | null>>) {
  const pairs = new Map<string, [string, string]>();
  for (const p of g) {
    const bounds = p.advisories.flatMap((a) => (a.events ?? []).flat().map((e) => Object.values(e)[0]!)).filter((b) => b !== '0');
    for (const v of p.versions) for (const b of bounds) pairs.set(`${v}\u0000${b}`, [v, b]);
    for (const a of bounds) for (const b of bounds) if (a < b) pairs.set(`${a}\u0000${b}`, [a, b]);
  }
  const list = [...pairs.values()];
  const answers = await ask(list);
  const known = new Map<string, number>();
  list.forEach(([a, b], i) => {
    const s = answers[i];
    if (s === null || s === undefined) throw new Error(`the oracle refused ${a} vs ${b}`);
    known.set(`${a}\u0000${b}`, s);
    known.set(`${b}\u0000${a}`, -s);
  });
  return { size: list.length, cmp: (a: string, b: string) => (a === b ? 0 : known.get(`${a}\u0000${b}`) ?? NaN) };
}

async function checkFamily(t: Test, opts: { g: Gen[]; ecosystem: string; os: NodeInput['os']; pkg: (name: string, v: string) => NodePackage; sourceOf: (n: string) => string; cmp: (a: string, b: string) => number }) {
  const index = new VulnIndex();
  for (const a of feed(opts.g, opts.ecosystem, opts.sourceOf)) index.add(a);
  const r = seeded(5);
  let findings = 0;
  for (let n = 0; n < 40; n++) {
    const chosen = opts.g.map((p) => ({ p, v: r.pick(p.versions), installed: opts.pkg(p.name, '') }));
    for (const c of chosen) c.installed = opts.pkg(c.p.name, c.v);
    const node: NodeInput = { id: `node-${n}`, os: opts.os, packages: chosen.map((c) => c.installed) };
    const got = index.match(node);
    const want = chosen.flatMap(({ p, v, installed }) => p.advisories.filter((a) => !a.withdrawn && expected(v, a.events ?? [], a.listed, opts.cmp)).map((a) => `${a.id} ${installed.name}`));
    t.same(got.findings.map((f) => `${f.match.advisory} ${f.package}`).sort(), want.sort(), `${node.id}: the findings the oracle's comparisons give`);
    for (const f of got.findings) {
      findings++;
      const c = chosen.find((x) => x.installed.name === f.package)!;
      const m = f.match;
      // The reason: the feed's own package name and ecosystem, the version compared, the interval
      // (checked with the oracle on the generated version, which the compared one stands for).
      t.equal(m.name, opts.sourceOf(c.p.name));
      t.equal(m.ecosystem, opts.ecosystem);
      t.equal(m.compared.replace(/^0*:/, ''), c.v.replace(/^0*:/, ''), 'the version compared is the source or epoch:version-release one');
      t.ok(m.listed || m.range, 'matched by a versions list or a range');
      if (m.range) {
        t.ok(m.range.introduced === '0' || opts.cmp(c.v, m.range.introduced) >= 0, `${c.v} ≥ introduced ${m.range.introduced}`);
        if (m.range.fixed !== undefined) t.ok(opts.cmp(c.v, m.range.fixed) < 0, `${c.v} < fixed ${m.range.fixed}`);
        if (m.range.last_affected !== undefined) t.ok(opts.cmp(c.v, m.range.last_affected) <= 0, `${c.v} ≤ last_affected ${m.range.last_affected}`);
        t.equal(m.fixed, m.range.fixed ?? null);
      } else t.ok(c.p.advisories.find((a) => a.id === m.advisory)!.listed!.includes(c.v));
      t.equal(m.severity?.rating, 'critical');
      t.ok(m.cves.length === 1 && m.cves[0]!.startsWith('CVE-'), 'the CVE the advisory is known by');
    }
  }
  t.ok(findings > 20, `${findings} findings checked`);
}

t.test('Debian nodes: findings are what dpkg --compare-versions decides, each with its reason', { skip: oracleMissing('dpkg') }, async (t) => {
  const g = generate(11, 7, debianVersion);
  const oracle = await oracleFor(g, dpkgCompare);
  t.comment(`${oracle.size} comparisons asked of dpkg`);
  // Binaries named after their source (`pkg0`) and not (`libpkg1` from `pkg1`): matched by source name and version.
  await checkFamily(t, {
    g, ecosystem: 'Debian:12', os: { name: 'debian', version: '12' }, cmp: oracle.cmp, sourceOf: (n) => n,
    pkg: (name, v) => (name.endsWith('1') ? { name: `lib${name}`, version: `${v}+b1`, source: name, source_version: v } : { name, version: v }),
  });
});

t.test('Rocky Linux nodes: findings are what rpm.vercmp decides, epochs included', { skip: oracleMissing('rpm') }, async (t) => {
  const g = generate(23, 12, rpmVersion);
  const dir = t.testdir();
  const oracle = await oracleFor(g, (pairs) => rpmCompare(pairs, dir));
  t.comment(`${oracle.size} comparisons asked of rpm`);
  // The inventory gives version-release and the epoch apart, as the agent sends them.
  await checkFamily(t, {
    g, ecosystem: 'Rocky Linux:9', os: { name: 'rocky', version: '9.3' }, cmp: oracle.cmp, sourceOf: (n) => n,
    pkg: (name, v) => {
      const m = /^(\d*):(.*)$/.exec(v);
      return { name, version: m ? m[2]! : v, epoch: m ? m[1] || '0' : '0' };
    },
  });
});

const adv = (id: string, affected: unknown[], extra: Record<string, unknown> = {}) => readAdvisory({ id, modified: '2026-01-01T00:00:00Z', affected, ...extra });
const deb = (name: string, events: Events, ecosystem = 'Debian:12', extra = {}) => ({ package: { ecosystem, name }, ranges: [{ type: 'ECOSYSTEM', events }], ...extra });
const debianNode = (packages: NodePackage[], version = '12'): NodeInput => ({ id: 'n1', os: { name: 'debian', version }, packages });
const found = (m: { findings: Array<{ match: { advisory: string }; package: string }> }) => m.findings.map((f) => `${f.match.advisory} ${f.package}`).sort();

t.test('an entry applies to its release only; a withdrawn or replaced advisory stops matching', async (t) => {
  const index = new VulnIndex();
  index.add(adv('DSA-1', [deb('openssl', [{ introduced: '0' }, { fixed: '3.0.11-1~deb12u2' }], 'Debian:11')]));
  index.add(adv('DSA-2', [deb('openssl', [{ introduced: '0' }, { fixed: '3.0.11-1~deb12u2' }])]));
  index.add(adv('DEBIAN-CVE-2026-3', [deb('openssl', [{ introduced: '0' }], 'Debian')]));
  const node = debianNode([{ name: 'openssl', version: '3.0.11-1~deb12u1' }]);
  t.same(found(index.match(node)), ['DEBIAN-CVE-2026-3 openssl', 'DSA-2 openssl'], 'Debian:11 does not apply to 12; an entry naming no release applies to all');
  t.equal(index.match(node).findings.find((f) => f.match.advisory === 'DEBIAN-CVE-2026-3')!.match.release, '');
  t.same(found(index.match({ ...node, packages: [{ name: 'openssl', version: '3.0.11-1~deb12u2' }] })), ['DEBIAN-CVE-2026-3 openssl'], 'the fixed version is not affected');
  index.add(adv('DSA-2', [deb('openssl', [{ introduced: '0' }])], { modified: '2026-02-01T00:00:00Z', withdrawn: '2026-02-01T00:00:00Z' }));
  t.same(found(index.match(node)), ['DEBIAN-CVE-2026-3 openssl'], 'withdrawn');
  index.add(adv('DEBIAN-CVE-2026-3', [deb('openssl', [{ introduced: '0' }, { fixed: '3.0.0-1' }], 'Debian')]));
  t.same(found(index.match(node)), [], 'the newer copy replaces the older one');
  t.same(index.match({ id: 'x', os: { name: 'windows', version: '11' }, packages: [{ name: 'openssl', version: '1' }] }).ecosystem, null);
});

t.test('deb feeds name source packages: a binary matches through its source name and version', async (t) => {
  const index = new VulnIndex();
  index.add(adv('DSA-5532-1', [deb('openssl', [{ introduced: '0' }, { fixed: '3.0.11-1~deb12u2' }])], { related: ['CVE-2023-5363'] }));
  index.add(adv('DSA-9', [deb('util-linux', [{ introduced: '0' }, { fixed: '2.38.1-5+deb12u4' }])]));
  const m = index.match(debianNode([
    { name: 'libssl3', version: '3.0.11-1~deb12u1', source: 'openssl' },
    { name: 'libssl3-old', version: '3.0.11-1~deb12u1' }, // no source given: only its own name is known
    // The binary has an epoch its source does not: the source version decides.
    { name: 'bsdutils', version: '1:2.38.1-5+deb12u3', source: 'util-linux', source_version: '2.38.1-5+deb12u3' },
  ]));
  t.same(found(m), ['DSA-5532-1 libssl3', 'DSA-9 bsdutils']);
  const ssl = m.findings[0]!.match;
  t.same({ via: ssl.via, name: ssl.name, compared: ssl.compared, cves: ssl.cves, fixed: ssl.fixed }, { via: 'source', name: 'openssl', compared: '3.0.11-1~deb12u1', cves: ['CVE-2023-5363'], fixed: '3.0.11-1~deb12u2' });
  t.equal(m.findings[1]!.match.compared, '2.38.1-5+deb12u3');
});

t.test('rpm entries match by binary or source RPM name; a missing epoch is said, not guessed', async (t) => {
  const index = new VulnIndex();
  const rpmEntry = (ecosystem: string, name: string, fixed: string) => ({ package: { ecosystem, name }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed }] }] });
  index.add(adv('ALSA-2026:1', [rpmEntry('AlmaLinux:9', 'openssl-libs', '1:3.0.7-27.el9')], { upstream: ['CVE-2026-1'] }));
  index.add(adv('ALSA-2026:2', [rpmEntry('AlmaLinux:9', 'openssl', '1:3.0.7-27.el9')]));
  const node = (epoch?: string): NodeInput => ({ id: 'a', os: { name: 'almalinux', version: '9.4' }, packages: [{ name: 'openssl-libs', version: '3.0.7-25.el9', source: 'openssl', ...(epoch !== undefined && { epoch }) }] });
  t.same(found(index.match(node('1'))), ['ALSA-2026:1 openssl-libs', 'ALSA-2026:2 openssl-libs'], 'by its own name and by its source RPM');
  t.same(index.match(node('1')).findings.map((f) => [f.match.via, f.match.compared]), [['name', '1:3.0.7-25.el9'], ['source', '1:3.0.7-25.el9']]);
  t.same(found(index.match({ ...node('1'), packages: [{ ...node('1').packages[0]!, version: '3.0.7-27.el9' }] })), [], 'fixed');
  t.same(found(index.match(node('0'))), ['ALSA-2026:1 openssl-libs', 'ALSA-2026:2 openssl-libs'], 'epoch 0 < 1: affected whatever the version');
  const unknown = index.match(node());
  t.equal(unknown.findings[0]!.match.note, 'the inventory gives no epoch: compared without epochs');
  t.same(found(index.match({ ...node(), packages: [{ name: 'openssl-libs', version: '3.0.7-28.el9' }] })), [], 'without an epoch, 3.0.7-28 is past 1:3.0.7-27');
});

t.test('Alpine matches only through versions lists; a range alone is reported as not evaluated', async (t) => {
  const index = new VulnIndex();
  const ranges = [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: '3.1.4-r1' }] }];
  index.add(adv('ALPINE-CVE-2026-1', [{ package: { ecosystem: 'Alpine:v3.19', name: 'openssl' }, ranges, versions: ['3.1.4-r0', '3.1.3-r0'] }]));
  index.add(adv('ALPINE-CVE-2026-2', [{ package: { ecosystem: 'Alpine:v3.19', name: 'openssl' }, ranges }]));
  const m = index.match({ id: 'al', os: { name: 'alpine', version: '3.19.1' }, packages: [{ name: 'openssl', version: '3.1.4-r0' }] });
  t.same(found(m), ['ALPINE-CVE-2026-1 openssl']);
  t.equal(m.findings[0]!.match.listed, true);
  t.same(m.unevaluated.map((u) => u.advisory), ['ALPINE-CVE-2026-2']);
  t.match(m.unevaluated[0]!.why, /no checked version order/);
});

t.test('Ubuntu Pro entries apply to nodes that have Pro; GIT ranges are not guessed', async (t) => {
  const index = new VulnIndex();
  index.add(adv('USN-1', [deb('curl', [{ introduced: '0' }, { fixed: '7.81.0-1ubuntu1.15' }], 'Ubuntu:22.04:LTS')], { severity: [{ type: 'Ubuntu', score: 'medium' }] }));
  index.add(adv('USN-2', [deb('curl', [{ introduced: '0' }, { fixed: '7.81.0-1ubuntu1.16+esm1' }], 'Ubuntu:Pro:22.04:LTS')]));
  index.add(adv('OSV-3', [{ package: { ecosystem: 'Ubuntu:22.04:LTS', name: 'curl' }, ranges: [{ type: 'GIT', repo: 'https://example.invalid/curl', events: [{ introduced: 'abc' }] }] }]));
  const node = { id: 'u', os: { name: 'ubuntu', version: '22.04' }, packages: [{ name: 'curl', version: '7.81.0-1ubuntu1.14' }] };
  t.same(found(index.match(node)), ['USN-1 curl']);
  t.same(found(index.match({ ...node, ubuntu_pro: true })), ['USN-1 curl', 'USN-2 curl']);
  t.equal(index.match(node).findings[0]!.match.severity?.rating, 'medium', "Ubuntu's priority word when there is no vector");
  t.same(index.match(node).unevaluated.map((u) => u.advisory), ['OSV-3']);
});

t.test('one new advisory finds the same nodes as matching every node', async (t) => {
  const index = new VulnIndex();
  const a = adv('DSA-7', [deb('openssl', [{ introduced: '0' }, { fixed: '3.0.11-1~deb12u2' }]), deb('openssl', [{ introduced: '0' }, { fixed: '3.0.9-1' }], 'Debian:11')]);
  index.add(a);
  const nodes: NodeInput[] = [
    { id: 'd12-old', os: { name: 'debian', version: '12.4' }, packages: [{ name: 'libssl3', version: '3.0.11-1~deb12u1', source: 'openssl' }, { name: 'openssl', version: '3.0.11-1~deb12u1' }] },
    { id: 'd12-new', os: { name: 'debian', version: '12' }, packages: [{ name: 'openssl', version: '3.0.11-1~deb12u2' }] },
    { id: 'd11', os: { name: 'debian', version: '11' }, packages: [{ name: 'openssl', version: '3.0.8-1' }] },
    { id: 'rocky', os: { name: 'rocky', version: '9' }, packages: [{ name: 'openssl', version: '3.0.1-1.el9', epoch: '0' }] },
  ];
  const holders: PackageHolder[] = nodes.flatMap((n) => n.packages.map((p) => ({ node: n.id, os: n.os, package: p })));
  const got = nodesAffectedBy(a, holders);
  t.same([...got.keys()].sort(), ['d11', 'd12-old']);
  for (const n of nodes) t.same(found(got.get(n.id) ?? { findings: [] }), found(index.match(n)), n.id);
});

t.test('mutes mark findings by CVE or advisory, per group, until they expire', async (t) => {
  const index = new VulnIndex();
  index.add(adv('DSA-1', [deb('openssl', [{ introduced: '0' }])], { aliases: ['CVE-2026-10010'] }));
  index.add(adv('DSA-2', [deb('curl', [{ introduced: '0' }])], { aliases: ['CVE-2026-20020'] }));
  const findings = index.match(debianNode([{ name: 'openssl', version: '1' }, { name: 'curl', version: '1' }])).findings;
  const mutes = [
    checkMute({ id: 'm1', target: 'CVE-2026-10010', reason: 'not reachable: no TLS listener', expires: '2026-06-30' }),
    checkMute({ id: 'm2', target: 'DSA-2', groups: ['lab'], reason: 'lab machines', expires: null }),
  ];
  const at = (iso: string, groups: string[]) => applyMutes(findings, mutes, { now: new Date(iso), groups }).map((f) => [f.match.advisory, f.muted?.mute ?? null]);
  t.same(at('2026-03-01T00:00:00Z', []), [['DSA-1', 'm1'], ['DSA-2', null]], 'a CVE mute covers the advisory known by it; a group mute needs the group');
  t.same(at('2026-03-01T00:00:00Z', ['lab']), [['DSA-1', 'm1'], ['DSA-2', 'm2']]);
  t.same(at('2026-07-01T00:00:00Z', ['lab']), [['DSA-1', null], ['DSA-2', 'm2']], 'an expired mute no longer applies; the finding was kept all along');
  t.equal(applyMutes(findings, mutes, { now: new Date('2026-03-01T00:00:00Z'), groups: [] }).length, findings.length, 'muted findings are kept');
  for (const bad of [{ id: 'm', target: 'CVE-1', reason: '' }, { id: 'm', reason: 'x' }, { id: 'm', target: 'CVE-1', reason: 'x', expires: 'next week' }, { id: 'm', target: 'a b', reason: 'x' }, { target: 'CVE-1', reason: 'x' }, { id: 'm', target: 'CVE-1', reason: 'x', groups: 'lab' }]) {
    t.equal(thrownCode(() => checkMute(bad)), 'ERR_MUTE_INVALID', JSON.stringify(bad));
  }
});
