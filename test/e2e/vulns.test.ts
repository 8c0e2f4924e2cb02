/**
 * Vulnerabilities with the real server: OSV advisories for Debian:12 in a zip, CISA's KEV list
 * and their SHA-256 sums served by a loopback HTTP server; a node whose signed inventory holds
 * libssl3 built from a vulnerable openssl appears under the CVE with its reason (API and
 * `capstan`), is muted and unmuted, is closed by an inventory with the fixed version, and a feed
 * update withdrawing the advisory removes its finding; a feed that fails its checksum is not
 * imported and says why. The console's page and node section show the finding (with a Chromium).
 * One server start, one `capstan` run.
 */
import { createHash, randomUUID } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { compressSync, createNodeIdentity, inventoryFileName, signSmime } from '@capstan/shared';
import { ROOT, runProgram, programDir, startServer, waitFor } from '../helpers/programs.js';
import { makeZip } from '../helpers/zip.js';
import { chromiumAbsent, openBrowser } from '../helpers/browser.js';

const CVE = 'CVE-2023-5363';
const advisory = (id: string, over: Record<string, unknown> = {}) => ({
  id, modified: '2026-01-01T00:00:00Z', published: '2023-10-25T00:00:00Z', aliases: [CVE], summary: 'openssl: incorrect cipher key and IV length processing',
  severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N' }],
  affected: [{ package: { ecosystem: 'Debian:12', name: 'openssl' }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: '3.0.11-1~deb12u2' }] }] }],
  ...over,
});
const other = { ...advisory('DSA-1-1'), aliases: ['CVE-2024-1'], affected: [{ package: { ecosystem: 'Debian:11', name: 'openssl' }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }] }] }] };
const kev = { catalogVersion: '2026.01.01', dateReleased: '2026-01-01T00:00:00Z', vulnerabilities: [{ cveID: CVE, dateAdded: '2025-06-01', dueDate: '2025-06-22', knownRansomwareCampaignUse: 'Unknown' }] };

