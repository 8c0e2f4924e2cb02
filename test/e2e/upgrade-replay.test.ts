/**
 * Version skew: uploads recorded from Capstan 0.1 agents (protocol 1, kept as fixtures under
 * test/fixtures/uploads-0.1/) are accepted by the current server, as an N-1 agent's would be;
 * a peer announcing a version outside the window gets a coded error naming the side to upgrade.
 */
import { readFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import t from 'tap';
import { CAPSTAN_VERSION } from '@capstan/shared';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';

const FIX = resolve(import.meta.dirname, '../fixtures/uploads-0.1');

t.test('0.1 uploads are accepted by this server', async (t) => {
  const manifest = JSON.parse(await readFile(join(FIX, 'MANIFEST.json'), 'utf8')) as { node_id: string; inventory: string; run_log: string; counts: Record<string, number> };
  const dir = programDir(t);
  const { server, api } = await startServer(t, join(dir, 'server'));
  const put = async (kind: string, name: string) =>
    fetch(`${server.url}/${kind}/${encodeURIComponent(name)}`, {
      method: 'PUT',
      body: await readFile(join(FIX, name)),
      headers: { 'user-agent': 'capstan-agent/0.1.0', 'x-capstan-protocol': '1' },
    });
  t.equal((await put('inventories', manifest.inventory)).status, 201);
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${manifest.node_id}`)).status === 200 ? true : undefined), 'the 0.1 node to register');
  t.equal((await api('POST', `/api/1/nodes/${manifest.node_id}/accept`)).status, 200);
  t.equal((await put('reports', manifest.run_log)).status, 201);
  const runs = await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${manifest.node_id}/runs`);
    return r.json.total === 1 ? r.json.data : undefined;
  }, 'the 0.1 run log to be stored');
  t.same(runs[0].counts, manifest.counts);

  const [major, minor] = CAPSTAN_VERSION.split('.').map(Number);
  const tooNew = await fetch(`${server.url}/reports/${encodeURIComponent(manifest.run_log)}`, {
    method: 'PUT', body: 'x', headers: { 'user-agent': `capstan-agent/${major}.${minor! + 1}.0` },
  });
  t.equal(tooNew.status, 400);
  t.equal(((await tooNew.json()) as { error: { code: string } }).error.code, 'ERR_PEER_TOO_NEW');
  const badProtocol = await fetch(`${server.url}/reports/${encodeURIComponent(manifest.run_log)}`, {
    method: 'PUT', body: 'x', headers: { 'user-agent': `capstan-agent/${CAPSTAN_VERSION}`, 'x-capstan-protocol': '0' },
  });
  t.equal(badProtocol.status, 426);
  t.equal(((await badProtocol.json()) as { error: { code: string } }).error.code, 'ERR_PEER_TOO_OLD');
});

t.test('the relay refuses Capstan peers outside the version window too', async (t) => {
  const dir = programDir(t);
  const relay = await startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'error']);
  t.teardown(() => relay.stop());
  const [major] = CAPSTAN_VERSION.split('.').map(Number);
  const old = await fetch(`${relay.url}/reports/${encodeURIComponent('2026-11-22T10:00:00+00:00@n1.log')}`, {
    method: 'PUT', body: 'x', headers: { 'user-agent': `capstan-agent/${major! + 1}.0.0` },
  });
  t.equal(old.status, 400);
  t.equal(((await old.json()) as { error: { code: string } }).error.code, 'ERR_PEER_TOO_NEW');
  const rudder = await fetch(`${relay.url}/rudder/relay-api/1/system/info`, { headers: { 'user-agent': 'curl/8.0' } });
  t.equal(rudder.status, 200, 'non-Capstan clients keep working');
});

t.test('a server refuses to start on a database newer than it knows (exit 3)', async (t) => {
  const dir = programDir(t);
  const first = await startProgram(BIN.server, ['serve', '--listen', '127.0.0.1:0', '--data-dir', dir, '--log-level', 'error']);
  await first.stop();
  const { default: Database } = await import('better-sqlite3');
  const db = new Database(join(dir, 'capstan.db'));
  db.prepare('INSERT INTO schema_version (version, applied_at) VALUES (?, ?)').run(9999, new Date().toISOString());
  db.close();
  const r = await runProgram(BIN.server, ['serve', '--listen', '127.0.0.1:0', '--data-dir', dir, '--log-level', 'error']);
  t.equal(r.code, 3);
  t.match(r.stderr, /newer/i);
});
