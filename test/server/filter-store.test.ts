/**
 * The filter language compiled to SQL, on SQLite and PostgreSQL: table-driven cases over a fixed
 * fleet (version order, CIDR, packages, facts, properties, ages, escaping), then a property: over
 * random fleets and random expressions, the nodes the store selects are exactly those
 * evaluateFilter() selects in memory. Literals are drawn with quotes, backslashes and the LIKE
 * wildcards in them, so an escaping mistake shows up as a disagreement.
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import fc from 'fast-check';
import { evaluateFilter, indexedFacts, type FilterSubject } from '@capstan/shared';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { PG_URL, pgAdmin, pgUnavailable } from './pg.js';
import { inventory } from './store-suite.js';

const NOW = new Date('2026-06-01T12:00:00.000Z');

interface NodeSpec {
  id: string;
  hostname: string;
  os: { name: string; version: string; kernel: string; arch: string };
  cpus: number;
  memory: number;
  addresses: string[];
  packages: Array<{ name: string; version: string }>;
  facts: Record<string, unknown>;
  tags: Record<string, string>;
  properties: Record<string, JsonValue>;
  groups: string[];
  receivedAt: string;
}

/** The inventory document a node sends. */
const docOf = (n: NodeSpec) => ({
  node_id: n.id, hostname: n.hostname, fqdn: `${n.hostname}.example.com`, os: n.os, cpus: { count: n.cpus, model: 'x' },
  memory: { total: n.memory }, packages: n.packages, facts: n.facts, disks: [{ device: '/dev/sda1', mount: '/', size: n.memory * 8 }],
  interfaces: [{ name: 'eth0', addresses: n.addresses.map((address) => ({ family: address.includes(':') ? 'IPv6' : 'IPv4', address })) }],
});

async function addFleet(store: Store, fleet: NodeSpec[]): Promise<void> {
  for (const n of fleet) {
    const doc = docOf(n);
    await store.upsertFromInventory(inventory(n.id, { hostname: n.hostname, os_name: n.os.name, os_version: n.os.version, inventory: doc, received_at: n.receivedAt }));
    if (Object.keys(n.tags).length || n.groups.length) await updateNode(store, n.id, { tags: n.tags, groups: n.groups }, n.receivedAt);
    await store.setProperties(n.id, n.properties);
  }
}

async function subjects(store: Store, fleet: NodeSpec[]): Promise<FilterSubject[]> {
  const out: FilterSubject[] = [];
  for (const n of fleet) {
    const row = (await store.getNode(n.id))!;
    const packages: Record<string, string[]> = {};
    for (const p of n.packages) (packages[p.name] ??= []).push(p.version);
    out.push({
      id: n.id, hostname: n.hostname, fqdn: `${n.hostname}.example.com`, os_name: n.os.name, os_version: n.os.version,
      os_kernel: n.os.kernel, arch: n.os.arch, cpus: n.cpus, memory: n.memory, addresses: n.addresses, packages,
      facts: Object.fromEntries(indexedFacts(docOf(n))), properties: n.properties, tags: n.tags,
      state: row.state, status: row.status, manager: row.manager, accepted: row.accepted, groups: n.groups,
      last_run_at: row.last_run_at, last_inventory_at: row.last_inventory_at,
    });
  }
  return out;
}

const select = async (store: Store, q: string) => (await store.listNodeIds([{ key: 'q', values: [q] }])).sort();

