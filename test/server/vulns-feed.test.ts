/**
 * Reading vulnerability feeds: OSV entries validated with coded errors naming the field, CVSS
 * vectors scored (or refused), feeds imported from a file, a directory or a zip with every bad
 * entry skipped and counted while the rest goes on, the feed's bounds stopping it, and only
 * entries newer than the caller's copy passed on; CISA KEV and EPSS files read, bounded.
 */
import { mkdirSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import zlib from 'node:zlib';
import t from 'tap';
import { cvssScore } from '@capstan/server/vulns/cvss';
import { importOsvFeed, type ImportOptions } from '@capstan/server/vulns/feed';
import { readEpss, readKev } from '@capstan/server/vulns/enrich';
import { cveIds, modifiedKey, parseAdvisory, readAdvisory, type Advisory } from '@capstan/server/vulns/osv';
import { thrownCode } from '../helpers/thrown.js';
import { makeZip } from '../helpers/zip.js';

const good = (id: string, modified = '2026-01-01T00:00:00Z', extra: Record<string, unknown> = {}) => ({
  id, modified, aliases: ['CVE-2026-0001'],
  affected: [{ package: { ecosystem: 'Debian:12', name: 'openssl' }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: '3.0.11-1~deb12u2' }] }] }],
  ...extra,
});

function fieldOf(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return (err as { details?: { field?: string } }).details?.field;
  }
  return undefined;
}

t.test('an OSV entry that breaks the schema is ERR_OSV_INVALID naming the field', async (t) => {
  const range = (events: unknown[]) => good('X-1', undefined, { affected: [{ package: { ecosystem: 'Debian:12', name: 'a' }, ranges: [{ type: 'ECOSYSTEM', events }] }] });
  const cases: Array<[string, unknown, string]> = [
    ['not an object', [], 'document'],
    ['no id', { ...good('x'), id: undefined }, 'id'],
    ['an id with spaces', good('DSA 1'), 'id'],
    ['no modified', { ...good('X-1'), modified: undefined }, 'modified'],
    ['modified not RFC 3339', good('X-1', 'yesterday'), 'modified'],
    ['aliases not strings', good('X-1', undefined, { aliases: [1] }), 'aliases[0]'],
    ['affected without package', good('X-1', undefined, { affected: [{}] }), 'affected[0].package'],
    ['a package without name', good('X-1', undefined, { affected: [{ package: { ecosystem: 'Debian:12' } }] }), 'affected[0].package.name'],
    ['an unknown range type', good('X-1', undefined, { affected: [{ package: { ecosystem: 'Debian:12', name: 'a' }, ranges: [{ type: 'DATE', events: [{ introduced: '0' }] }] }] }), 'affected[0].ranges[0].type'],
    ['an event with two kinds', range([{ introduced: '0', fixed: '1' }]), 'affected[0].ranges[0].events[0]'],
    ['a range without introduced', range([{ fixed: '1' }]), 'affected[0].ranges[0].events'],
    ['fixed and last_affected together', range([{ introduced: '0' }, { fixed: '2' }, { last_affected: '1' }]), 'affected[0].ranges[0].events'],
    ['a withdrawn date that is not one', good('X-1', undefined, { withdrawn: 'soon' }), 'withdrawn'],
  ];
  for (const [what, doc, field] of cases) {
    t.equal(thrownCode(() => readAdvisory(doc)), 'ERR_OSV_INVALID', what);
    t.equal(fieldOf(() => readAdvisory(doc)), field, `${what}: names ${field}`);
  }
  t.equal(thrownCode(() => parseAdvisory('{"id": ')), 'ERR_OSV_INVALID', 'not JSON');
});

