/**
 * Feed sources and settings (server/src/vulns/sources.ts, settings.ts) and the score's grades
 * (score.ts): a URL fetched from a loopback server, bounded in size, refused on a bad status, a
 * checksum that does not match, a path that does not exist, `[vulnerabilities]` entries that are
 * not name=source, and the grading thresholds.
 */
import { createHash } from 'node:crypto';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { checksumFor, localFeed } from '@capstan/server/vulns/sources';
import { vulnSettings } from '@capstan/server/vulns/settings';
import { complianceGrade, exposureGrade, fleetScore } from '@capstan/server/vulns/score';
import { nodeInput } from '@capstan/server/vulns/service';

const BODY = Buffer.from('{"id":"DSA-1-1"}');
const SUM = createHash('sha256').update(BODY).digest('hex');

t.test('a URL fetched, bounded, checked; a path read', async (t) => {
  const srv = createServer((req, res) => {
    if (req.url === '/feed.json' && req.headers['if-none-match'] === '"v1"') res.writeHead(304).end();
    else if (req.url === '/feed.json') res.writeHead(200, { 'last-modified': 'Tue, 01 Dec 2026 10:00:00 GMT', etag: '"v1"' }).end(BODY);
    else if (req.url === '/SHA256SUMS') res.writeHead(200).end(`${SUM}  feed.json\n${'0'.repeat(64)}  other.zip\n`);
    else if (req.url === '/BADSUMS') res.writeHead(200).end(`${'1'.repeat(64)}  feed.json\n`);
    else res.writeHead(404).end();
  });
  await new Promise<void>((r) => srv.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => srv.close(() => r())));
  const base = `http://127.0.0.1:${(srv.address() as AddressInfo).port}`;
  const dir = t.testdir();
  const limits = { maxBytes: 1024, timeoutMs: 5000, maxChecksumBytes: 1024 };
  const now = new Date('2026-12-02T00:00:00Z');

  const got = await localFeed('debian', `${base}/feed.json`, { dir, checksum: `${base}/SHA256SUMS`, limits, now });
  t.same(got, { path: join(dir, 'debian.json'), feedDate: '2026-12-01T10:00:00.000Z', sha256: SUM, etag: '"v1"' });
  t.same(await readFile(got.path), BODY);
  const again = await localFeed('debian', `${base}/feed.json`, { dir, limits, now, since: { etag: '"v1"', lastModified: got.feedDate } });
  t.same(again, { path: got.path, feedDate: got.feedDate, sha256: null, notModified: true, etag: '"v1"' }, '304: the kept copy stands');
  t.match(await localFeed('other', `${base}/feed.json`, { dir, limits, now, since: { etag: '"v1"' } }), { sha256: null, etag: '"v1"' }, 'no kept copy: asked whole');
  t.notOk((await localFeed('other2', `${base}/feed.json`, { dir, limits, now, since: { etag: '"v1"' } })).notModified);
  await t.rejects(localFeed('debian', `${base}/feed.json`, { dir, checksum: `${base}/BADSUMS`, limits, now }), { code: 'ERR_FEED_CHECKSUM' });
  await t.rejects(localFeed('debian', `${base}/feed.json`, { dir, limits: { ...limits, maxBytes: 8 }, now }), { code: 'ERR_FEED_FETCH' }, 'over the download limit');
  await t.rejects(localFeed('debian', `${base}/nope.zip`, { dir, limits, now }), { code: 'ERR_FEED_FETCH', message: /HTTP 404/ });
  await t.rejects(localFeed('debian', '/nonexistent/feed.zip', { dir, limits, now }), { code: 'ERR_FEED_SOURCE' });

  const file = join(dir, 'local.json');
  await writeFile(file, BODY);
  await writeFile(join(dir, 'SUMS'), `${SUM} *local.json\n`);
  t.match(await localFeed('local', file, { dir, checksum: join(dir, 'SUMS'), limits, now }), { path: file, sha256: SUM });
  t.equal(checksumFor(`${SUM}\n`, 'anything'), SUM, 'a lone hash applies to the file');
  t.equal(checksumFor(`${SUM}  a.zip\n${SUM}  b.zip\n`, 'c.zip'), null);
});