const FIXED: NodeSpec[] = [
  {
    id: 'web-1', hostname: 'web-1', os: { name: 'debian', version: '12.5', kernel: '6.1.0-18-amd64', arch: 'x86_64' }, cpus: 4, memory: 8 * 1024 ** 3,
    addresses: ['10.1.2.3', 'fe80::1'], packages: [{ name: 'openssl', version: '3.0.11-1~deb12u2' }, { name: 'nginx', version: '1.22.1-9' }],
    facts: { role: 'web', rack: { row: 3 }, 'odd%_key': "it's \"q\"" }, tags: { env: 'prod' }, properties: { owner: 'alice' }, groups: ['g1'],
    receivedAt: '2026-06-01T11:30:00.000Z',
  },
  {
    id: 'web_2', hostname: 'WEB_2', os: { name: 'debian', version: '11', kernel: '5.10.0', arch: 'x86_64' }, cpus: 2, memory: 2 * 1024 ** 3,
    addresses: ['10.1.9.9'], packages: [{ name: 'openssl', version: '1.1.1w-0+deb11u1' }],
    facts: { role: 'web%' }, tags: { env: 'dev' }, properties: {}, groups: [],
    receivedAt: '2026-05-30T12:00:00.000Z',
  },
  {
    id: 'db-1', hostname: 'db-1', os: { name: 'rocky', version: '9.3', kernel: '5.14.0', arch: 'aarch64' }, cpus: 16, memory: 64 * 1024 ** 3,
    addresses: ['192.168.0.10', '2001:db8::10'], packages: [{ name: 'openssl', version: '1:3.0.7-25.el9' }, { name: 'postgresql', version: '15.6-1' }],
    facts: { role: 'db', disks: [{ size: 100 }, { size: 2000 }] }, tags: {}, properties: { owner: "o'brien\\x" }, groups: ['g1', 'g%'],
    receivedAt: '2026-06-01T06:00:00.000Z',
  },
];

const TABLE: Array<[string, string[]]> = [
  ['os.name = debian', ['web-1', 'web_2']],
  ['os.name = debian and os.version >= 12', ['web-1']],
  ['os.version > 9.10', ['web-1', 'web_2']],
  ['package:openssl < 3.0.11', ['web_2']],
  ['package:openssl < 2:0', ['db-1', 'web-1', 'web_2']],
  ['package:openssl >= 3.0.11~', ['db-1', 'web-1']],
  ['package:openssl < 3.0.11-1', ['web-1', 'web_2']],
  ['package:nginx', ['web-1']],
  ['not package:nginx', ['db-1', 'web_2']],
  ['os.name = debian and os.version >= 12 and package:openssl < 3.0.12 and not tag:env = dev', ['web-1']],
  ['hostname = web*', ['web-1', 'web_2']],
  ['hostname = web_?', ['web_2']],
  ['hostname = "web_2"', ['web_2']],
  ['hostname = "web%"', []],
  ['fqdn = *.example.com and cpus >= 4', ['db-1', 'web-1']],
  ['memory >= 8GiB', ['db-1', 'web-1']],
  ['memory < 4GB', ['web_2']],
  ['ip in 10.1.0.0/16', ['web-1', 'web_2']],
  ['ip = 10.1.2.3', ['web-1']],
  ['ip in 2001:db8::/32', ['db-1']],
  ['ip != 10.0.0.0/8', ['db-1']],
  ['arch = aarch64 or os.kernel = 5.10.0', ['db-1', 'web_2']],
  ['fact:role = web', ['web-1']],
  ['fact:role = "web%"', ['web_2']],
  ['fact:rack.row >= 3', ['web-1']],
  ['fact:rack', ['web-1']],
  // Facts read the node data (shared/src/policy/data.ts): the inventory, custom facts hoisted.
  ['fact:disks.0.size >= 137438953472', ['db-1']],
  ['fact:disks.1.size > 1000', []],
  ['fact:facts.disks.1.size > 1000', ['db-1']],
  ['fact:os.name = rocky', ['db-1']],
  ['fact:facts.role = web', ['web-1']],
  ['fact:interfaces.0.addresses.0.address = 10.1.2.3', ['web-1']],
  ['fact:packages', []],
  ['fact:"odd%_key" = "it\'s \\"q\\""', ['web-1']],
  ['property:owner = alice', ['web-1']],
  ['property:owner = "o\'brien\\\\x"', ['db-1']],
  ['property:owner', ['db-1', 'web-1']],
  ['tag:env', ['web-1', 'web_2']],
  ['tag:env != prod', ['web_2']],
  ['group = g1 and not group = "g%"', ['web-1']],
  ['last_inventory.age < 1h', ['web-1']],
  ['last_inventory.age > 1d', ['web_2']],
  ['not last_run.age < 1h', ['db-1', 'web-1', 'web_2']],
  ['id = web_2 or (id = db-1 and status = reachable)', ['db-1', 'web_2']],
  ['status = unknown', []],
  ['accepted = pending and manager = agent', ['db-1', 'web-1', 'web_2']],
];