t.test('an entry keeps what matching needs, and its CVEs from aliases, upstream and related', async (t) => {
  const a = readAdvisory({
    ...good('ALSA-2026:0001'), aliases: [], upstream: ['CVE-2026-1111'], related: ['CVE-2026-2222', 'RHSA-2026:0001'], withdrawn: '2026-02-01T00:00:00Z',
    schema_version: '1.7.0', unknown_field: { kept: false },
  });
  t.equal(a.withdrawn, '2026-02-01T00:00:00Z');
  t.same(cveIds(a), ['CVE-2026-1111', 'CVE-2026-2222']);
  t.same(cveIds(readAdvisory(good('DSA-5532-1'))), ['CVE-2026-0001']);
  t.equal(a.affected[0]!.eco!.key, 'Debian:12');
  t.equal(readAdvisory(good('GHSA-x', undefined, { affected: [{ package: { ecosystem: 'npm', name: 'x' } }] })).affected[0]!.eco, null, 'other ecosystems are kept, never indexed');
});

t.test('CVSS vectors give their base score and rating; a vector missing a base metric is refused', async (t) => {
  const cases: Array<[string, number, string]> = [
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 9.8, 'critical'],
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:C/C:H/I:H/A:H', 10, 'critical'],
    ['CVSS:3.1/AV:L/AC:L/PR:L/UI:N/S:U/C:H/I:H/A:H', 7.8, 'high'],
    ['CVSS:3.0/AV:N/AC:H/PR:N/UI:R/S:U/C:L/I:N/A:N', 3.1, 'low'],
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:N/I:N/A:N', 0, 'none'],
    ['CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:L/I:L/A:N/E:U/RL:O', 6.5, 'medium'], // temporal metrics do not change the base score
    ['CVSS:4.0/AV:N/AC:L/AT:N/PR:N/UI:N/VC:H/VI:H/VA:H/SC:N/SI:N/SA:N', 9.3, 'critical'],
  ];
  for (const [v, score, rating] of cases) t.same({ score: cvssScore(v).score, rating: cvssScore(v).rating }, { score, rating }, v);
  for (const bad of ['', 'AV:N/AC:L/Au:N/C:P/I:P/A:P', 'CVSS:3.1/AV:N/AC:L', 'CVSS:3.1/AV:X/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 'CVSS:3.1/AV:N/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H', 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H/ZZ:1', 'CVSS:2.0/AV:N']) {
    t.equal(thrownCode(() => cvssScore(bad)), 'ERR_CVSS_VECTOR', JSON.stringify(bad));
  }
  const a = readAdvisory(good('X-1', undefined, { severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N' }, { type: 'Ubuntu', score: 'negligible' }] }));
  t.same(a.severity.map((s) => [s.rating, s.error ?? null]), [[null, 'ERR_CVSS_VECTOR'], ['low', null]], 'a bad vector keeps the advisory, without a score');
});

t.test('modified times order to the nanosecond, across offsets', async (t) => {
  t.ok(modifiedKey('2026-09-12T08:30:03.756478307Z')! > modifiedKey('2026-09-12T08:30:03.756478306Z')!);
  t.equal(modifiedKey('2026-09-12T10:30:03+02:00'), modifiedKey('2026-09-12T08:30:03Z'));
  t.ok(modifiedKey('2026-09-12T08:30:03.1Z')! > modifiedKey('2026-09-12T08:30:03Z')!);
  t.equal(modifiedKey('2026-09-12 08:30:03'), null);
});

async function run(path: string, opts: Partial<ImportOptions> = {}) {
  const got: Advisory[] = [];
  const report = await importOsvFeed(path, { onAdvisory: (a) => void got.push(a), ...opts });
  return { got, report };
}

t.test('a directory imports its .json and .zip files; each bad entry is skipped with its code', async (t) => {
  const dir = t.testdir({
    'DSA-1.json': JSON.stringify(good('DSA-1')),
    'bad-json.json': '{"id": "DSA-2", ',
    'bad-schema.json': JSON.stringify({ id: 'DSA-3' }),
    'README.txt': 'not a feed file',
    sub: { 'DLA-4.json': JSON.stringify(good('DLA-4', '2026-01-02T00:00:00Z', { withdrawn: '2026-01-03T00:00:00Z' })) },
  });
  writeFileSync(join(dir, 'big.json'), JSON.stringify(good('DSA-5', undefined, { summary: 'x'.repeat(5000) })));
  writeFileSync(join(dir, 'more.zip'), makeZip([
    { name: 'ALSA-2026:0001.json', data: Buffer.from(JSON.stringify(good('ALSA-2026:0001'))) },
    { name: 'ALSA-2026:0002.json', data: Buffer.from(JSON.stringify(good('ALSA-2026:0002'))), crc: 12345 },
    { name: 'docs/', data: Buffer.alloc(0) },
  ]));
  const { got, report } = await run(dir, { limits: { maxEntryBytes: 4000 } });
  t.same(got.map((a) => a.id).sort(), ['ALSA-2026:0001', 'DLA-4', 'DSA-1']);
  t.same(report.skipped, { ERR_OSV_INVALID: 2, ERR_OSV_TOO_LARGE: 1, ERR_DECOMPRESS: 1 });
  t.equal(report.entries, 7, 'every entry read is counted, good or bad');
  t.equal(report.withdrawn, 1, 'a withdrawn entry is passed on, for the caller to drop it');
  t.ok(report.errors.every((e) => e.entry && e.code && e.message), 'each bad entry says where and why');
  t.notOk(report.stopped);
});

t.test('only entries newer than the stored copy are passed on; an id met twice keeps its newest', async (t) => {
  const dir = t.testdir({
    'a.json': JSON.stringify(good('DSA-1', '2026-01-01T00:00:00.000000001Z')),
    'b.json': JSON.stringify(good('DSA-2', '2026-01-01T00:00:00Z')),
    'c.json': JSON.stringify(good('DSA-3', '2026-03-01T00:00:00Z')),
    'd.json': JSON.stringify(good('DSA-3', '2026-02-01T00:00:00Z')),
  });
  const stored: Record<string, string> = { 'DSA-1': '2026-01-01T00:00:00Z', 'DSA-2': '2026-01-01T01:00:00+01:00' };
  const { got, report } = await run(dir, { known: (id) => stored[id] });
  t.same(got.map((a) => [a.id, a.modified]), [['DSA-1', '2026-01-01T00:00:00.000000001Z'], ['DSA-3', '2026-03-01T00:00:00Z']]);
  t.equal(report.unchanged, 2, 'DSA-2 (same instant) and the older DSA-3');
});

t.test('a zip is read member by member; its bounds stop the import with what was read kept', async (t) => {
  const dir = t.testdir({});
  const members = Array.from({ length: 5 }, (_, i) => ({ name: `DSA-${i}.json`, data: Buffer.from(JSON.stringify(good(`DSA-${i}`))) }));
  writeFileSync(join(dir, 'all.zip'), makeZip(members));
  t.equal((await run(join(dir, 'all.zip'))).got.length, 5);
  const byCount = await run(join(dir, 'all.zip'), { limits: { maxEntries: 3 } });
  t.equal(byCount.got.length, 3);
  t.equal(byCount.report.stopped?.code, 'ERR_FEED_TOO_LARGE');
  const size = members[0]!.data.length;
  const byBytes = await run(join(dir, 'all.zip'), { limits: { maxTotalBytes: size * 2 + 1 } });
  t.equal(byBytes.got.length, 2);
  t.equal(byBytes.report.stopped?.code, 'ERR_FEED_TOO_LARGE');
  // A member that lies about its size is cut at the entry limit, not read whole.
  writeFileSync(join(dir, 'liar.zip'), makeZip([{ name: 'X.json', data: Buffer.from(JSON.stringify(good('X-1', undefined, { summary: 'y'.repeat(9000) }))), declaredSize: 100 }]));
  const liar = await run(join(dir, 'liar.zip'), { limits: { maxEntryBytes: 1000 } });
  t.equal(liar.got.length, 0);
  t.equal(Object.keys(liar.report.skipped).length, 1, `skipped as ${Object.keys(liar.report.skipped)}`);
  writeFileSync(join(dir, 'broken.zip'), Buffer.from('PK not really'));
  await t.rejects(run(join(dir, 'broken.zip')), { code: 'ERR_DECOMPRESS' });
  writeFileSync(join(dir, 'feed.txt'), 'x');
  await t.rejects(run(join(dir, 'feed.txt')), { code: 'ERR_FEED_SOURCE' });
});

t.test('the KEV catalogue gives CVE → dates added and due; bad entries are counted', async (t) => {
  const dir = t.testdir({
    'kev.json': JSON.stringify({
      title: 'CISA Catalog of Known Exploited Vulnerabilities', catalogVersion: '2026.01.02', dateReleased: '2026-01-02T15:00:00.000Z', count: 3,
      vulnerabilities: [
        { cveID: 'CVE-2023-4966', vendorProject: 'Citrix', dateAdded: '2023-10-18', dueDate: '2023-11-08', knownRansomwareCampaignUse: 'Known' },
        { cveID: 'not-a-cve', dateAdded: '2023-10-18' },
        { cveID: 'CVE-2021-44228', dateAdded: '2021-12-10', dueDate: '2021-12-24', knownRansomwareCampaignUse: 'Unknown' },
      ],
    }),
    'notkev.json': JSON.stringify({ hello: 1 }),
    'garbage.json': '{{',
  });
  const kev = await readKev(join(dir, 'kev.json'));
  t.same(kev.entries.get('CVE-2023-4966'), { dateAdded: '2023-10-18', dueDate: '2023-11-08', ransomware: 'Known' });
  t.equal(kev.entries.size, 2);
  t.equal(kev.skipped, 1);
  t.equal(kev.catalogVersion, '2026.01.02');
  await t.rejects(readKev(join(dir, 'notkev.json')), { code: 'ERR_KEV_INVALID' });
  await t.rejects(readKev(join(dir, 'garbage.json')), { code: 'ERR_KEV_INVALID' });
  await t.rejects(readKev(join(dir, 'kev.json'), { maxKevBytes: 100 }), { code: 'ERR_FEED_TOO_LARGE' });
});

t.test('EPSS scores are read from the CSV or its .gz, with the model and date of its header', async (t) => {
  const csv = '#model_version:v2023.03.01,score_date:2026-01-02T00:00:00+0000\ncve,epss,percentile\nCVE-2021-44228,0.97565,0.99996\nCVE-2026-0001,0.00043,0.0812\nCVE-bad,0.1,0.2\nCVE-2026-0002,1.5,0.2\n';
  const dir = t.testdir({ 'epss.csv': csv, 'noheader.csv': 'CVE-2021-44228,0.9,0.9\n' });
  writeFileSync(join(dir, 'epss.csv.gz'), zlib.gzipSync(csv));
  writeFileSync(join(dir, 'corrupt.csv.gz'), Buffer.concat([zlib.gzipSync(csv).subarray(0, 30), Buffer.alloc(40, 7)]));
  for (const f of ['epss.csv', 'epss.csv.gz']) {
    const e = await readEpss(join(dir, f));
    t.equal(e.modelVersion, 'v2023.03.01', f);
    t.equal(e.scoreDate, '2026-01-02T00:00:00+0000');
    t.same(e.scores.get('CVE-2021-44228'), { epss: 0.97565, percentile: 0.99996 });
    t.equal(e.scores.size, 2);
    t.equal(e.skipped, 2, 'a bad id and a score over 1 are skipped and counted');
  }
  await t.rejects(readEpss(join(dir, 'noheader.csv')), { code: 'ERR_EPSS_INVALID' });
  await t.rejects(readEpss(join(dir, 'epss.csv.gz'), { maxEpssBytes: 100 }), { code: 'ERR_FEED_TOO_LARGE' });
  await t.rejects(readEpss(join(dir, 'epss.csv'), { maxEpssRows: 1 }), { code: 'ERR_FEED_TOO_LARGE' });
  await t.rejects(readEpss(join(dir, 'corrupt.csv.gz')), { code: 'ERR_DECOMPRESS' });
});

t.test('a directory deeper than the depth bound is not walked', async (t) => {
  const dir = t.testdir({});
  let p = dir;
  for (let i = 0; i < 3; i++) mkdirSync((p = join(p, `d${i}`)));
  writeFileSync(join(p, 'DSA-9.json'), JSON.stringify(good('DSA-9')));
  t.equal((await run(dir, { limits: { maxDepth: 3 } })).got.length, 1);
  t.equal((await run(dir, { limits: { maxDepth: 2 } })).got.length, 0);
});
