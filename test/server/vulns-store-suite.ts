/**
 * Vulnerabilities on a store, written once for both (vulns-store.test.ts): advisories and their
 * CVE ids, KEV and EPSS, feed states, findings per node and per advisory, the names nodes are
 * looked up by, mutes; then the service over that store: a feed imported from a directory, a
 * node matched from its inventory, a new version closing its finding, a withdrawn entry
 * removing it, a mute marking it (kept, not dropped).
 */
import { mkdir, mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import type { Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import type { Store } from '@capstan/server/store/index';
import { VulnService } from '@capstan/server/vulns/service';
import { vulnSettings } from '@capstan/server/vulns/settings';
import { filterGroupMembers, listView, nodeView, showView, fixesView } from '@capstan/server/vulns/views';
import { updateNode } from '../helpers/node-changes.js';
import { fixPlan } from '@capstan/server/vulns/fix-plan';
import { evaluateFilter, parseFilter, type FilterSubject } from '@capstan/shared';
import { inventory, setup, type Backend } from './store-suite.js';

const finding = (node_id: string, advisory: string, pkg = 'libssl3') => ({
  node_id, advisory, package: pkg, version: '3.0.11-1~deb12u1', rating: 'high', fixed: '3.0.11-1~deb12u2',
  match: { advisory, cves: ['CVE-2023-5363'], name: 'openssl', ecosystem: 'Debian:12', fixed: '3.0.11-1~deb12u2' }, found_at: '2024-05-01T10:00:00.000Z',
});

export function osvEntry(id: string, opts: { modified?: string; withdrawn?: string; fixed?: string; name?: string; cve?: string } = {}) {
  return {
    id, modified: opts.modified ?? '2024-05-01T00:00:00Z', ...(opts.withdrawn && { withdrawn: opts.withdrawn }), aliases: [opts.cve ?? 'CVE-2023-5363'],
    summary: `${opts.name ?? 'openssl'} flaw`,
    severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:N/A:N' }],
    affected: [{ package: { ecosystem: 'Debian:12', name: opts.name ?? 'openssl' }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: opts.fixed ?? '3.0.11-1~deb12u2' }] }] }],
  };
}

async function accepted(store: Store, id: string, packages: unknown[]): Promise<void> {
  await store.upsertFromInventory(inventory(id, { inventory: { node_id: id, os: { name: 'Debian', version: '12.5' }, packages } }));
}