async function backends(t: Test): Promise<Array<[string, () => Promise<Store>]>> {
  const dir = programDir(t);
  let n = 0;
  const list: Array<[string, () => Promise<Store>]> = [['sqlite', () => openRegistry({ sqlitePath: join(dir, `f${n++}.db`), now: () => NOW })]];
  const why = await pgUnavailable();
  if (why) {
    t.comment(`PostgreSQL part skipped: ${why}`);
  } else {
    list.push(['postgres', async () => {
      const schema = `capstan_filter_${randomBytes(6).toString('hex')}`;
      t.teardown(() => pgAdmin((c) => c.query(`DROP SCHEMA IF EXISTS ${schema} CASCADE`)));
      return openRegistry({ databaseUrl: PG_URL, schema, poolSize: 2, now: () => NOW });
    }]);
  }
  return list;
}

t.test('filter expressions select the same nodes on both stores', async (t) => {
  for (const [name, open] of await backends(t)) {
    const store = await open();
    t.teardown(() => store.close());
    await addFleet(store, FIXED);
    const subs = await subjects(store, FIXED);
    for (const [q, want] of TABLE) {
      t.same(await select(store, q), want, `${name}: ${q}`);
      t.same(subs.filter((s) => evaluateFilter(parseQ(q), s, NOW)).map((s) => s.id).sort(), want, `memory: ${q}`);
    }
    // The list endpoint's spelling, with paging and the other filters ANDed.
    const page = await store.listNodes({ filters: [{ key: 'q', values: ['os.name = debian'] }, { key: 'tag:env', values: ['prod'] }], page: 1, per_page: 10 });
    t.same(page.data.map((n) => n.id), ['web-1'], `${name}: q with a tag filter`);
    const excluded = await store.listNodeIds([{ key: 'q', values: ['os.name = debian'], exclude: true }]);
    t.same(excluded, ['db-1'], `${name}: an excluded expression`);
    await t.rejects(store.listNodeIds([{ key: 'q', values: ['os.name ='] }]), { code: 'ERR_FILTER_SYNTAX', details: { position: 9 } });
    // The fleet's software: versions of the matching packages with their node counts.
    t.same((await store.listSoftware('open*', 1, 10)).data, [
      { name: 'openssl', version: '1.1.1w-0+deb11u1', nodes: 1 }, { name: 'openssl', version: '3.0.11-1~deb12u2', nodes: 1 },
      { name: 'openssl', version: '1:3.0.7-25.el9', nodes: 1 },
    ], `${name}: software by name, in version order`);
    t.same(await store.listSoftware('[x]*', 1, 10), { data: [], total: 0 }, `${name}: a glob's brackets are literal`);
    // A manual node with an address some node has: refused, naming that node; a new one is queryable.
    await t.rejects(store.createNode({ id: 'm1', hostname: '10.1.2.3', address: '10.1.2.3', certificate: null, certificate_fingerprint: null }),
      { code: 'ERR_ADDRESS_TAKEN', details: { node: 'web-1' } }, `${name}: an inventory's address`);
    await store.createNode({ id: 'm2', hostname: '10.9.9.9', address: '10.9.9.9', certificate: null, certificate_fingerprint: null });
    await t.rejects(store.createNode({ id: 'm3', hostname: '10.9.9.9', address: '10.9.9.9', certificate: null, certificate_fingerprint: null }),
      { code: 'ERR_ADDRESS_TAKEN', details: { node: 'm2' } }, `${name}: a manual node's address`);
    t.same(await select(store, 'ip = 10.9.9.9'), ['m2'], `${name}: a manual node's address is queryable`);
    await store.deleteNode('m2');
    t.same(await store.setProperties('nope', { a: 'b' }), null, `${name}: properties of an unknown node`);
    await t.rejects(store.setProperties('web-1', { a: 'x'.repeat(5000) }), { code: 'ERR_BAD_REQUEST', details: { field: 'properties.a' } }, `${name}: a string over the limit`);
    await t.rejects(store.setProperties('web-1', { a: JSON.parse('['.repeat(17) + ']'.repeat(17)) as JsonValue }), { code: 'ERR_BAD_REQUEST', details: { field: 'properties.a' } }, `${name}: nested too deep`);
    await t.rejects(store.setProperties('web-1', { a: Array.from({ length: 1001 }, (_, i) => i) }), { code: 'ERR_BAD_REQUEST' }, `${name}: too many leaves`);
    // JSON values: kept as they are, and their leaves filtered on by path.
    const json = { site: { room: 'R1', racks: [3, 4], empty: {} }, weight: 2.5, on: true, none: null, owner: 'alice' };
    t.same(await store.setProperties('web-1', json), json, `${name}: JSON values set`);
    t.same(await store.getProperties('web-1'), json, `${name}: JSON values read back`);
    for (const [q, want] of [
      ['property:site.room = R1', ['web-1']], ['property:site.racks.1 = 4', ['web-1']], ['property:site.racks.0 >= 3', ['web-1']],
      ['property:site.racks', ['web-1']], ['property:site.empty = "{}"', ['web-1']], ['property:weight > 2', ['web-1']], ['property:weight = 2.5', ['web-1']],
      ['property:on = true', ['web-1']], ['property:none = null', ['web-1']], ['property:site = R1', []], ['property:site.room != R2', ['web-1']],
      ['property:owner = alice', ['web-1']], ['property:site.nothing', []],
    ] as const) t.same(await select(store, q), want, `${name}: ${q}`);
    // A newer inventory replaces what is queryable: packages removed and upgraded, facts changed.
    const moved = { ...FIXED[0]!, packages: [{ name: 'openssl', version: '3.0.13-1~deb12u1' }], facts: { role: 'cache' }, receivedAt: '2026-06-01T11:40:00.000Z' };
    await addFleet(store, [moved]);
    t.same(await select(store, 'package:nginx'), [], `${name}: a removed package`);
    t.same(await select(store, 'package:openssl > 3.0.12 and package:openssl < 1:0'), ['web-1'], `${name}: an upgraded package`);
    t.same(await select(store, 'fact:role = cache'), ['web-1'], `${name}: a changed fact`);
    // What changed between the two inventories, newest first; kept as long as changes.
    const moved2 = { ...moved, addresses: ['10.1.2.4', 'fe80::1'], os: { ...moved.os, kernel: '6.1.0-20-amd64' }, receivedAt: '2026-06-01T11:50:00.000Z' };
    await addFleet(store, [moved2]);
    t.same((await store.inventoryHistory('web-1', 1, 10)).data.map((c) => [c.at, c.kind, c.name, c.from, c.to]), [
      ['2026-06-01T11:50:00.000Z', 'kernel', 'kernel', '6.1.0-18-amd64', '6.1.0-20-amd64'],
      ['2026-06-01T11:50:00.000Z', 'address_added', '10.1.2.4', null, '10.1.2.4'],
      ['2026-06-01T11:50:00.000Z', 'address_removed', '10.1.2.3', '10.1.2.3', null],
      ['2026-06-01T11:40:00.000Z', 'package_upgraded', 'openssl', '3.0.11-1~deb12u2', '3.0.13-1~deb12u1'],
      ['2026-06-01T11:40:00.000Z', 'package_removed', 'nginx', '1.22.1-9', null],
    ], `${name}: inventory history`);
    await store.deleteChangesBefore('2026-06-01T11:45:00Z', 100);
    t.equal((await store.inventoryHistory('web-1', 1, 10)).total, 3, `${name}: older inventory changes expire with changes`);
    await store.deleteNode('web-1');
    t.same(await select(store, 'package:openssl'), ['db-1', 'web_2'], `${name}: a deleted node's packages are gone`);
  }
});

