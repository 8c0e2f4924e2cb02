/**
 * Bootstrap credentials and bootstrap job requests, without SSH: selectors and their
 * specificity, sealing with the identity sealer, what a request may hold, the agent
 * configuration a bootstrap writes, and the package folder's choice by architecture.
 */
import { generateKeyPairSync, randomBytes } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { parse as parseToml } from 'smol-toml';
import { chooseCredential, openCredential, parseCredentialRequest, parseSelector, sealCredential } from '@capstan/server/bootstrap/credentials';
import { agentConfigText } from '@capstan/server/bootstrap/runner';
import { AgentPackages } from '@capstan/toolkit/bootstrap/packages';
import { parseJobRequest } from '@capstan/server/jobs/create';
import { KeySealer } from '@capstan/server/identity/seal';
import type { CredentialRecord } from '@capstan/server/store/index';

const sealer = KeySealer.fromSecret(randomBytes(32).toString('base64url'));
const rsa = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey;
const cred = (id: string, selectors: string[]): CredentialRecord => ({ id, user: 'u', port: 22, selectors, fingerprint: null, has_password: true, created_at: '2024-01-01T00:00:00.000Z' });
const node = { id: 'n1', tags: { env: 'prod', role: 'web' }, groups: ['g1'], managers: ['aws'] };

t.test('selectors: node, tag, group, manager and * parse; anything else does not', async (t) => {
  t.same(parseSelector('tag:env=prod'), { kind: 'tag', key: 'env', value: 'prod' });
  t.same(parseSelector('tag:k=a=b'), { kind: 'tag', key: 'k', value: 'a=b' }, 'the first = splits');
  t.same(parseSelector('group:web'), { kind: 'group', key: 'web' });
  t.same(parseSelector('*'), { kind: 'any', key: '' });
  for (const bad of ['env=prod', 'tag:env', 'tag:=x', 'host:a', 'node:', 'node:a\nb', '']) t.equal(parseSelector(bad), null, JSON.stringify(bad));
});

t.test('the most specific credential wins: node > tag > group > manager > *', async (t) => {
  const all = [cred('any', ['*']), cred('mgr', ['manager:aws']), cred('grp', ['group:g1']), cred('tag', ['tag:env=prod']), cred('node', ['node:n1'])];
  t.equal(chooseCredential(node, all).id, 'node');
  t.equal(chooseCredential(node, all.slice(0, 4)).id, 'tag');
  t.equal(chooseCredential(node, all.slice(0, 3)).id, 'grp');
  t.equal(chooseCredential(node, all.slice(0, 2)).id, 'mgr');
  t.equal(chooseCredential(node, all.slice(0, 1)).id, 'any');
  t.equal(chooseCredential(node, [cred('multi', ['manager:aws', 'tag:role=web']), cred('grp', ['group:g1'])]).id, 'multi', 'a credential counts by its best selector');
  t.throws(() => chooseCredential(node, [cred('a', ['tag:env=prod']), cred('b', ['tag:role=web']), cred('c', ['*'])]), { code: 'ERR_CREDENTIAL_AMBIGUOUS' });
  t.throws(() => chooseCredential(node, [cred('a', ['tag:env=dev']), cred('b', ['group:g2']), cred('c', ['manager:gcp'])]), { code: 'ERR_CREDENTIAL_NONE' });
  t.throws(() => chooseCredential(node, []), { code: 'ERR_CREDENTIAL_NONE' });
});

t.test('a credential is sealed: the row holds no secret, and only this secret opens it', async (t) => {
  const req = parseCredentialRequest({ id: 'k1', user: 'deploy', port: 2222, private_key: rsa, password: 'pw-1', selectors: ['tag:env=prod', 'tag:env=prod'] });
  t.same(req.selectors, ['tag:env=prod'], 'duplicates dropped');
  const sealed = await sealCredential(req, sealer, new Date('2024-01-01T00:00:00Z'));
  t.match(sealed, { id: 'k1', user: 'deploy', port: 2222, has_password: true, fingerprint: /^SHA256:[A-Za-z0-9+/]{43}$/ });
  t.notOk(sealed.sealed.includes('PRIVATE') || sealed.sealed.includes('pw-1'), 'nothing in clear');
  t.match(openCredential(sealed, sealer), { user: 'deploy', port: 2222, privateKey: rsa, password: 'pw-1' });
  const other = KeySealer.fromSecret(randomBytes(32).toString('base64url'));
  t.throws(() => openCredential(sealed, other), { code: 'ERR_CREDENTIAL_SEALED' });
  t.throws(() => openCredential({ ...sealed, id: 'k2' }, sealer), { code: 'ERR_CREDENTIAL_SEALED' }, 'a sealed secret moved to another row does not open');
});

