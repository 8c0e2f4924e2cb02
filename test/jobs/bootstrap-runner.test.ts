/**
 * The bootstrap runner inside a real server process, against hosts that are not SSH servers:
 * nothing here needs sshd. A host that never answers holds its task at the connect step; stopping
 * the server ends that connection at once instead of waiting out bootstrap.connect_timeout, and
 * leaves the task to the job's deadline rather than failing it for a reason it did not have.
 * A port nothing listens on fails with unreachable.
 */
import { createServer, type Socket } from 'node:net';
import { generateKeyPairSync } from 'node:crypto';
import t, { type Test } from 'tap';
import { openRegistry } from '@capstan/server/registry/open';
import { join } from 'node:path';
import { waitFor } from '../helpers/programs.js';
import { serverWithApi } from '../helpers/admin-app.js';

const KEY = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey;

async function setup(t: Test) {
  const { dir, server, api, close } = await serverWithApi(t, (dir) => ({ 'bootstrap.connect_timeout': '60s', 'bootstrap.package_dir': dir }));
  t.equal((await api('POST', '/api/1/managers', { id: 'lab', type: 'static', config: { hosts: [{ hostname: 'h1', address: '127.0.0.1' }] } })).status, 201);
  t.equal((await api('POST', '/api/1/managers/lab/poll')).status, 200);
  const nodeId = (await server.store.listNodes({ page: 1, per_page: 10 })).data[0]!.id;
  return { dir, server, api, nodeId, close };
}

t.test('stopping the server ends a connection in progress at once and fails no task for it', async (t) => {
  // A host that accepts TCP and never says a word (no SSH banner).
  const sockets = new Set<Socket>();
  const silent = createServer((s) => { sockets.add(s); s.on('error', () => undefined); });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', () => r()));
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close(); });
  const port = (silent.address() as { port: number }).port;
  const { dir, server, api, nodeId, close } = await setup(t);
  t.equal((await api('POST', '/api/1/credentials', { id: 'k', user: 'deploy', port, private_key: KEY, selectors: ['*'] })).status, 201);
  const job = (await api('POST', '/api/1/jobs', { name: 'b', type: 'bootstrap', nodes: [nodeId], relay_url: 'http://127.0.0.1:1' })).json.data.id as string;
  await waitFor(async () => ((await server.store.jobs.getTask(job, nodeId))?.step === 'connect' ? true : undefined), 'the connect step');
  await waitFor(async () => (sockets.size > 0 ? true : undefined), 'the TCP connection');
  const started = Date.now();
  await close();
  t.ok(Date.now() - started < 20_000, `stopped in ${Date.now() - started} ms, well within connect_timeout (60 s)`);
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  t.match(await store.jobs.getTask(job, nodeId), { state: 'in_progress', step: 'connect' }, 'left to the job\'s deadline, not failed as unreachable');
});

t.test('a port nothing listens on fails with unreachable', async (t) => {
  const probe = createServer();
  await new Promise<void>((r) => probe.listen(0, '127.0.0.1', () => r()));
  const port = (probe.address() as { port: number }).port;
  await new Promise<void>((r) => probe.close(() => r()));
  const { server, api, nodeId } = await setup(t);
  t.equal((await api('POST', '/api/1/credentials', { id: 'k', user: 'deploy', port, private_key: KEY, selectors: ['*'] })).status, 201);
  const job = (await api('POST', '/api/1/jobs', { name: 'b', type: 'bootstrap', nodes: [nodeId], relay_url: 'http://127.0.0.1:1' })).json.data.id as string;
  const task = await waitFor(async () => {
    const x = await server.store.jobs.getTask(job, nodeId);
    return x?.state === 'failed' ? x : undefined;
  }, 'the task to fail');
  t.match(task, { reason: 'unreachable', step: 'connect', message: /^ERR_BOOTSTRAP_CONNECT: cannot connect to 127\.0\.0\.1:\d+: connect ECONNREFUSED/ });
});
