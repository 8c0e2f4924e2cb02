/**
 * A RUDDER agent enrols through Capstan, end to end with the real programs: its OCS inventory
 * (XML built here, gzip'd) and the `.sign` beside it (made with the OpenSSL command line, as the
 * agent's signing script does) are PUT to a relay, which forwards the pair to the server; the node
 * is pending with the mapped inventory, is accepted, sends an update to `/inventory-updates/`,
 * and its S/MIME-signed run log is then stored. Hostile pairs sent to the server are refused into
 * failed/ with their codes, both halves, and nothing else changes.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { adminClient, BIN, startProgram, waitFor, programDir } from '../helpers/programs.js';
import { ocsName, ocsXml, rudderNode, signOcs, smimeSignOpenssl } from '../helpers/ocs.js';

const NODE = '7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e5f';

async function put(base: string, path: string, body: Buffer): Promise<{ status: number; code?: string }> {
  const res = await fetch(`${base}${path}`, { method: 'PUT', body });
  const json = (await res.json().catch(() => ({}))) as { error?: { code?: string } };
  return { status: res.status, code: json.error?.code };
}

t.test('a RUDDER agent\'s OCS inventory enrols its node through a relay; hostile ones are refused', async (t) => {
  const dir = programDir(t, { 'server.toml': '[limits]\nocs_max_size = "1MiB"\n# A .sign that does not verify waits this long for another one (junk may have raced ahead).\nocs_pair_wait = "4s"\n[lifecycle]\nsweep_interval = "1h"\n' });
  const server = await startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', '127.0.0.1:0',
    '--data-dir', join(dir, 'server'), '--log-level', 'warn']);
  t.teardown(() => server.stop());
  const relay = await startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  const api = adminClient(server.url, (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim());
  const node = rudderNode(NODE);

  // First inventory, to /inventories/ on the relay: the .gz, then its .sign (as do-inventory does).
  const name = ocsName(NODE, new Date(Date.now() - 60_000));
  const xml = ocsXml(node);
  t.same(await put(relay.url, `/inventories/${encodeURIComponent(`${name}.gz`)}`, gzipSync(xml)), { status: 201, code: undefined });
  t.same(await put(relay.url, `/inventories/${encodeURIComponent(`${name}.sign`)}`, signOcs(xml, node)), { status: 201, code: undefined });

  const pending = await waitFor(async () => {
    const r = await api('GET', '/api/1/nodes/pending');
    return r.json.total === 1 ? r.json.data[0] : undefined;
  }, 'the RUDDER node to be pending');
  t.match(pending, { id: NODE, hostname: 'web1', accepted: 'pending', os_name: 'debian', os_version: '12', agent_version: '8.3.4-debian12' });
  const inv = (await api('GET', `/api/1/nodes/${NODE}/inventory`)).json.data.inventory;
  t.match(inv, {
    node_id: NODE, fqdn: 'web1.example.test', policy_server: 'root', inventory_format: 'ocs',
    os: { name: 'debian', kernel: '6.1.0-13-amd64', arch: 'x86_64' }, cpus: { count: 4 }, memory: { total: 3942 * 1024 * 1024 },
  });
  t.same(inv.packages.map((p: { name: string }) => p.name), ['openssl', 'rudder-agent', 'libc6']);
  t.same(inv.interfaces.find((i: { name: string }) => i.name === 'eth0').addresses.map((a: { cidr: string }) => a.cidr), ['192.0.2.10/24', '2001:db8::10/64']);
  t.equal((await api('GET', `/api/1/nodes/${NODE}`)).json.data.certificate?.trim(), node.certPem.trim(), 'the AGENT_CERT is the node\'s certificate');
  // Queried like any other node.
  t.equal((await api('GET', '/api/1/nodes?hostname=web1')).json.total, 1);
  const relaySpool = join(dir, 'relay', 'incoming', 'inventories');
  await waitFor(async () => ((await readdir(relaySpool)).length === 0 ? true : undefined), 'the relay to be done with both halves');
  t.pass('the relay forwarded both halves');

  t.equal((await api('POST', `/api/1/nodes/${NODE}/accept`)).status, 200);

  // An update to /inventory-updates/, verified against the pinned certificate.
  const update = ocsName(NODE, new Date(Date.now() - 30_000));
  const xml2 = ocsXml(node, { packages: [{ name: 'openssl', version: '3.0.15-1~deb12u1' }] });
  t.equal((await put(relay.url, `/inventory-updates/${encodeURIComponent(`${update}.gz`)}`, gzipSync(xml2))).status, 201);
  t.equal((await put(relay.url, `/inventory-updates/${encodeURIComponent(`${update}.sign`)}`, signOcs(xml2, node, { hashValue: true }))).status, 201);
  await waitFor(async () => {
    const i = (await api('GET', `/api/1/nodes/${NODE}/inventory`)).json.data?.inventory;
    return i?.packages?.[0]?.version === '3.0.15-1~deb12u1' ? true : undefined;
  }, 'the update to be stored');

  // Its run log, signed as a RUDDER agent signs it, gzip'd, through the relay.
  const started = new Date(Date.now() - 10_000).toISOString().replace(/\.\d{3}Z$/, '+00:00');
  const day = started.replace('T', ' ');
  const log = [
    `${started} R: @@Common@@control@@rudder@@run@@0@@start@@20261125-100000-abcdef01@@${day}##${NODE}@#Start execution`,
    `${started} R: @@Common@@result_success@@hasPolicyServer-root@@common-root@@0@@ncf Initialization@@None@@${day}##${NODE}@#Configuration library initialization`,
    `${started} R: @@Common@@control@@rudder@@run@@0@@end@@20261125-100000-abcdef01@@${day}##${NODE}@#End execution`,
    '',
  ].join('\n');
  const runName = `${started}@${NODE}.log.gz`;
  t.equal((await put(relay.url, `/reports/${encodeURIComponent(runName)}`, gzipSync(smimeSignOpenssl(Buffer.from(log), node)))).status, 201);
  const runs = await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${NODE}/runs`);
    return r.json.total === 1 ? r.json.data : undefined;
  }, 'the RUDDER run to be stored');
  t.match(runs[0], { node_id: NODE, config_id: '20261125-100000-abcdef01', complete: true, counts: { result_success: 1 } });

  // Hostile pairs, straight to the server (the relay forwards bytes, it does not judge them).
  const failedDir = join(dir, 'server', 'spool', 'failed', 'inventories');
  const stranger = rudderNode('9a8b7c6d-5e4f-4a3b-2c1d-0e9f8a7b6c5d');
  const newcomer = (i: number) => ocsName(stranger.id, new Date(Date.now() - 120_000 + i * 1000));
  const cases: Array<{ what: string; name: string; data: Buffer; sign: Buffer; code: string }> = [];
  const strangerXml = ocsXml(stranger);
  cases.push({ what: 'signed by another key', name: `${newcomer(0)}.gz`, data: gzipSync(strangerXml), sign: signOcs(strangerXml, node), code: 'ERR_OCS_SIGNATURE' });
  cases.push({ what: 'a .sign made for another file', name: `${newcomer(1)}.gz`, data: gzipSync(strangerXml), sign: signOcs(ocsXml(stranger, { hostname: 'db1' }), stranger, { hashValue: true }), code: 'ERR_OCS_SIGNATURE' });
  const xxe = Buffer.from(`<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><REQUEST><CONTENT>&x;</CONTENT></REQUEST>`);
  cases.push({ what: 'an XXE attempt', name: `${newcomer(2)}`, data: xxe, sign: signOcs(xxe, stranger), code: 'ERR_OCS_DOCTYPE' });
  const deep = Buffer.from(`<REQUEST>${'<A>'.repeat(50_000)}${'</A>'.repeat(50_000)}</REQUEST>`);
  cases.push({ what: 'a depth bomb', name: `${newcomer(3)}.gz`, data: gzipSync(deep), sign: signOcs(deep, stranger), code: 'ERR_OCS_TOO_DEEP' });
  const bomb = Buffer.alloc(8 * 1024 * 1024, 0x20);
  cases.push({ what: 'a gzip bomb', name: `${newcomer(4)}.gz`, data: gzipSync(bomb), sign: signOcs(bomb, stranger), code: 'ERR_DECOMPRESSED_TOO_LARGE' });
  cases.push({ what: 'malformed XML', name: `${newcomer(5)}.gz`, data: gzipSync(strangerXml.subarray(0, 500)), sign: signOcs(strangerXml.subarray(0, 500), stranger), code: 'ERR_OCS_INVALID' });
  // Another key claiming the accepted node: the pinned certificate decides, not the XML.
  const usurper = ocsXml(node, { certPem: stranger.certPem, publicPem: stranger.publicPem, hostname: 'evil' });
  cases.push({ what: 'another key for an accepted node', name: `${ocsName(NODE, new Date(Date.now() - 5000))}.gz`, data: gzipSync(usurper), sign: signOcs(usurper, stranger), code: 'ERR_OCS_SIGNATURE' });
  for (const c of cases) {
    t.equal((await put(server.url, `/inventories/${encodeURIComponent(c.name)}`, c.data)).status, 201, c.what);
    t.equal((await put(server.url, `/inventories/${encodeURIComponent(c.name.replace(/\.gz$/, '') + '.sign')}`, c.sign)).status, 201, `${c.what} (.sign)`);
  }
  // Each half and its .reason (written just before the half is moved in).
  const expected = cases.flatMap((c) => [c.name, `${c.name.replace(/\.gz$/, '')}.sign`]).flatMap((n) => [n, `${n}.reason`]);
  const failed = await waitFor(async () => {
    const names = await readdir(failedDir).catch(() => [] as string[]);
    return expected.every((n) => names.includes(n)) ? names : undefined;
  }, 'both halves of every hostile pair to land in failed/', 30_000);
  for (const c of cases) {
    const sign = `${c.name.replace(/\.gz$/, '')}.sign`;
    t.ok(failed.includes(c.name) && failed.includes(sign), `${c.what}: both halves in failed/`);
    t.match(await readFile(join(failedDir, `${c.name}.reason`), 'utf8'), c.code, `${c.what}: ${c.code}`);
    t.match(await readFile(join(failedDir, `${sign}.reason`), 'utf8'), c.code, `${c.what}: the .sign says why too`);
  }
  t.equal((await api('GET', '/api/1/nodes/pending')).json.total, 0, 'no hostile node registered');
  t.match((await api('GET', `/api/1/nodes/${NODE}`)).json.data, { hostname: 'web1', accepted: 'accepted' }, 'the accepted node is untouched');

  // A half waiting for the other is an expected state: no retry warning in either program's log.
  t.notOk([...relay.output, ...server.output].some((l) => l.includes('will retry')), 'no retry warnings for pairs in waiting');

  // Names that are neither inventory nor signature are still refused at the door.
  t.same(await put(relay.url, '/inventory-updates/web1-7c1d2e3f.ocs', Buffer.from('x')), { status: 400, code: 'ERR_INVENTORY_NAME' });
  t.same(await put(server.url, `/inventories/${encodeURIComponent(`${name}.zst`)}`, Buffer.from('x')), { status: 400, code: 'ERR_INVENTORY_NAME' });
});
