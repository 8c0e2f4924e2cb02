/**
 * Relay-run bootstrap at the server, in process and without sshd: sealing a task to a relay's
 * certificate (and nothing else opening it), the relay events checked field by field, and the
 * server's side of the protocol — a relay claims only the tasks of nodes its managers hold, gets
 * them sealed to its key with the agent's configuration naming it, and its steps, first-use host
 * key and coded failures are recorded in the job as the server's own would be.
 */
import { generateKeyPairSync } from 'node:crypto';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { parse as parseToml } from 'smol-toml';
import { silentLogger } from '@capstan/shared';
import { openWithKey, sealedTaskAad, sealToCertificate } from '@capstan/toolkit/bootstrap/seal';
import { ensureNodeKeyPair } from '@capstan/shared/identity/state';
import type { RelayBootstrapTask, SealedTaskSecrets } from '@capstan/toolkit/bootstrap/relay';
import { loadServerConfig } from '@capstan/server/config';
import { startServer } from '@capstan/server/server';
import { parseRelayEvent } from '@capstan/server/api/routes/bootstrap-relay';
import { programDir } from '../helpers/programs.js';

const SSH_KEY = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey;

async function relayKeys(t: Test, id: string) {
  const dir = programDir(t);
  return ensureNodeKeyPair(id, { keyPath: join(dir, `${id}.key`), certPath: join(dir, `${id}.cert`) });
}

t.test('a task sealed to a relay opens with its key, for that task only', async (t) => {
  const [a, b] = [await relayKeys(t, 'relay-a'), await relayKeys(t, 'relay-b')];
  const aad = sealedTaskAad('relay-a', 'job-1', 'node-1');
  const sealed = sealToCertificate(a.certPem, aad, 'secret text');
  t.notMatch(Buffer.from(sealed, 'base64url').toString('utf8'), /secret text/, 'not in clear');
  t.equal(openWithKey(a.keyPem, aad, sealed), 'secret text');
  t.throws(() => openWithKey(b.keyPem, aad, sealed), { code: 'ERR_BOOTSTRAP_SEALED' }, 'another relay\'s key');
  t.throws(() => openWithKey(a.keyPem, sealedTaskAad('relay-a', 'job-1', 'node-2'), sealed), { code: 'ERR_BOOTSTRAP_SEALED' }, 'another task');
  t.throws(() => openWithKey(a.keyPem, aad, `${sealed.slice(0, -4)}AAAA`), { code: 'ERR_BOOTSTRAP_SEALED' }, 'altered');
  t.throws(() => openWithKey(a.keyPem, aad, 'not sealed'), { code: 'ERR_BOOTSTRAP_SEALED' });
  t.throws(() => sealToCertificate('not a certificate', aad, 'x'), { code: 'ERR_BOOTSTRAP_RELAY' });
});

t.test('relay events are checked field by field', async (t) => {
  const fp = `SHA256:${'A'.repeat(43)}`;
  t.same(parseRelayEvent({ step: 'copy', message: 'copying' }), { step: 'copy', message: 'copying' });
  t.same(parseRelayEvent({ host_key: { algorithm: 'ssh-ed25519', fingerprint: fp } }), { host_key: { algorithm: 'ssh-ed25519', fingerprint: fp } });
  t.same(parseRelayEvent({ installed: { os: 'Linux', arch: 'amd64' } }), { installed: { os: 'Linux', arch: 'amd64' } });
  t.same(parseRelayEvent({ failed: { code: 'ERR_BOOTSTRAP_AUTH', message: 'refused' } }), { failed: { code: 'ERR_BOOTSTRAP_AUTH', message: 'refused' } });
  const bad = [
    undefined, null, [], 'x', {},
    { step: 'enrol', message: 'the enrol step is the server\'s' },
    { step: 'done', message: 'x' },
    { step: 'copy' },
    { step: 'copy', message: 'x'.repeat(2001) },
    { step: 'copy', message: 'x', extra: 1 },
    { host_key: { algorithm: 'ssh-ed25519', fingerprint: 'MD5:aa' } },
    { host_key: { algorithm: 'ssh-ed25519' } },
    { host_key: 'x' },
    { installed: { os: 'Linux', arch: '../x' } },
    { failed: { code: 'ERR_NOT_A_CODE', message: 'x' } },
    { failed: { code: 'toString', message: 'x' } },
    { failed: { code: 'ERR_BOOTSTRAP_AUTH' } },
    { step: 'copy', message: 'x', failed: { code: 'ERR_BOOTSTRAP_AUTH', message: 'x' } },
  ];
  for (const b of bad) t.throws(() => parseRelayEvent(b), { code: 'ERR_BAD_REQUEST' }, JSON.stringify(b) ?? 'undefined');
});