import { parseFilter } from '@capstan/shared';
import { programDir } from '../helpers/programs.js';
import { updateNode } from '../helpers/node-changes.js';
const parseQ = (q: string) => parseFilter(q);
import type { JsonValue } from '@capstan/shared/filter/properties';

// Random fleets drawn from small domains, so that expressions often hit.
const WORDS = ['a', 'b', "o'k", 'x"y', 'p%q', 'u_v', 'back\\slash', 'st*r', 'q?'];
const VERSIONS = ['1.0', '1.0~rc1', '1.0-1', '1:0.9', '2.10', '2.9', '3.0.11-1~deb12u2', '3.0.11'];
const PACKAGES = ['openssl', 'nginx', 'libc6'];
const quote = (s: string) => `"${s.replace(/[\\"]/g, (c) => `\\${c}`)}"`;

const nodeArb = (i: number): fc.Arbitrary<NodeSpec> => fc.record({
  hostname: fc.constantFrom('web-1', 'Web-2', 'db_1', 'db%1', 'cache'),
  osName: fc.constantFrom('debian', 'rocky'),
  osVersion: fc.constantFrom(...VERSIONS),
  arch: fc.constantFrom('x86_64', 'aarch64'),
  cpus: fc.integer({ min: 1, max: 8 }),
  memoryGiB: fc.integer({ min: 1, max: 16 }),
  addresses: fc.uniqueArray(fc.constantFrom('10.0.0.1', '10.0.1.5', '192.168.1.1', '2001:db8::5', 'fe80::2'), { maxLength: 3 }),
  packages: fc.uniqueArray(fc.tuple(fc.constantFrom(...PACKAGES), fc.constantFrom(...VERSIONS)), { maxLength: 4, selector: ([n, v]) => `${n}=${v}` }),
  role: fc.option(fc.constantFrom(...WORDS)),
  level: fc.option(fc.integer({ min: -3, max: 3 })),
  tag: fc.option(fc.constantFrom(...WORDS)),
  prop: fc.option(fc.oneof(
    fc.constantFrom<JsonValue>(...WORDS, 3, -1, 2.5, true, false, null, {}, [], '3'),
    fc.record({ room: fc.constantFrom(...WORDS), n: fc.integer({ min: -3, max: 3 }) }),
    fc.array(fc.oneof(fc.constantFrom(...WORDS), fc.integer({ min: -3, max: 3 })), { maxLength: 3 }),
  )),
  group: fc.option(fc.constantFrom('g1', 'g%')),
  ageMin: fc.integer({ min: 1, max: 3000 }),
}).map((r) => ({
  id: `n${i}`, hostname: r.hostname, os: { name: r.osName, version: r.osVersion, kernel: '6.1', arch: r.arch },
  cpus: r.cpus, memory: r.memoryGiB * 1024 ** 3, addresses: r.addresses,
  packages: r.packages.map(([name, version]) => ({ name, version })),
  facts: { ...(r.role !== null && { role: r.role }), ...(r.level !== null && { deep: { level: r.level } }) },
  tags: (r.tag !== null ? { env: r.tag } : {}) as Record<string, string>, properties: (r.prop !== null ? { owner: r.prop } : {}) as Record<string, JsonValue>, groups: r.group !== null ? [r.group] : [],
  receivedAt: new Date(NOW.getTime() - r.ageMin * 60_000).toISOString(),
}));