export function vulnsStoreSuite(t: Test, backend: Backend): void {
  t.test('advisories, CVE ids, KEV, EPSS and feed states round-trip', async (t) => {
    const { store } = await setup(t, backend);
    const v = store.vulns;
    await v.putAdvisories([
      { id: 'DSA-1', modified: '2024-05-01T00:00:00Z', withdrawn: null, summary: 'one', rating: 'high', cves: ['CVE-2024-1', 'CVE-2024-2'], doc: { id: 'DSA-1', affected: [] } },
      { id: 'DLA-2', modified: '2024-05-02T00:00:00Z', withdrawn: '2024-05-03T00:00:00Z', summary: null, rating: null, cves: ['CVE-2024-1'], doc: { id: 'DLA-2', affected: [] } },
    ]);
    t.same((await v.advisoryVersions()).sort((a, b) => (a.id < b.id ? -1 : 1)), [{ id: 'DLA-2', modified: '2024-05-02T00:00:00Z' }, { id: 'DSA-1', modified: '2024-05-01T00:00:00Z' }]);
    t.same((await v.pageAdvisories('', 10)).map((a) => a.id), ['DSA-1'], 'withdrawn ones are not loaded');
    t.same(await v.advisoriesOfCve('CVE-2024-1'), ['DLA-2', 'DSA-1']);
    await v.putAdvisories([{ id: 'DSA-1', modified: '2024-06-01T00:00:00Z', withdrawn: null, summary: 'two', rating: 'critical', cves: ['CVE-2024-3'], doc: { id: 'DSA-1', affected: [] } }]);
    t.same(await v.advisoriesOfCve('CVE-2024-2'), [], 'a replaced advisory keeps only its new CVE ids');
    t.match(await v.getAdvisories(['DSA-1', 'nope']), [{ id: 'DSA-1', summary: 'two', rating: 'critical', cves: ['CVE-2024-3'] }]);
    t.same(await v.getAdvisories(['a\u0000b']), [], 'a name with U+0000 finds nothing');

    await v.replaceEnrichment([{ cve: 'CVE-2024-3', date_added: '2024-01-01', due_date: '2024-02-01', ransomware: 'Known' }], [{ cve: 'CVE-2024-3', epss: 0.5, percentile: 0.97 }]);
    await v.replaceEnrichment(null, [{ cve: 'CVE-2024-3', epss: 0.25, percentile: 0.9 }]);
    t.same(await v.enrichment(['CVE-2024-3', 'CVE-2000-1']), { kev: [{ cve: 'CVE-2024-3', date_added: '2024-01-01', due_date: '2024-02-01', ransomware: 'Known' }], epss: [{ cve: 'CVE-2024-3', epss: 0.25, percentile: 0.9 }] });

    await v.putFeedState({ name: 'debian', source: '/srv/feeds/debian.zip', imported_at: null, feed_date: null, report: null, error: 'ERR_FEED_FETCH: down' });
    await v.putFeedState({ name: 'debian', source: '/srv/feeds/debian.zip', imported_at: '2024-05-01T10:00:00Z', feed_date: '2024-05-01T09:00:00Z', report: { entries: 2 }, error: null });
    t.same(await v.feedStates(), [{ name: 'debian', source: '/srv/feeds/debian.zip', imported_at: '2024-05-01T10:00:00Z', feed_date: '2024-05-01T09:00:00Z', report: { entries: 2 }, error: null }]);
  });

  t.test('findings per node and per advisory, lookup names, counts and mutes', async (t) => {
    const { store } = await setup(t, backend);
    const v = store.vulns;
    for (const id of ['n1', 'n2']) await store.upsertFromInventory(inventory(id));
    await v.putAdvisories(['DSA-1', 'DSA-2'].map((id) => ({ id, modified: '2024-05-01T00:00:00Z', withdrawn: null, summary: null, rating: 'high', cves: ['CVE-2023-5363'], doc: {} })));
    await v.replaceNodeFindings('n1', [finding('n1', 'DSA-1'), finding('n1', 'DSA-2')], ['libssl3', 'openssl']);
    await v.replaceNodeFindings('n2', [finding('n2', 'DSA-1')], ['openssl', 'bash']);
    t.same((await v.nodeFindings('n1')).map((f) => f.advisory), ['DSA-1', 'DSA-2']);
    t.match((await v.nodeFindings('n1'))[0], finding('n1', 'DSA-1'), 'the reason comes back as stored');
    t.same(await v.nodesWithNames(['openssl']), ['n1', 'n2']);
    t.same(await v.nodesWithNames(['bash', 'zsh']), ['n2']);
    t.same(await v.countByAdvisory(), [{ advisory: 'DSA-1', nodes: 2 }, { advisory: 'DSA-2', nodes: 1 }]);
    t.same(await v.countByAdvisory(['n2']), [{ advisory: 'DSA-1', nodes: 1 }]);
    t.equal((await v.findingSummary()).length, 3);

    await v.replaceAdvisoryFindings('DSA-1', ['n1', 'n2'], [finding('n2', 'DSA-1', 'openssl')]);
    t.same((await v.advisoryFindings(['DSA-1'])).map((f) => `${f.node_id}/${f.package}`), ['n2/openssl'], 'only the nodes given were replaced');
    t.equal(await v.deleteAdvisoryFindings('DSA-2'), 1);
    await v.replaceNodeFindings('n1', [], ['bash']);
    t.same(await v.nodesWithNames(['openssl']), ['n2'], 'a node\'s names are replaced with its findings');
    t.equal(await store.deleteNode('n2'), true);
    t.same(await v.advisoryFindings(['DSA-1']), [], 'a deleted node\'s findings go with it');
    t.same(await v.nodesWithNames(['openssl']), []);

    const mute = { id: 'm1', target: 'CVE-2023-5363', groups: ['dmz'], reason: 'no listener', expires: '2030-01-01T00:00:00.000Z', created_at: '2024-05-01T00:00:00Z', created_by: 'alice' };
    t.equal(await v.insertMute(mute), true);
    t.equal(await v.insertMute({ ...mute, reason: 'again' }), false, 'an id is taken once');
    t.same(await v.listMutes(), [mute]);
    t.equal(await v.deleteMute('m1'), true);
    t.equal(await v.deleteMute('m1'), false);
  });

  t.test('filter terms: vuln:<id>, vuln.kev, vuln.severity, vuln.count, in SQL as in memory, mutes honoured', async (t) => {
    const { store } = await setup(t, backend);
    const v = store.vulns;
    for (const id of ['n1', 'n2', 'n3']) await store.upsertFromInventory(inventory(id));
    await v.putAdvisories([
      { id: 'DSA-1', modified: '2024-05-01T00:00:00Z', withdrawn: null, summary: null, rating: 'high', cves: ['CVE-2024-3094'], doc: {} },
      { id: 'DSA-2', modified: '2024-05-01T00:00:00Z', withdrawn: null, summary: null, rating: 'low', cves: ['CVE-2024-2'], doc: {} },
      { id: 'DSA-3', modified: '2024-05-01T00:00:00Z', withdrawn: null, summary: null, rating: 'critical', cves: ['CVE-2024-3'], doc: {} },
    ]);
    await v.replaceEnrichment([{ cve: 'CVE-2024-3094', date_added: '2024-04-01', due_date: null, ransomware: null }], null);
    const f = (node: string, advisory: string, rating: string) => ({ ...finding(node, advisory), rating });
    await v.replaceNodeFindings('n1', [f('n1', 'DSA-1', 'high'), f('n1', 'DSA-2', 'low')], []);
    await v.replaceNodeFindings('n2', [f('n2', 'DSA-2', 'low'), f('n2', 'DSA-3', 'critical')], []);
    // DSA-3 muted everywhere (in force), DSA-1 by a mute that has expired.
    await v.insertMute({ id: 'm1', target: 'CVE-2024-3', groups: null, reason: 'accepted', expires: null, created_at: '2024-05-01T00:00:00Z', created_by: 'a' });
    await v.insertMute({ id: 'm2', target: 'DSA-1', groups: null, reason: 'old', expires: '2024-01-01T00:00:00.000Z', created_at: '2023-05-01T00:00:00Z', created_by: 'a' });
    const unmuted: Record<string, FilterSubject['vulns']> = {
      n1: [{ advisory: 'DSA-1', cves: ['CVE-2024-3094'], rating: 'high', kev: true }, { advisory: 'DSA-2', cves: ['CVE-2024-2'], rating: 'low', kev: false }],
      n2: [{ advisory: 'DSA-2', cves: ['CVE-2024-2'], rating: 'low', kev: false }],
      n3: [],
    };
    const cases: Array<[string, string[]]> = [
      ['vuln:CVE-2024-3094', ['n1']], ['vuln:DSA-2', ['n1', 'n2']], ['vuln:CVE-2024-3', []], ['not vuln:DSA-1', ['n2', 'n3']],
      ['vuln.kev = true', ['n1']], ['vuln.kev = false', ['n2', 'n3']], ['vuln.kev != true', ['n2', 'n3']],
      ['vuln.severity >= high', ['n1']], ['vuln.severity = low', ['n1', 'n2']], ['vuln.severity >= critical', []],
      ['vuln.count > 1', ['n1']], ['vuln.count = 0', ['n3']], ['vuln.count < 2 and vuln:CVE-2024-2', ['n2']],
    ];
    const now = new Date();
    for (const [expr, want] of cases) {
      t.same((await store.listNodeIds([{ key: 'q', values: [expr] }])).sort(), want, `${expr} (SQL)`);
      const memory = ['n1', 'n2', 'n3'].filter((id) => evaluateFilter(parseFilter(expr), { ...subjectOf(id), vulns: unmuted[id]! }, now));
      t.same(memory, want, `${expr} (in memory)`);
    }
    t.throws(() => parseFilter('vuln:CVE-1 = 2'), { code: 'ERR_FILTER_SYNTAX' });
    t.throws(() => parseFilter('vuln.severity >= dire'), { code: 'ERR_FILTER_SYNTAX' });
    t.throws(() => parseFilter('vuln.kev > true'), { code: 'ERR_FILTER_SYNTAX' });
  });

  t.test('the service: a feed imported, a node matched, fixed by a new inventory, a withdrawn entry, a mute', async (t) => {
    const { store } = await setup(t, backend);
    const dir = await mkdtemp(join(tmpdir(), 'capstan-vulns-'));
    t.teardown(() => rm(dir, { recursive: true, force: true }));
    const feedDir = join(dir, 'osv');
    await mkdir(feedDir);
    await writeFile(join(feedDir, 'DSA-5532-1.json'), JSON.stringify(osvEntry('DSA-5532-1')));
    await writeFile(join(feedDir, 'DSA-9-1.json'), JSON.stringify(osvEntry('DSA-9-1', { name: 'bash', cve: 'CVE-2024-9', fixed: '5.2.15-2+b3' })));
    const settings = vulnSettings({
      feeds: [`debian=${feedDir}`], checksums: [], kev: '', epss: '', interval: 0, stale_after: 3 * 86_400_000, max_download_size: 1e6, fetch_timeout: 5000,
      max_entry_size: 1e6, max_feed_size: 1e8, max_entries: 1000, rematch_all_above: 2000,
    });
    let now = new Date('2024-05-01T12:00:00Z');
    const service = new VulnService({ store, log: silentLogger, settings, dataDir: dir, now: () => now });
    const deps = { store, groupMembers: filterGroupMembers(store), now: () => now };
    const vulnerable = [{ name: 'libssl3', version: '3.0.11-1~deb12u1', source: 'openssl' }, { name: 'bash', version: '5.2.15-2+b7' }];
    await accepted(store, 'n1', vulnerable);
    await accepted(store, 'n2', [{ name: 'openssl', version: '3.0.11-1~deb12u2' }]);
    t.equal(await service.matchNode('n1'), 0, 'nothing to match before any feed');
    await service.matchNode('n2');

    let summary = await service.refresh();
    t.match(summary, { changed: 2, withdrawn: 0 });
    t.match(summary.feeds, [{ name: 'debian', kind: 'osv', error: null, report: { accepted: 2 } }]);
    t.match(await nodeView(deps, 'n1'), { counts: { total: 1 } }, 'the import found n1 by the names kept at its first match');
    t.equal(await service.matchNode('n1'), 1, 'libssl3 from openssl matches through its source; bash is past the fix');
    const view = await nodeView(deps, 'n1');
    t.match(view.findings, [{ advisory: 'DSA-5532-1', cves: ['CVE-2023-5363'], package: 'libssl3', rating: 'high', fixed: '3.0.11-1~deb12u2', muted: null,
      match: { via: 'source', compared: '3.0.11-1~deb12u1', range: { introduced: '0', fixed: '3.0.11-1~deb12u2' } } }]);
    t.match(await showView(deps, 'CVE-2023-5363'), { advisories: [{ id: 'DSA-5532-1' }], nodes: 1, findings: [{ node_id: 'n1', package: 'libssl3' }] });
    t.match(await listView(deps, {}), [{ id: 'DSA-5532-1', nodes: 1, rating: 'high' }]);
    t.same(await listView(deps, { severity: 'critical' }), []);
    t.match(await fixesView(deps), [{ name: 'openssl', fixed: '3.0.11-1~deb12u2', nodes: ['n1'], packages: ['libssl3'] }]);
    t.match(await fixPlan(deps, 'CVE-2023-5363'), { advisories: ['DSA-5532-1'], nodes: ['n1'], packages: [{ name: 'openssl', fixed: '3.0.11-1~deb12u2' }] });

    // A mute in a group n1 is in: kept, marked, not counted.
    await updateNode(store, 'n1', { groups: ['dmz'] }, now.toISOString());
    await store.vulns.insertMute({ id: 'm1', target: 'CVE-2023-5363', groups: ['dmz'], reason: 'no TLS listener', expires: null, created_at: now.toISOString(), created_by: 'alice' });
    t.match(await nodeView(deps, 'n1'), { counts: { total: 0, muted: 1 }, findings: [{ muted: { mute: 'm1', reason: 'no TLS listener' } }] });
    t.match(await listView(deps, {}), [{ id: 'DSA-5532-1', nodes: 0, muted_nodes: 1 }]);
    await store.vulns.deleteMute('m1');

    // The feed changes the fix: only newer entries count; n1 stays affected under the new bound.
    now = new Date('2024-05-02T12:00:00Z');
    await writeFile(join(feedDir, 'DSA-5532-1.json'), JSON.stringify(osvEntry('DSA-5532-1', { modified: '2024-05-02T00:00:00Z', fixed: '3.0.11-1~deb12u3' })));
    summary = await service.refresh();
    t.match(summary, { changed: 1, nodes: 2 }, 'the nodes holding openssl were looked at');
    t.match((await nodeView(deps, 'n2')).findings, [{ advisory: 'DSA-5532-1', package: 'openssl' }], 'n2 is now under the bound');
    t.match((await nodeView(deps, 'n1')).findings, [{ fixed: '3.0.11-1~deb12u3' }]);
    t.match(await service.refresh(), { changed: 0 }, 'an unchanged feed changes nothing');

    // A fixed version in a new inventory closes n1's finding.
    await accepted(store, 'n1', [{ name: 'libssl3', version: '3.0.11-1~deb12u3', source: 'openssl' }]);
    t.equal(await service.matchNode('n1'), 0);

    // A withdrawn entry removes what it found.
    await writeFile(join(feedDir, 'DSA-5532-1.json'), JSON.stringify(osvEntry('DSA-5532-1', { modified: '2024-05-03T00:00:00Z', withdrawn: '2024-05-03T00:00:00Z' })));
    const day3 = new Date('2024-05-03T00:00:00Z');
    await utimes(feedDir, day3, day3);
    t.match(await service.refresh(), { changed: 1, withdrawn: 1 });
    t.same((await nodeView(deps, 'n2')).findings, []);
    t.equal(service.index.size, 1, 'the withdrawn advisory left the index');

    // A second service on the same store loads the index from it.
    const again = new VulnService({ store, log: silentLogger, settings, dataDir: dir, now: () => now });
    await again.load();
    t.equal(again.index.size, 1);
    t.match((await again.feedStatus())[0], { name: 'debian', stale: false });
    now = new Date('2024-06-01T00:00:00Z');
    t.match((await again.feedStatus())[0], { stale: true }, 'older than stale_after');
  });
}

function subjectOf(id: string): FilterSubject {
  return {
    id, hostname: `${id}.example.com`, fqdn: null, os_name: 'debian', os_version: '12', os_kernel: null, arch: null, cpus: null, memory: null, addresses: [],
    packages: {}, facts: {}, properties: {}, tags: {}, state: 'running', status: 'reachable', manager: '', accepted: 'pending', groups: [], last_run_at: null, last_inventory_at: null,
  };
}