t.test('the server hands a relay its nodes\' tasks sealed to it and records what it reports', async (t) => {
  const dir = programDir(t);
  const config = loadServerConfig({
    overrides: {
      'general.data_dir': dir, 'general.listen': '127.0.0.1:0', 'jobs.sweep_interval': '100ms', 'lifecycle.sweep_interval': '1h',
      'bootstrap.package_dir': dir, 'bootstrap.enrol_poll': '50ms', 'bootstrap.enrol_timeout': '300ms',
      // Relay calls without a token here: authentication has its own tests (the end-to-end one).
      'identity.require_relay_token': false,
    },
  });
  const server = await startServer(config, silentLogger);
  t.teardown(() => server.close());
  const call = async (method: string, path: string, body?: unknown, admin = true): Promise<{ status: number; json: any }> => {
    const res = await fetch(`${server.url}${path}`, {
      method,
      headers: { ...(admin && { authorization: `Bearer ${server.adminToken}` }), ...(body !== undefined && { 'content-type': 'application/json' }) },
      ...(body !== undefined && { body: JSON.stringify(body) }),
    });
    const text = await res.text();
    return { status: res.status, json: text ? JSON.parse(text) : null };
  };
  const relay = await relayKeys(t, 'relay-a');
  for (const [id, certificate] of [['relay-a', relay.certPem], ['relay-b', (await relayKeys(t, 'relay-b')).certPem]]) {
    t.equal((await call('POST', '/api/1/nodes', { id, hostname: `${id}.test`, certificate, relay: true })).status, 201);
  }
  // relay-a hosts "lab" and posts what it found.
  t.equal((await call('POST', '/api/1/managers', { id: 'lab', type: 'static', provider: 'relay-a', config: { hosts: [] } })).status, 201);
  const instance = (n: number) => ({ source_id: `h${n}`, region: 'static', account_id: 'lab', hostname: `h${n}.lab`, address: '192.0.2.1', state: 'running', tags: {} });
  t.equal((await call('POST', '/relay-api/1/providers/relay-a/managers/lab/discovery', { instances: [instance(1), instance(2)] }, false)).status, 200);
  const nodes = (await call('GET', '/api/1/nodes?per_page=10&sort=hostname')).json.data as Array<{ id: string; hostname: string }>;
  const [h1, h2] = nodes.filter((n) => n.hostname.endsWith('.lab')).map((n) => n.id);
  t.ok(h1 && h2, 'the relay\'s discoveries are nodes');
  t.equal((await call('POST', '/api/1/credentials', { id: 'k', user: 'deploy', port: 2222, private_key: SSH_KEY, selectors: ['manager:lab'] })).status, 201);

  const job = (await call('POST', '/api/1/jobs', { name: 'b', type: 'bootstrap', nodes: [h1, h2], relay_url: 'https://job.example:3030' })).json.data.id as string;
  // The server's runner leaves them alone: they stay pending for their relay.
  const task = async (n: string) => (await call('GET', `/api/1/jobs/${job}/tasks/${n}`)).json.data;
  t.match(await task(h1!), { state: 'pending' });
  t.same((await call('POST', '/relay-api/1/bootstrap/relay-b/claim', { limit: 5 }, false)).json, { data: [] }, 'another relay gets none of them');
  t.match(await call('POST', '/relay-api/1/bootstrap/relay-a/claim', { limit: 5, extra: 1 }, false), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await call('POST', '/relay-api/1/bootstrap/relay-a/claim', { limit: 0 }, false), { status: 400 });

  const claimed = (await call('POST', '/relay-api/1/bootstrap/relay-a/claim', { limit: 5, agent_url: 'https://relay-a.example:3030' }, false)).json.data as RelayBootstrapTask[];
  t.same(claimed.map((c) => c.node_id).sort(), [h1, h2].sort());
  const c1 = claimed.find((c) => c.node_id === h1)!;
  t.match(c1, { job_id: job, host: '192.0.2.1', user: 'deploy', port: 2222, host_key: null, package: null, install_root: '/', sudo: 'sudo -n' });
  t.notMatch(JSON.stringify(claimed), /PRIVATE KEY|enrollment_secret/, 'no secret in clear');
  const secrets = JSON.parse(openWithKey(relay.keyPem, sealedTaskAad('relay-a', job, h1!), c1.sealed)) as SealedTaskSecrets;
  t.equal(secrets.private_key, SSH_KEY, 'the credential, sealed');
  t.match(secrets.agent_config, 'relay = "https://relay-a.example:3030"', 'the agent is told to talk to the relay');
  t.match(secrets.agent_config, /enrollment_secret = "[A-Za-z0-9_-]{32}"/);
  const policyKey = (await call('GET', '/api/1/keys/policy')).json.data.public_key as string;
  t.equal((parseToml(secrets.agent_config) as { policy?: { public_key_pem?: string } }).policy?.public_key_pem?.trim(), policyKey.trim(), 'the server\'s policy key is pinned, nothing trusted on first use');
  t.match(await task(h1!), { state: 'in_progress', relay: 'relay-a', message: 'started from relay relay-a' });
  t.same((await call('POST', '/relay-api/1/bootstrap/relay-a/claim', { limit: 5 }, false)).json, { data: [] }, 'claimed once');

  const post = (relayId: string, n: string, body: unknown) => call('POST', `/relay-api/1/bootstrap/${relayId}/tasks/${job}/${n}`, body, false);
  t.match(await post('relay-b', h1!, { step: 'connect', message: 'x' }), { status: 404, json: { error: { code: 'ERR_NOT_FOUND' } } }, 'not relay-b\'s task');
  t.same((await post('relay-a', h1!, { step: 'connect', message: 'connecting to 192.0.2.1:2222 as deploy' })).json, { data: { in_progress: true } });
  t.match(await task(h1!), { step: 'connect', message: 'connecting to 192.0.2.1:2222 as deploy' });
  const fp1 = `SHA256:${'A'.repeat(43)}`;
  t.same((await post('relay-a', h1!, { host_key: { algorithm: 'ssh-ed25519', fingerprint: fp1 } })).json, { data: { in_progress: true, accepted: true } }, 'first use: pinned');
  t.match((await call('GET', `/api/1/nodes/${h1}/host-key`)).json.data, { fingerprint: fp1, job_id: job });
  t.same((await post('relay-a', h1!, { host_key: { algorithm: 'ssh-ed25519', fingerprint: `SHA256:${'B'.repeat(43)}` } })).json, { data: { in_progress: true, accepted: false } }, 'another key is not');
  t.same((await post('relay-a', h1!, { failed: { code: 'ERR_BOOTSTRAP_NO_SUDO', message: '"sudo -n" wants a password' } })).json, { data: { in_progress: false } });
  t.match(await task(h1!), { state: 'failed', reason: 'no_sudo', step: 'connect', message: 'ERR_BOOTSTRAP_NO_SUDO: "sudo -n" wants a password' });
  t.same((await post('relay-a', h1!, { step: 'verify', message: 'late' })).json, { data: { in_progress: false } }, 'a final task takes no step');

  // h2: installed by the relay; the server waits for the enrolment and gives up at enrol_timeout.
  t.same((await post('relay-a', h2!, { installed: { os: 'Linux', arch: 'amd64' } })).json, { data: { in_progress: true } });
  t.match(await task(h2!), { step: 'enrol', message: 'waiting for its first inventory to relay relay-a' });
  const ended = await (async () => {
    for (let i = 0; i < 100; i++) {
      const x = await task(h2!);
      if (x.state !== 'in_progress') return x;
      await new Promise((r) => setTimeout(r, 50));
    }
    return task(h2!);
  })();
  t.match(ended, { state: 'failed', reason: 'enrol_timeout', step: 'enrol', relay: 'relay-a', message: /^ERR_BOOTSTRAP_ENROL_TIMEOUT/ });
});