const op = fc.constantFrom('=', '!=', '<', '<=', '>', '>=');
const eq = fc.constantFrom('=', '!=');
const atomArb: fc.Arbitrary<string> = fc.oneof(
  fc.tuple(eq, fc.constantFrom('web*', 'W?b-*', 'db_1', 'db%1', '*', 'cache')).map(([o, v]) => `hostname ${o} ${quote(v)}`),
  fc.tuple(eq, fc.constantFrom('debian', 'rocky')).map(([o, v]) => `os.name ${o} ${v}`),
  fc.tuple(op, fc.constantFrom(...VERSIONS)).map(([o, v]) => `os.version ${o} ${quote(v)}`),
  fc.tuple(op, fc.integer({ min: 0, max: 9 })).map(([o, v]) => `cpus ${o} ${v}`),
  fc.tuple(op, fc.constantFrom('4GiB', '8G', '2000MB', '1073741824')).map(([o, v]) => `memory ${o} ${v}`),
  fc.tuple(eq, fc.constantFrom('10.0.0.0/8', '10.0.1.0/24', '192.168.1.1', '2001:db8::/32', '::/0', '0.0.0.0/0')).map(([o, v]) => `ip ${o} ${v}`),
  fc.tuple(fc.constantFrom(...PACKAGES), op, fc.constantFrom(...VERSIONS)).map(([p, o, v]) => `package:${p} ${o} ${quote(v)}`),
  fc.constantFrom(...PACKAGES).map((p) => `package:${p}`),
  fc.tuple(eq, fc.constantFrom(...WORDS)).map(([o, v]) => `fact:role ${o} ${quote(v)}`),
  fc.tuple(op, fc.integer({ min: -4, max: 4 })).map(([o, v]) => `fact:deep.level ${o} ${v}`),
  fc.constantFrom('fact:deep', 'fact:role', 'tag:env', 'property:owner'),
  fc.tuple(eq, fc.constantFrom(...WORDS)).map(([o, v]) => `tag:env ${o} ${quote(v)}`),
  fc.tuple(eq, fc.constantFrom(...WORDS)).map(([o, v]) => `property:owner ${o} ${quote(v)}`),
  fc.tuple(fc.constantFrom('owner', 'owner.room', 'owner.0', 'owner.1'), eq, fc.constantFrom(...WORDS, '3', 'true', 'null', '{}', '[]', '2.5')).map(([k, o, v]) => `property:${k} ${o} ${quote(v)}`),
  fc.tuple(fc.constantFrom('owner', 'owner.n', 'owner.0'), op, fc.integer({ min: -4, max: 4 })).map(([k, o, v]) => `property:${k} ${o} ${v}`),
  fc.constantFrom('property:owner.room', 'property:owner.0', 'property:owner.n'),
  fc.tuple(eq, fc.constantFrom('g1', 'g%')).map(([o, v]) => `group ${o} ${quote(v)}`),
  fc.tuple(op, fc.constantFrom('30m', '1h', '1d')).map(([o, v]) => `last_inventory.age ${o} ${v}`),
  fc.tuple(op, fc.constantFrom('1h')).map(([o, v]) => `last_run.age ${o} ${v}`),
);
const exprArb: fc.Arbitrary<string> = fc.letrec<{ e: string }>((tie) => ({
  e: fc.oneof({ depthSize: 'small', withCrossShrink: true },
    atomArb,
    tie('e').map((e) => `not (${e})`),
    fc.tuple(tie('e'), fc.constantFrom('and', 'or'), tie('e')).map(([a, o, b]) => `(${a}) ${o} (${b})`)),
})).e;

