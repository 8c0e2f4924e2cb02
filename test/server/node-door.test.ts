/**
 * One door for node changes: whichever way a node changes — an admin through the API, an admin on
 * the server's command line, a relay's contact, the node's inventory, a discovery poll, the
 * lifecycle sweep — the change has the same effects (the node's policy follows at once: here it
 * joins or leaves a dynamic group's rule) and leaves an audit record naming who acted, with the
 * node before and after. Inventory, discovery and the sweep once changed nodes beside the door,
 * so their effects waited for the periodic regeneration and nothing recorded them.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { checkManager } from '@capstan/toolkit/providers/index';
import { compressSync, createNodeIdentity, inventoryFileName, signSmime, silentLogger } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { relayActor, systemActor } from '@capstan/server/audit/actor';
import { loadServerConfig } from '@capstan/server/config';
import { composeDomain } from '@capstan/server/domain';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import { specToStored } from '@capstan/server/providers/managers';
import { lifecyclePolicy, sweep } from '@capstan/server/registry/lifecycle';
import { openRegistry } from '@capstan/server/registry/open';
import { enrollmentRules } from '@capstan/server/registry/enrollment';
import { INGEST_LIMITS } from '../helpers/ingest.js';
import { BIN, programDir, runProgram } from '../helpers/programs.js';

const TOKEN = 'door-token-'.padEnd(40, 'x');

t.test('every path into the node registry regenerates the policy and is audited with its actor', async (t) => {
  const dir = programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  const domain = composeDomain({ store, log: silentLogger });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const app = buildApp({ config, store, domain, spool, log: silentLogger, adminToken: TOKEN, status: async () => ({}) });
  t.teardown(() => app.close());

  // The effect to watch: running nodes get a directive, others lose it.
  const admin = { kind: 'admin' as const, name: 'admin', role: 'admin' as const };
  await domain.policy.save('directive', { id: 'motd', name: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi\n' }, mode: 'enforce' }, admin, null);
  await domain.policy.save('group', { id: 'running', name: 'running', filter: [{ key: 'q', values: ['state = running'] }] }, admin, null);
  await domain.policy.save('rule', { id: 'r', name: 'r', directives: ['motd'], groups: ['running'] }, admin, null);
  const directives = async (id: string) => {
    await domain.generator.settled();
    const b = await store.getPolicyBundle(id);
    return b ? (JSON.parse(b.bundle) as { directives: unknown[] }).directives.length : null;
  };
  const lastAudit = async (target: string) => (await store.admins.listAudit({ target, page: 1, per_page: 1 })).rows[0];

  // The node's inventory (auto-accepted by rule): registered, recorded as the node's own act.
  const idn = createNodeIdentity('lab-1');
  const doc = { node_id: 'lab-1', hostname: 'lab-1', certificate: idn.certPem, agent_version: '0.1.0', policy_server: 'root', os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' } };
  const name = inventoryFileName('lab-1', new Date('2026-01-01T09:00:00Z'), 'zstd');
  await writeFile(join(dir, name), compressSync(signSmime(Buffer.from(JSON.stringify(doc)), idn), 'zstd'));
  await ingestInventory({ store, nodes: domain.nodes, limits: INGEST_LIMITS, enrollment: enrollmentRules({ auto_accept_node_ids: 'lab-*', auto_accept_hostnames: '', secret: '' }) }, join(dir, name), name);
  t.equal(await directives('lab-1'), 1, 'inventory: an accepted running node gets its policy at once');
  t.match(await lastAudit('lab-1'), { actor_kind: 'node', actor: 'lab-1', action: 'node.register', before: null, after: { accepted: 'accepted', state: 'running' } });

  // An admin through the API.
  const patched = await app.inject({ method: 'PATCH', url: '/api/1/nodes/lab-1', headers: { authorization: `Bearer ${TOKEN}`, 'content-type': 'application/json' }, payload: JSON.stringify({ state: 'stopped' }) });
  t.equal(patched.statusCode, 200, patched.body);
  t.equal(await directives('lab-1'), 0, 'API: a stopped node loses the rule at once');
  t.match(await lastAudit('lab-1'), { actor_kind: 'admin', actor: 'admin', action: 'node.update', method: 'PATCH', status: 200, before: { state: 'running' }, after: { state: 'stopped' } });

  // An admin on the server's command line (another process on the same database).
  const ran = await runProgram(BIN.server, ['nodes', 'set-state', 'lab-1', 'running', '--data-dir', dir]);
  t.equal(ran.code, 0, ran.stderr);
  t.equal(await directives('lab-1'), 1, 'CLI: running again, the policy is regenerated by the command itself');
  t.match(await lastAudit('lab-1'), { actor_kind: 'admin', action: 'node.update', before: { state: 'stopped' }, after: { state: 'running' } });

  // The lifecycle sweep: silent since the inventory, the node goes missing.
  const policy = lifecyclePolicy(config);
  const heard = (await store.getNode('lab-1'))!.last_contact_at!;
  const later = new Date(Date.parse(heard) + policy.missingAfterMs + 60_000);
  t.match(await sweep(store, domain.nodes, policy, later), { missing: 1 });
  t.equal(await directives('lab-1'), 0, 'sweep: a missing node leaves the group at once');
  t.match(await lastAudit('lab-1'), { actor_kind: 'system', actor: 'sweep', action: 'node.sweep.missing', before: { state: 'running' }, after: { state: 'missing' } });

  // A contact that is neither an inventory nor a run (a relay's renewals, requests and link are
  // its contacts): a missing node is running again.
  await domain.nodes.recordContact('lab-1', new Date(later.getTime() + 1000).toISOString(), relayActor('lab-1'), 'relay request');
  t.equal(await directives('lab-1'), 1, 'contact: back to running, back in the group');
  t.match(await lastAudit('lab-1'), { actor_kind: 'relay', actor: 'lab-1', action: 'node.contact', before: { state: 'missing' }, after: { state: 'running' } });

  // A discovery poll: a new instance, running, then stopped by its cloud.
  const spec = checkManager({ id: 'lab', type: 'static', config: { hosts: ['vm-1'], region: 'lab' } });
  await store.managers.createManager({ id: spec.id, name: spec.name, type: spec.type, provider: spec.provider, spec: specToStored(spec) }, later.toISOString());
  const poll = (state: string) => domain.managers.poll('lab', { instances: [{ source_id: 'vm-1', region: 'lab', account_id: 'static', hostname: 'vm-1', address: 'vm-1', state, tags: {} }] }, systemActor('discovery'), later);
  await poll('running');
  const vm = (await store.listNodes({ page: 1, per_page: 1, filters: [{ key: 'hostname', values: ['vm-1'] }] })).data[0]!;
  t.equal(await directives(vm.id), 1, 'discovery: a discovered running instance gets its policy at once');
  await poll('stopped');
  t.equal(await directives(vm.id), 0, 'discovery: stopped by its cloud, it loses the rule at once');
  t.match(await lastAudit(vm.id), { actor_kind: 'system', actor: 'discovery', action: 'node.discovery.updated', before: { state: 'running' }, after: { state: 'stopped' } });

  // Each change is also in the node's history, naming who acted.
  const causes = (await store.getHistory('lab-1', 1, 50)).data.map((h) => h.cause);
  t.ok(causes.includes('admin admin'), 'the API admin');
  t.ok(causes.includes('admin admin (command line)'), 'the command line admin');
  t.ok(causes.includes('silence'), 'the sweep');
  t.notOk(JSON.stringify(await store.admins.listAudit({ page: 1, per_page: 100 })).includes('BEGIN CERTIFICATE'), 'no certificate text in the audit log');
});
