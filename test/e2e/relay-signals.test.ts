/**
 * The real relayd's process behaviour: SIGTERM stops accepting but lets an upload in flight
 * finish (its 2xx means it is on disk) and exits 0; SIGHUP reloads the nodes list; readiness
 * reaches systemd through systemd-notify, and its absence does not matter; --test checks the files
 * a configuration names.
 */
import { execFileSync, spawn } from 'node:child_process';
import { existsSync } from 'node:fs';
import { readdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { createInterface } from 'node:readline';
import { Readable } from 'node:stream';
import t from 'tap';
import { Pool } from 'undici';
import { BIN, runProgram, programDir } from '../helpers/programs.js';
import { CountingUpstream, runName, until } from '../relayd/helpers/upstream.js';
import { startRelayd } from '../relayd/helpers/proc.js';

t.test('SIGTERM: stop accepting, finish the upload in flight, exit 0', async (t) => {
  const dir = programDir(t);
  const relay = await startRelayd(['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'spool'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'error']);
  t.teardown(() => relay.signal('SIGKILL'));
  const pool = new Pool(relay.url, { connections: 1 });
  t.teardown(() => pool.close().catch(() => {}));
  let release!: () => void;
  const gate = new Promise<void>((r) => (release = r));
  let started!: () => void;
  const midway = new Promise<void>((r) => (started = r));
  const body = Readable.from((async function* () {
    yield Buffer.alloc(1000, 1);
    started();
    await gate;
    yield Buffer.alloc(1000, 2);
  })());
  const put = pool.request({ method: 'PUT', path: `/reports/${encodeURIComponent(runName('n1', 1))}`, body, headers: { 'content-length': '2000' } });
  await midway;
  await new Promise((r) => setTimeout(r, 100)); // let the first half reach the relay
  relay.proc.kill('SIGTERM');
  await until(async () => {
    try {
      await fetch(`${relay.url}/uuid`);
      return undefined;
    } catch {
      return true; // refused: no longer accepting
    }
  }, 'the listener to close');
  t.equal(relay.proc.exitCode, null, 'still running while an upload is in flight');
  release();
  const res = await put;
  await res.body.dump();
  t.equal(res.statusCode, 201, 'the upload in flight completed');
  t.equal(await relay.exited, 0, 'then it exits 0');
  t.same(await readdir(join(dir, 'spool', 'incoming', 'reports')), [runName('n1', 1)], 'and the file is on disk');
});

t.test('SIGHUP reloads the nodes list without a restart', async (t) => {
  const up = await new CountingUpstream().start();
  t.teardown(() => up.stop());
  const dir = programDir(t, { 'nodes.json': JSON.stringify({ a: { 'policy-server': 'root' } }) });
  const relay = await startRelayd(['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'spool'), '--upstream', up.url, '--nodes-list', join(dir, 'nodes.json'), '--log-level', 'error']);
  t.teardown(() => relay.signal('SIGTERM'));
  const put = (node: string, i: number) => fetch(`${relay.url}/reports/${encodeURIComponent(runName(node, i))}`, { method: 'PUT', body: `${node}${i}` });
  await put('b', 1);
  await until(async () => ((await readdir(join(dir, 'spool', 'failed', 'reports'))).length === 2 ? true : undefined), 'b refused as unknown');
  await writeFile(join(dir, 'nodes.json'), JSON.stringify({ a: { 'policy-server': 'root' }, b: { 'policy-server': 'root' } }));
  relay.proc.kill('SIGHUP');
  await until(async () => {
    const s = ((await (await fetch(`${relay.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
    return s.nodes_list.nodes === 2 ? true : undefined;
  }, 'the reloaded list');
  await put('b', 2);
  await until(() => (up.received.length === 1 ? true : undefined), 'b forwarded after the reload');
  t.equal(up.received[0]!.path, `/reports/${runName('b', 2)}`);
});

t.test('sd_notify: READY=1 and STATUS reach NOTIFY_SOCKET; a missing systemd-notify is ignored', async (t) => {
  const dir = programDir(t);
  const python = (() => {
    try {
      execFileSync('python3', ['--version']);
      return true;
    } catch {
      return false;
    }
  })();
  if (!python || !existsSync('/usr/bin/systemd-notify')) {
    t.comment('skipping the socket check: python3 or systemd-notify not installed');
  } else {
    // AF_UNIX paths are limited to 108 bytes: the test directory's path is too long for one.
    const sockDir = await mkdtemp(join(tmpdir(), 'capstan-notify-'));
    t.teardown(() => rm(sockDir, { recursive: true, force: true }));
    const sock = join(sockDir, 'notify.sock');
    // A datagram socket like systemd's, printing what it receives.
    const listener = spawn('python3', ['-c', `import socket,sys\ns=socket.socket(socket.AF_UNIX,socket.SOCK_DGRAM)\ns.bind(${JSON.stringify(sock)})\nprint('bound',flush=True)\nwhile True: print(repr(s.recv(4096)),flush=True)`]);
    t.teardown(() => listener.kill());
    const lines: string[] = [];
    createInterface({ input: listener.stdout }).on('line', (l) => lines.push(l));
    await until(() => (lines.includes('bound') ? true : undefined), 'the notify socket');
    const relay = await startRelayd(['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'a'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'error'], { env: { ...process.env, NOTIFY_SOCKET: sock } });
    t.teardown(() => relay.signal('SIGTERM'));
    const ready = await until(() => lines.find((l) => l.includes('READY=1')), 'READY=1');
    t.match(ready, /STATUS=listening on http:\/\/127\.0\.0\.1:\d+/);
    t.match(ready, new RegExp(`MAINPID=${relay.proc.pid}`));
  }
  const noBinary = await startRelayd(['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'b'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'error'], {
    env: { ...process.env, NOTIFY_SOCKET: join(dir, 'nobody-listens.sock'), PATH: dir },
  });
  t.ok(noBinary.url, 'starts without systemd-notify on PATH');
  t.equal(await noBinary.signal('SIGTERM'), 0);
});

t.test('--test checks the files a configuration names and exits 2 on a problem', async (t) => {
  const dir = programDir(t, {
    'nodes.json': '{"a":{"policy-server":"root"}}',
    'broken.json': '[1,2]',
    'ok.toml': '[general]\nnodes_list_file = "NODES"\n',
    'bad-list.toml': '[general]\nnodes_list_file = "BROKEN"\n',
    'no-key.toml': '[tls]\ncert_file = "/nonexistent.pem"\n',
    'missing-cert.toml': '[tls]\ncert_file = "/nonexistent.pem"\nkey_file = "/nonexistent.key"\n',
    'old-tls.toml': '[tls]\nmin_version = "TLSv1.1"\n',
  });
  const fix = async (f: string) => {
    const { readFile } = await import('node:fs/promises');
    await writeFile(join(dir, f), (await readFile(join(dir, f), 'utf8')).replace('NODES', join(dir, 'nodes.json')).replace('BROKEN', join(dir, 'broken.json')));
    return join(dir, f);
  };
  const ok = await runProgram(BIN.relayd, ['--config', await fix('ok.toml'), '--test']);
  t.equal(ok.code, 0, ok.stderr);
  t.match(ok.stdout, /configuration ok/);
  for (const [file, why] of [
    ['bad-list.toml', /must be an object keyed by node id/],
    ['no-key.toml', /tls.cert_file and tls.key_file must be given together/],
    ['missing-cert.toml', /cannot read tls.cert_file/],
    ['old-tls.toml', /tls.min_version must be "TLSv1.2" or "TLSv1.3"/],
  ] as const) {
    const r = await runProgram(BIN.relayd, ['--config', await fix(file), '--test']);
    t.equal(r.code, 2, file);
    t.match(r.stderr, why, file);
  }
});