t.test('the store selects what the in-memory evaluation selects, over random fleets', async (t) => {
  for (const [name, open] of await backends(t)) {
    const store = await open();
    t.teardown(() => store.close());
    let round = 0;
    await fc.assert(fc.asyncProperty(
      fc.integer({ min: 1, max: 5 }).chain((n) => fc.tuple(...Array.from({ length: n }, (_, i) => nodeArb(i)))),
      fc.array(exprArb, { minLength: 1, maxLength: 6 }),
      async (fleet, exprs) => {
        // Each round's nodes get fresh ids; the previous round's are deleted.
        const r = round++;
        const nodes = fleet.map((n) => ({ ...n, id: `r${r}-${n.id}` }));
        await addFleet(store, nodes);
        try {
          const subs = await subjects(store, nodes);
          for (const q of exprs) {
            const want = subs.filter((s) => evaluateFilter(parseFilter(q), s, NOW)).map((s) => s.id).sort();
            const got = await select(store, q);
            if (JSON.stringify(got) !== JSON.stringify(want)) throw new Error(`${name}: ${q}: store ${JSON.stringify(got)}, memory ${JSON.stringify(want)}`);
          }
        } finally {
          for (const n of nodes) await store.deleteNode(n.id);
        }
      },
    ), { numRuns: name === 'sqlite' ? 150 : 60 });
    t.pass(`${name}: agrees`);
  }
});