t.test('a node exposed through its inventory, muted, fixed, and an advisory withdrawn', async (t) => {
  const files = new Map<string, Buffer>();
  const sums = () => [...files].filter(([p]) => p !== '/SHA256SUMS').map(([p, b]) => `${createHash('sha256').update(b).digest('hex')}  ${p.slice(p.lastIndexOf('/') + 1)}`).join('\n');
  const serve = (zip: Buffer) => {
    files.set('/Debian/all.zip', zip);
    files.set('/kev/known_exploited_vulnerabilities.json', Buffer.from(JSON.stringify(kev)));
    files.set('/SHA256SUMS', Buffer.from(sums()));
  };
  serve(makeZip([{ name: 'DSA-5532-1.json', data: Buffer.from(JSON.stringify(advisory('DSA-5532-1'))) }, { name: 'DSA-1-1.json', data: Buffer.from(JSON.stringify(other)) }]));
  const http: Server = createServer((req, res) => {
    const body = files.get(req.url ?? '');
    res.writeHead(body ? 200 : 404, { 'last-modified': new Date().toUTCString() }).end(body ?? '');
  });
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => http.close(() => r())));
  const base = `http://127.0.0.1:${(http.address() as AddressInfo).port}`;

  const dir = programDir(t);
  await writeFile(join(dir, 'server.toml'), `[identity]\nrequire_token = false\n[vulnerabilities]\nfeeds = ["debian=${base}/Debian/all.zip"]\n`
    + `kev = "${base}/kev/known_exploited_vulnerabilities.json"\nchecksums = ["debian=${base}/SHA256SUMS", "kev=${base}/SHA256SUMS"]\ninterval = 0\n`);
  const { server, api, token } = await startServer(t, join(dir, 'server'), { config: join(dir, 'server.toml') });

  // The feeds on demand: both advisories, KEV, checksums verified.
  const refreshed = await api('POST', '/api/1/vulnerabilities/feeds/refresh');
  t.equal(refreshed.status, 200, JSON.stringify(refreshed.json));
  t.match(refreshed.json.data, { changed: 2, withdrawn: 0, feeds: [{ name: 'debian', kind: 'osv', error: null, stale: false, report: { accepted: 2, sha256: String } }, { name: 'kev', error: null, report: { entries: 1 } }] });

  const nodeId = randomUUID();
  const identity = createNodeIdentity(nodeId);
  let second = 0;
  const sendInventory = async (libssl: string) => {
    const doc = {
      node_id: nodeId, hostname: 'web-1.example.com', certificate: identity.certPem, agent_version: '0.1.0', policy_server: 'server',
      os: { name: 'debian', version: '12.5', kernel: '6.1', arch: 'x86_64' },
      packages: [{ name: 'libssl3', version: libssl, source: 'openssl' }, { name: 'bash', version: '5.2.15-2+b7' }],
    };
    const name = inventoryFileName(nodeId, new Date(Date.UTC(2026, 0, 1, 0, 0, ++second)), 'zstd');
    const res = await fetch(`${server.url}/inventories/${name}`, { method: 'PUT', body: compressSync(signSmime(Buffer.from(JSON.stringify(doc)), identity), 'zstd') });
    t.ok(res.status >= 200 && res.status < 300, `inventory with libssl3 ${libssl} accepted (${res.status})`);
    await res.body?.cancel();
  };
  const findings = async () => {
    const r = await api('GET', `/api/1/nodes/${nodeId}/vulnerabilities`);
    return r.status === 200 ? (r.json.data.findings as Array<Record<string, any>>) : null;
  };
  const until = (n: number, what: string) => waitFor(async () => ((await findings())?.length === n ? true : undefined), what);

  await sendInventory('3.0.11-1~deb12u1');
  await until(1, 'the inventory to be matched');
  t.equal((await api('POST', `/api/1/nodes/${nodeId}/accept`)).status, 200);

  // The CVE names the node with its reason; KEV joined by the CVE.
  const shown = await api('GET', `/api/1/vulnerabilities/${CVE}`);
  t.equal(shown.status, 200);
  t.match(shown.json.data, {
    advisories: [{ id: 'DSA-5532-1', rating: 'high' }], kev: { date_added: '2025-06-01' }, nodes: 1,
    findings: [{ node_id: nodeId, package: 'libssl3', version: '3.0.11-1~deb12u1', fixed: '3.0.11-1~deb12u2', muted: null,
      match: { advisory: 'DSA-5532-1', ecosystem: 'Debian:12', name: 'openssl', via: 'source', compared: '3.0.11-1~deb12u1', range: { introduced: '0', fixed: '3.0.11-1~deb12u2' } } }],
  });
  t.match((await api('GET', '/api/1/vulnerabilities?kev=true&severity=high')).json, { total: 1, data: [{ id: 'DSA-5532-1', nodes: 1, kev: { due_date: '2025-06-22' } }] });
  t.match((await api('GET', '/api/1/vulnerabilities/fixes')).json.data, [{ name: 'openssl', fixed: '3.0.11-1~deb12u2', nodes: [nodeId], packages: ['libssl3'] }]);
  t.match((await api('GET', '/api/1/vulnerabilities/nope-1')).json, { error: { code: 'ERR_NOT_FOUND' } });
  t.match((await api('GET', '/api/1/vulnerabilities?severity=awful')).json, { error: { code: 'ERR_BAD_REQUEST' } });
  t.match((await api('GET', '/api/1/score?nodes=true')).json.data, { fleet: { nodes: 1 }, nodes: [{ node_id: nodeId, exposure: { points: 15, kev: 1, grade: 'D' } }] });
  const csv = await fetch(`${server.url}/api/1/vulnerabilities?format=csv`, { headers: { authorization: `Bearer ${token}` } });
  t.match(await csv.text(), /^id,cves,rating,kev,.*\r\nDSA-5532-1,CVE-2023-5363,high,true,/s, 'CSV export');

  // The command line says the same.
  const cli = await runProgram(join(ROOT, 'server/dist/admin-cli/cli.js'), ['vulns', 'show', CVE, '--json', '--url', server.url, '--token-file', join(dir, 'server', 'admin.token')]);
  t.equal(cli.code, 0, cli.stderr);
  t.match(JSON.parse(cli.stdout).data, { findings: [{ node_id: nodeId, match: { via: 'source', name: 'openssl' } }] });

  // The console shows the same (when a Chromium is at hand: browser.ts).
  if (!chromiumAbsent()) {
    const { page, problems } = await openBrowser(t, 'console-vulns');
    await page.goto(`${server.url}/`);
    await page.getByLabel('Admin token').fill(token);
    await page.getByRole('button', { name: 'Sign in' }).click();
    await page.getByRole('heading', { name: 'Dashboard' }).waitFor();
    await page.getByRole('navigation', { name: 'Main' }).getByRole('link', { name: 'Vulnerabilities' }).click();
    const row = page.getByRole('row', { name: /DSA-5532-1/ });
    await row.getByText('KEV').waitFor();
    t.match(await row.innerText(), /CVE-2023-5363\s+high/, 'the advisory with its CVE, KEV and rating');
    await page.goto(`${server.url}/#/nodes/${nodeId}`);
    await page.getByText('source openssl 3.0.11-1~deb12u1 in [0, 3.0.11-1~deb12u2)').waitFor();
    t.match(await page.getByTestId('node-score').innerText(), /^Grade D: .*exposure 15 point\(s\) over 1 advisory\(ies\), 1 in KEV \(D\)/, 'the node\'s score');
    t.same(problems, [], 'no Content-Security-Policy violation, no page error');
  }

  // A mute: kept and marked, not counted; a bad one refused with its field.
  const mute = await api('POST', '/api/1/vulnerabilities/mutes', { target: CVE, reason: 'no TLS listener on this host', expires: '2099-01-01' });
  t.equal(mute.status, 201);
  t.match(await findings(), [{ muted: { mute: mute.json.data.id, reason: 'no TLS listener on this host' } }]);
  t.match((await api('GET', '/api/1/vulnerabilities')).json.data, [{ id: 'DSA-5532-1', nodes: 0, muted_nodes: 1 }]);
  t.match((await api('POST', '/api/1/vulnerabilities/mutes', { target: CVE })).json, { error: { code: 'ERR_MUTE_INVALID', field: 'reason' } });
  t.equal((await api('DELETE', `/api/1/vulnerabilities/mutes/${mute.json.data.id}`)).status, 200);

  // A patch campaign in one step from the CVE: the packages its fix upgrades, on the exposed node.
  // The feed's fixed version is openssl's (the source): libssl3 is upgraded without a minimum.
  const campaign = await api('POST', '/api/1/campaigns', { name: `fix ${CVE}`, vulnerability: CVE });
  t.equal(campaign.status, 201, `a campaign from ${CVE} (${JSON.stringify(campaign.json.error ?? '')})`);
  t.same(campaign.json.data.spec.upgrade.packages, [{ name: 'libssl3' }], 'the installed binary of the fixed source package');
  t.same(campaign.json.data.spec.nodes, [nodeId], 'targets the exposed node');
  t.equal((await api('POST', `/api/1/campaigns/${campaign.json.data.id}/cancel`)).status, 200);
  t.match((await api('POST', '/api/1/campaigns', { name: 'nothing', vulnerability: 'CVE-1999-0001' })).json, { error: { code: 'ERR_NOT_FOUND' } }, 'an unknown CVE');

  // The fixed version closes it; the vulnerable one again opens it.
  await sendInventory('3.0.11-1~deb12u2');
  await until(0, 'the fixed version to close the finding');
  await sendInventory('3.0.11-1~deb12u1');
  await until(1, 'the finding again');

  // The feed withdraws the advisory: its finding goes.
  serve(makeZip([{ name: 'DSA-5532-1.json', data: Buffer.from(JSON.stringify(advisory('DSA-5532-1', { modified: '2026-02-01T00:00:00Z', withdrawn: '2026-02-01T00:00:00Z' }))) }]));
  t.match((await api('POST', '/api/1/vulnerabilities/feeds/refresh')).json.data, { changed: 1, withdrawn: 1 });
  t.same(await findings(), []);

  // A feed that fails its checksum is not imported; the state says why.
  files.set('/Debian/all.zip', makeZip([{ name: 'DSA-7-1.json', data: Buffer.from(JSON.stringify(advisory('DSA-7-1'))) }]));
  const bad = await api('POST', '/api/1/vulnerabilities/feeds/refresh');
  t.match(bad.json.data, { changed: 0, feeds: [{ name: 'debian', error: /^ERR_FEED_CHECKSUM/ }] });
  t.match((await api('GET', '/api/1/vulnerabilities/feeds')).json.data, [{ name: 'debian', error: /^ERR_FEED_CHECKSUM/ }, { name: 'kev', error: null }]);
  // Without waiting: 202 at once; the feeds' state tells how it went.
  t.match(await api('POST', '/api/1/vulnerabilities/feeds/refresh?wait=false'), { status: 202, json: { data: { started: true } } });
  t.match((await api('POST', '/api/1/vulnerabilities/feeds/refresh?wait=maybe')).json, { error: { code: 'ERR_BAD_REQUEST' } });
});
