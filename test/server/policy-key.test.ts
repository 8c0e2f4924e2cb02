/**
 * Policy key rotation on the server: the API and the CLI make a new key active, endorsed by the
 * previous one; the chain is published with the key and with every bundle; bundles are signed by
 * the new key and their ETag changes; a running server picks up a rotation made by the CLI.
 */
import { stat } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { followEndorsements, silentLogger, verifyBundle } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { openRegistry } from '@capstan/server/registry/open';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { ensurePolicyKey, POLICY_KEY_CHAIN_FILE, POLICY_KEY_FILE } from '@capstan/server/policy/key';
import { BIN, runProgram, programDir } from '../helpers/programs.js';
import { adminApp } from '../helpers/admin-app.js';

const TOKEN = 'z'.repeat(32);

t.test('rotation through the API: endorsed chain, new signatures, new ETags', async (t) => {
  const { dir, store, key, domain, app } = await adminApp(t);
  const api = async (method: 'GET' | 'POST' | 'PUT', url: string, body?: unknown, auth = `Bearer ${TOKEN}`) => {
    const res = await app.inject({ method, url, headers: { authorization: auth, ...(body !== undefined && { 'content-type': 'application/json' }) }, ...(body !== undefined && { payload: JSON.stringify(body) }) });
    return { status: res.statusCode, json: res.body ? JSON.parse(res.body) : null, etag: res.headers.etag };
  };
  await store.createNode({ id: 'n1', hostname: 'web-1' });
  await api('POST', '/api/1/directives', { id: 'motd', name: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'x\n' } });
  await api('POST', '/api/1/groups', { id: 'g', nodes: ['n1'] });
  await api('POST', '/api/1/rules', { id: 'r', directives: ['motd'], groups: ['g'] });

  const oldPin = { keyId: key.keyId, publicKeyPem: key.publicKeyPem };
  const before = await api('GET', '/policies/n1/rules', undefined, '');
  t.equal(before.status, 200);
  t.notOk(before.json.endorsements, 'no rotation yet, no chain');
  t.same((await api('GET', '/api/1/keys/policy', undefined, '')).json.data.endorsements, []);

  t.equal((await api('POST', '/api/1/keys/policy/rotate', undefined, 'Bearer wrong')).status, 401, 'admin only');
  const rot = await api('POST', '/api/1/keys/policy/rotate');
  t.equal(rot.status, 200);
  t.equal(rot.json.data.previous_key_id, oldPin.keyId);
  t.not(rot.json.data.key_id, oldPin.keyId);
  t.equal(key.keyId, rot.json.data.key_id, 'the running keyring signs with the new key at once');

  const pub = (await api('GET', '/api/1/keys/policy', undefined, '')).json.data;
  t.equal(pub.key_id, rot.json.data.key_id);
  t.equal(followEndorsements(oldPin, pub.endorsements, pub.key_id).publicKeyPem, pub.public_key, 'the published chain leads from the old key to the new one');

  const after = await api('GET', '/policies/n1/rules', undefined, '');
  t.equal(after.json.key_id, rot.json.data.key_id, 'bundles are signed by the new key');
  t.not(after.etag, before.etag, 'and carry a new ETag, so no cache answers 304 with the old signature');
  t.equal((await api('GET', '/policies/n1/rules', undefined, '')).etag, after.etag, 'stable until the next change');
  t.throws(() => verifyBundle(after.json, oldPin, 'n1'), { code: 'ERR_POLICY_SIGNATURE' }, 'the old pin alone does not verify it');
  const next = followEndorsements(oldPin, after.json.endorsements, after.json.key_id);
  t.equal(verifyBundle(after.json, next, 'n1').node_id, 'n1', 'the chain in the bundle does');

  t.equal((await stat(join(dir, POLICY_KEY_FILE))).mode & 0o777, 0o600, 'the new key file is 0600');
  const reopened = await ensurePolicyKey(dir);
  t.equal(reopened.keyId, rot.json.data.key_id, 'a restart keeps the rotated key');
  t.equal(reopened.endorsements().length, 1);
});

t.test('capstan-server policy-key rotate: offline, and a running keyring notices', async (t) => {
  const dir = programDir(t);
  const running = await ensurePolicyKey(dir);
  const first = running.keyId;
  const ran = await runProgram(BIN.server, ['policy-key', 'rotate', '--data-dir', dir, '--json']);
  t.equal(ran.code, 0, ran.stderr);
  const out = JSON.parse(ran.stdout) as { data: { key_id: string; previous_key_id: string } };
  t.equal(out.data.previous_key_id, first);
  // The running keyring checks the key file every few seconds: poll, bounded.
  const end = Date.now() + 10_000;
  while (running.keyId === first && Date.now() < end) await new Promise((r) => setTimeout(r, 100));
  t.equal(running.keyId, out.data.key_id, 'picked up without a restart');
  t.equal(running.endorsements().length, 1);
  const shown = await runProgram(BIN.server, ['policy-key', 'show', '--data-dir', dir, '--json']);
  t.equal((JSON.parse(shown.stdout) as { data: { key_id: string } }).data.key_id, out.data.key_id);
  t.ok((await stat(join(dir, POLICY_KEY_CHAIN_FILE))).isFile());
});
