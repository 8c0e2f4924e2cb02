/**
 * SHA-1 signatures: refused by default on everything a node signs (run logs, inventories,
 * renewal requests), with ERR_SMIME_WEAK_DIGEST; `[signatures] allow_sha1` lets old agents in.
 * The messages are signed by the openssl CLI (`openssl smime -sign -md sha1`), as such an agent's
 * would be; MD5 stays refused either way.
 */
import { spawnSync } from 'node:child_process';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { compressSync, createNodeIdentity, formatReport, inventoryFileName, runLogFileName, silentLogger, verifySmime, type NodeIdentity as Identity } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { NodeIdentity } from '@capstan/server/identity/service';
import { identitySettings } from '@capstan/server/identity/settings';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import { ingestRunLog } from '@capstan/server/ingest/runlog';
import { openRegistry } from '@capstan/server/registry/open';
import { requiredInCi, programDir } from '../helpers/programs.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { registryOn } from '../helpers/node-changes.js';
import { composeDomain } from '@capstan/server/domain';

const noOpenssl = requiredInCi(spawnSync('openssl', ['version']).status === 0 ? false : 'openssl CLI not available', 'install Debian\'s openssl');
const NODE = '21111111-2222-4333-8444-555555555555';
const node = createNodeIdentity(NODE);

/** `openssl smime -sign -text -nocerts -md <md>`: what an agent signing with that digest sends. */
function opensslSign(t: Test, content: string, id: Identity, md: string): Buffer {
  const dir = programDir(t, { 'key.pem': id.keyPem, 'cert.pem': id.certPem, content });
  const out = join(dir, 'signed');
  const r = spawnSync('openssl', ['smime', '-sign', '-text', '-nocerts', '-md', md, '-signer', join(dir, 'cert.pem'), '-inkey', join(dir, 'key.pem'),
    '-in', join(dir, 'content'), '-out', out], { encoding: 'utf8' });
  if (r.status !== 0) throw new Error(`openssl: ${r.stderr}`);
  return readFileSync(out);
}

function runText(second: number): { text: string; name: string } {
  const start = new Date(Date.UTC(2026, 0, 1, 12, 0, second));
  const stamp = `${start.toISOString().slice(0, 19)}+00:00`;
  const line = (type: string, component: string, key: string, msg: string) => formatReport({
    policy: 'Common', event_type: type, rule_id: 'r1', directive_id: 'd1', report_id: '0', component, key_value: key, msg, node_id: NODE, start_datetime: stamp, execution_datetime: stamp,
  });
  const text = [line('control', 'start', 'cfg1', 'Start execution'), line('result_success', 'File', '/etc/motd', 'ok'), line('control', 'end', 'cfg1', 'End execution')].join('\n') + '\n';
  return { text, name: runLogFileName(NODE, start, 'zstd') };
}

t.test('verifySmime refuses SHA-1 unless allowed, and MD5 always', { skip: noOpenssl }, async (t) => {
  // SHA-1 signatures used to verify like SHA-256 ones.
  const sha1 = opensslSign(t, 'hello\n', node, 'sha1');
  t.throws(() => verifySmime(sha1, [node.certPem]), { code: 'ERR_SMIME_WEAK_DIGEST' });
  t.equal(verifySmime(sha1, [node.certPem], { allowSha1: true }).content.toString(), 'hello\r\n');
  const sha256 = opensslSign(t, 'hello\n', node, 'sha256');
  t.equal(verifySmime(sha256, [node.certPem]).content.toString(), 'hello\r\n');
  // OpenSSL 3 may refuse to make an MD5 signature at all; when it does, ours refuses to check it.
  const md5 = spawnSync('openssl', ['list', '-digest-algorithms'], { encoding: 'utf8' }).stdout.includes('MD5') ? (() => {
    try {
      return opensslSign(t, 'hello\n', node, 'md5');
    } catch {
      return undefined;
    }
  })() : undefined;
  if (md5) t.throws(() => verifySmime(md5, [node.certPem], { allowSha1: true }), { code: 'ERR_SMIME_UNSUPPORTED' });
});

