/**
 * capstan-server as a service: it tells systemd READY through NOTIFY_SOCKET (and starts all the
 * same when nobody listens there), its lifecycle sweep runs on its own and shows in the API and
 * /metrics, SIGTERM stops it cleanly with exit 0, and lifecycle settings that contradict each
 * other exit 2.
 */
import { spawn } from 'node:child_process';
import { mkdtempSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import { compressSync, createNodeIdentity, inventoryFileName, signSmime } from '@capstan/shared';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir } from '../helpers/programs.js';

/** A unix datagram socket that prints the first message it gets (Node has no unix datagram sockets). */
function notifyListener(path: string): Promise<{ message: Promise<string>; stop: () => void } | null> {
  const py = spawn('python3', ['-c', `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("listening", flush=True)
s.settimeout(30)
print(s.recv(4096).decode().replace("\\n", " "), flush=True)
`, path], { stdio: ['ignore', 'pipe', 'ignore'] });
  return new Promise((resolve) => {
    py.once('error', () => resolve(null));
    const lines = createInterface({ input: py.stdout! });
    let message: (m: string) => void;
    const got = new Promise<string>((r) => (message = r));
    lines.on('line', (line) => {
      if (line === 'listening') resolve({ message: got, stop: () => py.kill() });
      else message(line);
    });
    py.once('exit', () => resolve(null));
  });
}

t.test('READY to systemd, a sweep that runs by itself, metrics, and a clean SIGTERM', async (t) => {
  const sockDir = mkdtempSync(join(tmpdir(), 'capstan-notify-'));
  t.teardown(() => rmSync(sockDir, { recursive: true, force: true }));
  const listener = await notifyListener(join(sockDir, 'notify'));
  const dir = programDir(t, {
    'server.toml': '[lifecycle]\nrun_interval = "1s"\nmissed_runs = 1\nmissing_after = "2s"\npurge_after = "2s"\nsweep_interval = "1s"\n',
  });
  if (listener) process.env.NOTIFY_SOCKET = join(sockDir, 'notify');
  else t.comment('python3 is not available: READY is not checked, only that the server starts');
  const server = await startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'server'), '--log-level', 'warn']);
  delete process.env.NOTIFY_SOCKET;
  let stopped = false;
  t.teardown(async () => {
    listener?.stop();
    if (!stopped) await server.stop();
  });
  if (listener) t.match(await listener.message, /READY=1 .*STATUS=listening on http:\/\/127\.0\.0\.1:\d+ .*MAINPID=\d+/);

  // A node that enrols, then falls silent: unreachable, missing, then purged, by the sweep alone.
  const id = 'deadbeef-0000-4000-8000-000000000001';
  const identity = createNodeIdentity(id, { bits: 1024 });
  const doc = { node_id: id, hostname: 'quiet', certificate: identity.certPem, agent_version: '0', policy_server: 'root', os: { name: 'd', version: '1', kernel: 'k', arch: 'a' } };
  const name = inventoryFileName(id, new Date(), 'zstd');
  const put = await fetch(`${server.url}/inventories/${encodeURIComponent(name)}`, { method: 'PUT', body: compressSync(signSmime(Buffer.from(JSON.stringify(doc)), identity), 'zstd') });
  t.equal(put.status, 201);
  const api = adminClient(server.url, (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim());
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}`)).status === 200 ? true : undefined), 'the node to enrol');
  const gone = await waitFor(async () => {
    const lc = (await api('GET', '/api/1/lifecycle')).json.data;
    return lc.purged_nodes === 1 ? lc : undefined;
  }, 'the sweep to purge the silent node', 30_000);
  t.match(gone.last_sweep, { started_at: /Z$/ });
  t.equal((await api('GET', `/api/1/nodes/${id}`)).status, 404);
  const metrics = await (await fetch(`${server.url}/metrics`)).text();
  t.match(metrics, /capstan_server_lifecycle_total\{what="purged"\} 1/);
  t.match(metrics, /capstan_server_lifecycle_total\{what="missing"\} 1/);
  t.match(metrics, /capstan_server_ingested_files_total\{kind="inventories",outcome="done"\} 1/);

  stopped = true;
  t.equal(await server.stop(), 0, 'SIGTERM: exit 0 after finishing what was in flight');
});

t.test('a NOTIFY_SOCKET nobody listens on does not stop the server', async (t) => {
  const dir = programDir(t);
  process.env.NOTIFY_SOCKET = join(dir, 'nobody-here');
  const server = await startProgram(BIN.server, ['serve', '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'server'), '--log-level', 'error']);
  delete process.env.NOTIFY_SOCKET;
  t.teardown(() => server.stop());
  t.equal((await fetch(`${server.url}/uuid`)).status, 200);
});

t.test('contradicting lifecycle settings and a short secret are configuration errors (exit 2)', async (t) => {
  const dir = programDir(t, {
    'early.toml': '[lifecycle]\nrun_interval = "10m"\nmissed_runs = 6\nmissing_after = "30m"\n',
    'secret.toml': '[enrollment]\nsecret = "short"\n',
    'good.toml': '[enrollment]\nauto_accept_hostnames = "*.lab.example.com"\nsecret = "a long enough shared secret"\n',
  });
  for (const [file, code] of [['early.toml', 2], ['secret.toml', 2], ['good.toml', 0]] as const) {
    const r = await runProgram(BIN.server, ['serve', '--config', join(dir, file), '--data-dir', dir, '--test']);
    t.equal(r.code, code, `${file}: ${r.stderr}`);
  }
  const r = await runProgram(BIN.server, ['serve', '--config', join(dir, 'secret.toml'), '--data-dir', dir, '--test']);
  t.match(r.stderr, /enrollment\.secret/);
  t.notMatch(r.stderr, /short/, 'the secret itself is not echoed');
});