t.test('a credential request is refused with ERR_CREDENTIAL_INVALID when it is not one', async (t) => {
  const ok = { id: 'k', user: 'root', password: 'x', selectors: ['*'] };
  const cases: Array<[string, Record<string, unknown>]> = [
    ['bad id', { ...ok, id: '../k' }], ['bad user', { ...ok, user: 'a b' }], ['port 0', { ...ok, port: 0 }],
    ['no secret', { id: 'k', user: 'root', selectors: ['*'] }], ['passphrase alone', { ...ok, passphrase: 'p' }],
    ['no selectors', { ...ok, selectors: [] }], ['bad selector', { ...ok, selectors: ['prod'] }], ['unknown field', { ...ok, colour: 'red' }],
  ];
  for (const [what, body] of cases) t.throws(() => parseCredentialRequest(body), { code: 'ERR_CREDENTIAL_INVALID' }, what);
  await t.rejects(sealCredential(parseCredentialRequest({ ...ok, private_key: 'garbage' }), sealer, new Date()), { code: 'ERR_CREDENTIAL_INVALID' });
  const pub = generateKeyPairSync('rsa', { modulusLength: 2048, publicKeyEncoding: { type: 'pkcs1', format: 'pem' }, privateKeyEncoding: { type: 'pkcs1', format: 'pem' } }).publicKey;
  await t.rejects(sealCredential(parseCredentialRequest({ ...ok, private_key: pub }), sealer, new Date()), { code: 'ERR_CREDENTIAL_INVALID' }, 'a public key');
});

t.test('a bootstrap job request needs a relay URL and takes a credential; run jobs take neither', async (t) => {
  const limits = { defaultTimeoutMs: 3_600_000, maxTargets: 100 };
  const req = parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'], filters: [{ key: 'group', values: ['web'] }], credential: 'k1', relay_url: 'https://relay:3030' }, limits);
  t.match(req, { type: 'bootstrap', bootstrap: { credential: 'k1', relay_url: 'https://relay:3030' }, filters: [{ key: 'group', values: ['web'] }] });
  t.match(parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'] }, { ...limits, bootstrapRelayUrl: 'http://r:3030' }), { bootstrap: { credential: null, relay_url: 'http://r:3030' } }, 'the configured relay URL');
  t.throws(() => parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'] }, limits), { code: 'ERR_BAD_REQUEST' }, 'no relay URL');
  t.throws(() => parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'], relay_url: 'ftp://r' }, limits), { code: 'ERR_BAD_REQUEST' });
  t.throws(() => parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'], relay_url: 'http://r/"x' }, limits), { code: 'ERR_BAD_REQUEST' }, 'a quote would break the agent\'s TOML');
  t.throws(() => parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'], relay_url: 'http://r', conditions: ['c'] }, limits), { code: 'ERR_BAD_REQUEST' });
  t.throws(() => parseJobRequest({ name: 'r', type: 'run', nodes: ['n1'], credential: 'k1' }, limits), { code: 'ERR_BAD_REQUEST' });
  t.throws(() => parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'], relay_url: 'http://r' }, { ...limits, bootstrapEnabled: false }), { code: 'ERR_BOOTSTRAP_DISABLED' });
  t.throws(() => parseJobRequest({ name: 'b', type: 'bootstrap', nodes: ['n1'], relay_url: 'http://r', filters: [{ key: 'colour', values: ['x'] }] }, limits), { code: 'ERR_BAD_REQUEST' });
});

t.test('the agent configuration a bootstrap writes is TOML the agent reads', async (t) => {
  const text = agentConfigText({ relayUrl: 'https://relay.example:3030/', secret: 's3cret-s3cret-s3cret', installRoot: '', jobId: 'j1' });
  t.same(parseToml(text), { agent: { relay: 'https://relay.example:3030/', enrollment_secret: 's3cret-s3cret-s3cret' } });
  const rooted = parseToml(agentConfigText({ relayUrl: 'http://r', secret: 'x'.repeat(32), installRoot: '/tmp/root', jobId: 'j1' })) as { agent: { state_dir: string } };
  t.equal(rooted.agent.state_dir, '/tmp/root/var/lib/capstan/agent', 'another install root keeps the state under it');
});

t.test('the package folder: the newest package for the architecture, or for all', async (t) => {
  const dir = t.testdir({
    'capstan-agent_0.1.0_amd64.deb': 'a', 'capstan-agent_0.10.0_amd64.deb': 'b', 'capstan-agent_0.9.0_amd64.deb': 'c',
    'capstan-agent_0.1.0_all.deb': 'd', 'capstan-relayd_9.0.0_arm64.deb': 'e', 'README': 'f',
  });
  const p = new AgentPackages({ dir, url: '', sha256: '', maxBytes: 1024, cacheDir: join(dir, 'cache') });
  t.same(await p.packageFor('amd64'), { path: join(dir, 'capstan-agent_0.10.0_amd64.deb'), arch: 'amd64' });
  t.same(await p.packageFor('arm64'), { path: join(dir, 'capstan-agent_0.1.0_all.deb'), arch: 'all' });
  const empty = t.testdir({ 'x.deb': '' });
  await t.rejects(new AgentPackages({ dir: empty, url: '', sha256: '', maxBytes: 1024, cacheDir: empty }).packageFor('amd64'), { code: 'ERR_BOOTSTRAP_NO_PACKAGE' });
  await t.rejects(new AgentPackages({ dir: join(empty, 'missing'), url: '', sha256: '', maxBytes: 1024, cacheDir: empty }).packageFor('amd64'), { code: 'ERR_BOOTSTRAP_NO_PACKAGE' });
  await writeFile(join(empty, 'capstan-agent_1.0.0_arm64.deb'), '');
  t.equal(await new AgentPackages({ dir: empty, url: '', sha256: '', maxBytes: 1024, cacheDir: empty }).packageFor('amd64'), null, 'no package for this architecture');
});
