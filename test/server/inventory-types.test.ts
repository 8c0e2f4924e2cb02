/**
 * An inventory whose optional fields have the wrong JSON types (numbers for strings, objects for
 * arrays, nulls, nested junk): ingest keeps the node and what is valid, leaves the rest out and
 * names it in the inventory's `errors` (`server.<field>`); the node view and the inventory the
 * console reads answer 200 with well-typed fields only — for a document stored before the check
 * too (checked again when read).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compressSync, createNodeIdentity, inventoryFileName, signSmime } from '@capstan/shared';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import { normaliseInventory } from '@capstan/server/ingest/inventory-fields';
import { adminApp } from '../helpers/admin-app.js';
import { INGEST_LIMITS } from '../helpers/ingest.js';

const JUNK = {
  fqdn: 42, machine_id: { a: 1 }, uptime: 'long', cpus: [1, 2], memory: { total: 'lots', available: 1024 },
  disks: { '/': 1 },
  interfaces: [{ name: 'eth0', mac: 7, addresses: [{ address: '192.0.2.5', family: 4, cidr: '192.0.2.5/24' }, { address: '192.0.2.7', cidr: 24 }, 12, null, '192.0.2.6'] }, { name: null }, 'lo', { name: 'eth1', addresses: 'x' }],
  packages: [{ name: 'bash', version: '5.2' }, { name: 3, version: '1' }, null, ['x'], { name: 'curl', version: { v: 1 } }, { name: 'vim', version: '9', epoch: 0 }],
  facts: ['role'], facts_errors: { 'a.json': { deep: [1] } }, cloud: null, errors: 'none',
  os_extra: { nested: { junk: [null, {}] } },
};

/** What the console relies on, field by field. */
function wellTyped(t: Test, inv: Record<string, any>) {
  for (const f of ['fqdn', 'machine_id', 'uptime', 'cpus', 'disks', 'facts', 'cloud']) t.notOk(f in inv, `${f} left out`);
  t.same(inv.memory, { available: 1024 }, 'memory keeps its numbers');
  t.same(inv.interfaces, [{ name: 'eth0', addresses: [{ address: '192.0.2.5', cidr: '192.0.2.5/24' }, { address: '192.0.2.7' }, '192.0.2.6'] }, { name: 'eth1' }], 'interfaces keep named entries and valid addresses');
  t.same(inv.packages, [{ name: 'bash', version: '5.2' }, { name: 'vim', version: '9' }], 'packages keep entries with a string name and version');
  t.same(inv.facts_errors, { 'a.json': '{"deep":[1]}' }, 'a fact error is shown as text');
  for (const f of ['fqdn', 'machine_id', 'uptime', 'cpus', 'memory', 'disks', 'interfaces', 'packages', 'facts', 'cloud', 'errors']) {
    t.type(inv.errors[`server.${f}`], 'string', `errors names ${f}`);
  }
  t.same(inv.os_extra, JUNK.os_extra, 'a field the contract does not name is kept as sent');
}

t.test('ingest and read: wrong types left out and named, the node view answers 200', async (t) => {
  const { dir, store, domain, api } = await adminApp(t);
  const deps = { store, nodes: domain.nodes, limits: INGEST_LIMITS };
  const id = 'junk-0001';
  const idn = createNodeIdentity(id);
  const doc = { node_id: id, hostname: 'junk', certificate: idn.certPem, agent_version: '0.1.0', policy_server: 'root', os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64', pretty_name: 5 }, ...JUNK };
  const name = inventoryFileName(id, new Date(Date.UTC(2026, 0, 1)), 'zstd');
  const path = join(dir, name);
  await writeFile(path, compressSync(signSmime(Buffer.from(JSON.stringify(doc)), idn), 'zstd'));
  const node = await ingestInventory(deps, path, name);
  t.equal(node.id, id, 'the node is registered');

  const view = await api('GET', `/api/1/nodes/${id}`);
  t.equal(view.status, 200, 'the node view');
  t.equal(view.json.data.hostname, 'junk');
  const inv = await api('GET', `/api/1/nodes/${id}/inventory`);
  t.equal(inv.status, 200, 'the inventory the console reads');
  wellTyped(t, inv.json.data.inventory);
  t.same(inv.json.data.inventory.os, { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' }, 'os keeps its strings');
  const stored = (await store.getInventory(id))!.inventory as Record<string, any>;
  t.notOk('fqdn' in stored, 'the stored document is the checked one');
  const listed = await api('GET', `/api/1/nodes?q=${encodeURIComponent('package:bash = 5.2')}`);
  t.match(listed, { status: 200, json: { total: 1 } }, 'the node list finds it by a valid package');

  // Stored before the check (written straight to the registry): checked when read.
  await domain.nodes.recordInventory({
    id, hostname: 'junk', certificate: idn.certPem, certificate_fingerprint: node.certificate_fingerprint!, os_name: 'debian', os_version: '12',
    agent_version: '0.1.0', policy_server: 'root', inventory: { ...doc }, received_at: new Date().toISOString(), sent_at: new Date().toISOString(), auto_accept: null,
  }, { kind: 'system', name: 'test' });
  t.ok('fqdn' in ((await store.getInventory(id))!.inventory as object), 'junk stored as is');
  const again = await api('GET', `/api/1/nodes/${id}/inventory`);
  t.equal(again.status, 200);
  wellTyped(t, again.json.data.inventory);
});

t.test('a well-typed inventory is unchanged, and checking twice changes nothing more', async (t) => {
  const good = { fqdn: 'a.example', uptime: 5, cpus: { count: 2, model: 'x' }, memory: { total: 1 }, disks: [{ device: '/dev/sda1', mount: '/', fstype: 'ext4', size: 10, free: 5 }],
    interfaces: [{ name: 'eth0', mac: 'aa', addresses: [{ family: 'inet', address: '192.0.2.1', cidr: '192.0.2.1/24' }] }], packages: [{ name: 'a', version: '1', source: 'b' }],
    facts: { role: { x: [1] } }, facts_errors: { f: 'bad' }, errors: { disks: 'x' }, cloud: { provider: 'aws', instance_id: 'i', region: 'r', account_id: 'a' } };
  t.same(normaliseInventory(good), { doc: good, problems: {} });
  const once = normaliseInventory(JUNK as Record<string, unknown>).doc;
  t.same(normaliseInventory(once), { doc: once, problems: {} }, 'idempotent');
});
