/**
 * The `vuln:` filter terms honour mutes limited to groups as the views do: on SQLite and on
 * PostgreSQL, each expression's nodes in SQL are the nodes evaluateFilter() keeps in memory over
 * the views' own unmuted findings (subjectVulns), and the list view counts the same nodes. The
 * groups are registry groups, a static policy group and a policy group defined by exposure (its
 * own filter sees fleet-wide mutes only); one mute has expired.
 */
import t, { type Test } from 'tap';
import { evaluateFilter, parseFilter, type FilterSubject } from '@capstan/shared';
import type { Store } from '@capstan/server/store/index';
import { filterGroupMembers, findingPairs, listView, nodeView, subjectVulns } from '@capstan/server/vulns/views';
import { inventory, setup, type Backend } from './store-suite.js';
import { setAcceptance, updateNode } from '../helpers/node-changes.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { pgUnavailable } from './pg.js';

const AT = '2024-05-01T10:00:00.000Z';
const NODES = ['n1', 'n2', 'n3', 'n4', 'n5'];
const GROUPS = ['dmz', 'web', 'edge', 'exposed'];

const advisory = (id: string, rating: string, cve: string) => ({ id, modified: AT, withdrawn: null, summary: null, rating, cves: [cve], doc: {} });
const ADVISORIES = [advisory('DSA-1', 'high', 'CVE-2024-3094'), advisory('DSA-2', 'low', 'CVE-2024-2'), advisory('DSA-3', 'critical', 'CVE-2024-3')];

function finding(node_id: string, id: string) {
  const a = ADVISORIES.find((x) => x.id === id)!;
  return {
    node_id, advisory: id, package: 'libssl3', version: '1', rating: a.rating, fixed: '2',
    match: { advisory: id, cves: a.cves, name: 'openssl', ecosystem: 'Debian:12', fixed: '2' }, found_at: AT,
  };
}

const mute = (id: string, target: string, groups: string[] | null, expires: string | null = null) => ({ id, target, groups, reason: 'test', expires, created_at: AT, created_by: 'a' });

async function fleet(store: Store): Promise<void> {
  for (const id of NODES) {
    await store.upsertFromInventory(inventory(id));
    await setAcceptance(store, id, 'accepted', AT);
  }
  await updateNode(store, 'n1', { groups: ['dmz'] }, AT);
  await updateNode(store, 'n2', { groups: ['dmz', 'web'] }, AT);
  await updateNode(store, 'n3', { groups: ['web'] }, AT);
  await store.putPolicyObject('group', 'edge', { id: 'edge', name: 'edge', nodes: ['n4'] }, AT);
  // A group defined by exposure: its own filter counts findings muted only in groups.
  await store.putPolicyObject('group', 'exposed', { id: 'exposed', name: 'exposed', filter: [{ key: 'q', values: ['vuln.severity >= critical'] }] }, AT);
  const v = store.vulns;
  await v.putAdvisories(ADVISORIES);
  await v.replaceEnrichment([{ cve: 'CVE-2024-3094', date_added: '2024-04-01', due_date: null, ransomware: null }], null);
  const held: Record<string, string[]> = { n1: ['DSA-1', 'DSA-2'], n2: ['DSA-1', 'DSA-3'], n3: ['DSA-1', 'DSA-2', 'DSA-3'], n4: ['DSA-3'], n5: ['DSA-2'] };
  for (const [node, ids] of Object.entries(held)) await v.replaceNodeFindings(node, ids.map((id) => finding(node, id)), []);
  await v.insertMute(mute('g1', 'CVE-2024-3094', ['dmz'])); // DSA-1 on n1, n2
  await v.insertMute(mute('g2', 'DSA-3', ['web', 'edge'])); // DSA-3 on n2, n3, n4
  await v.insertMute(mute('g3', 'CVE-2024-2', ['exposed'])); // DSA-2 on n3 (exposed: n2, n3, n4)
  await v.insertMute(mute('g4', 'DSA-1', ['web'], '2024-01-01T00:00:00.000Z')); // expired: n3 keeps DSA-1
}

function subject(id: string, groups: string[], vulns: FilterSubject['vulns']): FilterSubject {
  return {
    id, hostname: `${id}.example.com`, fqdn: null, os_name: 'debian', os_version: '12', os_kernel: null, arch: null, cpus: null, memory: null, addresses: [],
    packages: {}, facts: {}, properties: {}, tags: {}, state: 'running', status: 'reachable', manager: '', accepted: 'accepted', groups, last_run_at: null, last_inventory_at: null, ...(vulns && { vulns }),
  };
}