t.test('[vulnerabilities] settings are checked', async (t) => {
  const base = {
    feeds: [] as string[], checksums: [] as string[], kev: '', epss: '', interval: 0, stale_after: 1, max_download_size: 1, fetch_timeout: 1,
    max_entry_size: 1, max_feed_size: 1, max_entries: 1, rematch_all_above: 0,
  };
  t.match(vulnSettings({ ...base, feeds: ['debian=https://example.org/Debian/all.zip'], kev: '/srv/kev.json', checksums: ['kev=/srv/SUMS'] }).feeds, [
    { kind: 'osv', name: 'debian', source: 'https://example.org/Debian/all.zip' }, { kind: 'kev', name: 'kev', source: '/srv/kev.json', checksum: '/srv/SUMS' },
  ]);
  t.throws(() => vulnSettings({ ...base, feeds: ['debian'] }), { code: 'ERR_CONFIG', message: /name=source/ });
  t.throws(() => vulnSettings({ ...base, feeds: ['debian=relative/path'] }), { code: 'ERR_CONFIG', message: /absolute path/ });
  t.throws(() => vulnSettings({ ...base, feeds: ['kev=/srv/a.zip'], kev: '/srv/kev.json' }), { code: 'ERR_CONFIG', message: /used twice/ });
  t.throws(() => vulnSettings({ ...base, checksums: ['alma=/srv/SUMS'] }), { code: 'ERR_CONFIG', message: /not a configured feed/ });
});

t.test('grades', async (t) => {
  t.same([0, 5, 6, 20, 21, 50, 51].map((p) => exposureGrade(p, false)), ['A', 'B', 'C', 'C', 'D', 'D', 'E']);
  t.equal(exposureGrade(3, true), 'D', 'KEV: D at best');
  t.equal(exposureGrade(60, true), 'E');
  t.same([100, 95, 94.99, 85, 70, 50, 49].map(complianceGrade), ['A', 'A', 'B', 'B', 'C', 'D', 'E']);
  t.equal(complianceGrade(null), null);
  const node = (grade: 'A' | 'B' | 'C' | 'D' | 'E' | null) => ({ node_id: 'x', grade, compliance: { percent: null, grade: null }, exposure: { points: 0, advisories: 0, kev: 0, grade: 'A' as const } });
  t.match(fleetScore([node('A'), node('A'), node('E'), node(null)]), { grade: 'C', nodes: 3, by_grade: { A: 2, E: 1 } }, 'mean 8/3 rounded down is 2: C');
  t.match(fleetScore([]), { grade: null, nodes: 0 });
});

t.test('what matching reads of an inventory', async (t) => {
  t.same(nodeInput('n1', { os: { name: 'Ubuntu', version: '22.04' }, facts: { ubuntu_pro: true }, packages: [{ name: 'libssl3', version: '3.0.2-0ubuntu1.15', source: 'openssl' }, { name: 'x' }, { name: 'bash', version: '5.1', epoch: 0 }] }), {
    id: 'n1', os: { name: 'ubuntu', version: '22.04' }, ubuntu_pro: true,
    packages: [{ name: 'libssl3', version: '3.0.2-0ubuntu1.15', source: 'openssl' }, { name: 'bash', version: '5.1', epoch: '0' }],
  }, 'a package without a version is left out; a numeric epoch is read as text');
  t.equal(nodeInput('n1', { os: { name: 'debian' } }), null, 'no OS version: nothing to match');
  t.notOk(nodeInput('n1', { os: { name: 'ubuntu', version: '22.04' }, facts: { ubuntu_pro: 'yes' } })!.ubuntu_pro);
});