t.test('run logs and inventories signed with SHA-1 are refused by default, stored with allow_sha1', { skip: noOpenssl }, async (t) => {
  const dir = programDir(t);
  const store = await openRegistry({ sqlitePath: join(dir, 'db.sqlite') });
  t.teardown(() => store.close());
  const limits = { maxDecompressedBytes: 1 << 20, maxReports: 1000, maxLineBytes: 65536 };
  let n = 0;
  const put = (name: string, signed: Buffer) => {
    const path = join(dir, `${n++}-${name}`);
    writeFileSync(path, compressSync(signed, 'zstd'));
    return path;
  };
  const inv = JSON.stringify({
    node_id: NODE, hostname: 'old', certificate: node.certPem, agent_version: '0.1.0', policy_server: 'root', os: { name: 'debian', version: '9', kernel: '4.9', arch: 'x86_64' },
  });
  const invName = inventoryFileName(NODE, new Date(Date.UTC(2026, 0, 1)), 'zstd');
  await t.rejects(ingestInventory({ store, nodes: registryOn(store), limits }, put(invName, opensslSign(t, inv, node, 'sha1')), invName), { code: 'ERR_SMIME_WEAK_DIGEST' });
  t.equal(await store.getNode(NODE), null, 'nothing registered');
  t.equal((await ingestInventory({ store, nodes: registryOn(store), limits: { ...limits, allowSha1: true } }, put(invName, opensslSign(t, inv, node, 'sha1')), invName)).accepted, 'pending');
  await setAcceptance(store, NODE, 'accepted', new Date().toISOString());

  const first = runText(0);
  await t.rejects(ingestRunLog({ store, nodes: registryOn(store), limits }, put(first.name, opensslSign(t, first.text, node, 'sha1')), first.name), { code: 'ERR_SMIME_WEAK_DIGEST' });
  t.equal((await store.listRuns(NODE, 1, 10)).total, 0);
  t.match(await ingestRunLog({ store, nodes: registryOn(store), limits: { ...limits, allowSha1: true } }, put(first.name, opensslSign(t, first.text, node, 'sha1')), first.name), { inserted: true });
  const second = runText(1);
  t.match(await ingestRunLog({ store, nodes: registryOn(store), limits }, put(second.name, opensslSign(t, second.text, node, 'sha256')), second.name), { inserted: true }, 'SHA-256 as ever');
});

t.test('a renewal request signed with SHA-1 is refused by default, accepted with allow_sha1', { skip: noOpenssl }, async (t) => {
  for (const allow of [false, true]) {
    const dir = programDir(t);
    const config = loadServerConfig({ overrides: { 'general.data_dir': dir, 'signatures.allow_sha1': allow } });
    t.equal(config.signatures.allow_sha1, allow);
    const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
    const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
    await spool.init();
    const identity = await NodeIdentity.open({
      dataDir: dir, store, log: silentLogger, ...identitySettings(config.identity), allowSha1: config.signatures.allow_sha1,
    });
    const app = buildApp({ config, store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: 'x'.repeat(32), status: async () => ({}), identity });
    t.teardown(async () => {
      await app.close();
      await store.close();
      identity.close();
    });
    await store.createNode({ id: NODE, hostname: 'old', certificate: node.certPem });
    const body = opensslSign(t, JSON.stringify({ node_id: NODE, timestamp: new Date().toISOString(), nonce: `nonce-${allow}-0123456789` }), node, 'sha1');
    const res = await app.inject({ method: 'POST', url: '/identity/renew', headers: { 'content-type': 'application/pkcs7-mime' }, payload: body });
    if (allow) t.equal(res.statusCode, 200, res.body);
    else t.match({ status: res.statusCode, body: JSON.parse(res.body) }, { status: 400, body: { error: { code: 'ERR_SMIME_WEAK_DIGEST' } } });
  }
});