function suite(t: Test, backend: Backend): void {
  t.test('SQL and in-memory evaluation agree, group-limited mutes honoured', async (t) => {
    const { store } = await setup(t, backend);
    await fleet(store);
    const now = new Date();
    const deps = { store, groupMembers: filterGroupMembers(store), now: () => now };
    const members = new Map<string, string[]>();
    for (const g of GROUPS) members.set(g, (await deps.groupMembers(g)) ?? []);
    t.same(Object.fromEntries(members), { dmz: ['n1', 'n2'], web: ['n2', 'n3'], edge: ['n4'], exposed: ['n2', 'n3', 'n4'] }, 'the groups as the filter counts them');
    const vulns = await subjectVulns(deps, NODES);
    t.same(Object.fromEntries([...vulns].map(([id, list]) => [id, list.map((x) => x.advisory)])), { n1: ['DSA-2'], n2: [], n3: ['DSA-1'], n4: [], n5: ['DSA-2'] }, 'what the views leave unmuted');
    const subjects = NODES.map((id) => subject(id, GROUPS.filter((g) => members.get(g)!.includes(id)), vulns.get(id)));
    const cases: Array<[string, string[]]> = [
      ['vuln:CVE-2024-3094', ['n3']], ['vuln:DSA-1', ['n3']], ['not vuln:DSA-1', ['n1', 'n2', 'n4', 'n5']], ['vuln:CVE-2024-2', ['n1', 'n5']], ['vuln:DSA-3', []],
      ['vuln.kev = true', ['n3']], ['vuln.kev = false', ['n1', 'n2', 'n4', 'n5']], ['vuln.kev != true', ['n1', 'n2', 'n4', 'n5']],
      ['vuln.severity >= high', ['n3']], ['vuln.severity = low', ['n1', 'n5']], ['vuln.severity >= critical', []], ['vuln.severity < critical', ['n1', 'n3', 'n5']],
      ['vuln.count = 0', ['n2', 'n4']], ['vuln.count >= 1', ['n1', 'n3', 'n5']], ['vuln.count > 1', []],
      ['group = exposed', ['n2', 'n3', 'n4']], ['group = dmz and vuln:DSA-2', ['n1']], ['group = web or vuln.kev = true', ['n2', 'n3']],
      ['(vuln:DSA-2 or vuln:DSA-1) and not group = dmz', ['n3', 'n5']],
    ];
    for (const [expr, want] of cases) {
      t.same((await store.listNodeIds([{ key: 'q', values: [expr] }])).sort(), want, `${expr} (SQL)`);
      t.same(subjects.filter((s) => evaluateFilter(parseFilter(expr), s, now)).map((s) => s.id), want, `${expr} (in memory)`);
    }
    // Filters over the listed nodes (pages and counts) read the same condition.
    const page = await store.listNodes({ filters: [{ key: 'q', values: ['vuln:CVE-2024-2'] }], sort: 'id', page: 1, per_page: 10 });
    t.same([page.total, page.data.map((n) => n.id)], [2, ['n1', 'n5']]);

    // The views count the same nodes: the list's aggregate (in the database) as the pairs read one by one.
    const counts = async (q: Parameters<typeof listView>[1]) => Object.fromEntries((await listView(deps, q)).map((r) => [r.id, [r.nodes, r.muted_nodes, r.rating]]));
    t.same(await counts({}), { 'DSA-1': [1, 2, 'high'], 'DSA-2': [2, 1, 'low'], 'DSA-3': [0, 3, 'critical'] });
    const byPairs: Record<string, [number, number, string | null]> = {};
    for (const p of await findingPairs(deps)) {
      const row = (byPairs[p.advisory] ??= [0, 0, p.rating]);
      row[p.muted ? 1 : 0]++;
    }
    t.same(await counts({}), byPairs, 'the aggregate agrees with the findings read one by one');
    t.same(await counts({ filters: [{ key: 'q', values: ['group = web'] }] }), { 'DSA-1': [1, 1, 'high'], 'DSA-2': [0, 1, 'low'], 'DSA-3': [0, 2, 'critical'] }, 'over the nodes a filter selects');
    t.same(await counts({ muted: true }), { 'DSA-1': [3, 0, 'high'], 'DSA-2': [3, 0, 'low'], 'DSA-3': [3, 0, 'critical'] }, 'muted ones counted too');
    t.same(await counts({ filters: [{ key: 'q', values: ['vuln.kev = true'] }] }), { 'DSA-1': [1, 0, 'high'], 'DSA-2': [0, 1, 'low'], 'DSA-3': [0, 1, 'critical'] },
      'a filter with vulnerability terms of its own (n3): its muted findings listed as muted');
    t.same((await listView(deps, { kev: true })).map((r) => r.id), ['DSA-1']);
    t.match((await nodeView(deps, 'n3')).counts, { total: 1, muted: 2 });

    // Once the mute of the dmz group is removed, n1 and n2 count DSA-1 again, in SQL and in the views.
    await store.vulns.deleteMute('g1');
    t.same((await store.listNodeIds([{ key: 'q', values: ['vuln:CVE-2024-3094'] }])).sort(), ['n1', 'n2', 'n3']);
    t.same((await subjectVulns(deps, ['n1'])).get('n1')!.map((x) => x.advisory), ['DSA-1', 'DSA-2']);
  });
}

t.test('SQLite', async (t) => suite(t, sqliteBackend));
const why = await pgUnavailable();
t.test('PostgreSQL', { skip: why ?? false }, async (t) => suite(t, postgresBackend('capstan_vuln_mutes')));
