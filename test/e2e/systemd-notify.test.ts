/**
 * Under systemd, the server and the relay ping the watchdog (WATCHDOG=1 at half of WatchdogSec,
 * which systemd passes as WATCHDOG_USEC) and say STOPPING=1 on SIGTERM. Neither did: a unit with
 * WatchdogSec killed them after one interval, and a stop looked like a hang until it ended.
 * And a SIGTERM sent as soon as READY=1 arrives stops them cleanly (exit 0): their handlers used to
 * be installed only once the notify call returned, so such a SIGTERM killed them outright.
 * The notify socket is a unix datagram socket held by python3 (Node has none), and the messages
 * travel through the real systemd-notify binary; without either the test skips with the reason.
 */
import { spawn, spawnSync } from 'node:child_process';
import { existsSync, mkdtempSync, rmSync } from 'node:fs';
import { readFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import t, { type Test } from 'tap';
import { BIN, ROOT, startProgram, waitFor, programDir } from '../helpers/programs.js';

const missing = spawnSync('python3', ['--version']).status !== 0
  ? 'python3 is not installed'
  : !existsSync('/usr/bin/systemd-notify') && spawnSync('systemd-notify', ['--version']).error ? 'systemd-notify is not installed' : undefined;
if (missing && process.env.CI === 'true') t.fail(missing);

/** Every datagram sent to a fresh socket, one string each (newlines as spaces). */
async function notifySocket(t: Test): Promise<{ path: string; messages: string[] }> {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-notify-'));
  const path = join(dir, 'notify');
  const py = spawn('python3', ['-u', '-c', `
import socket, sys
s = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
s.bind(sys.argv[1])
print("listening")
while True:
    print(s.recv(4096).decode().replace("\\n", " "))
`, path], { stdio: ['ignore', 'pipe', 'ignore'] });
  t.teardown(() => {
    py.kill();
    rmSync(dir, { recursive: true, force: true });
  });
  const messages: string[] = [];
  const lines = createInterface({ input: py.stdout! });
  await new Promise<void>((res, rej) => {
    py.once('exit', (code) => rej(new Error(`the notify socket's python exited with ${code}`)));
    lines.on('line', (line) => (line === 'listening' ? res() : messages.push(line)));
  });
  return { path, messages };
}

const programs: Array<[string, string, (dir: string) => string[]]> = [
  ['capstan-server', BIN.server, (dir) => ['serve', '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'server'), '--log-level', 'warn']],
  ['capstan-relayd', BIN.relayd, (dir) => ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'warn']],
];

for (const [name, bin, args] of programs) {
  t.test(`${name}: WATCHDOG=1 at half the interval, STOPPING=1 on SIGTERM`, { skip: missing ?? false }, async (t) => {
    const sock = await notifySocket(t);
    const dir = programDir(t);
    // 600 ms watchdog: a ping every 300 ms.
    Object.assign(process.env, { NOTIFY_SOCKET: sock.path, WATCHDOG_USEC: '600000' });
    const running = await startProgram(bin, args(dir)).finally(() => {
      delete process.env.NOTIFY_SOCKET;
      delete process.env.WATCHDOG_USEC;
    });
    let stopped = false;
    t.teardown(() => (stopped ? undefined : running.stop()));
    await waitFor(async () => (sock.messages.some((m) => m.includes('READY=1')) ? true : undefined), 'READY=1');
    await waitFor(async () => (sock.messages.filter((m) => /(^| )WATCHDOG=1( |$)/.test(m)).length >= 3 ? true : undefined), 'three watchdog pings', 10_000);
    t.notOk(sock.messages.some((m) => m.includes('STOPPING=1')), 'not stopping yet');
    stopped = true;
    t.equal(await running.stop(), 0, 'SIGTERM: exit 0');
    await waitFor(async () => (sock.messages.some((m) => /(^| )STOPPING=1( |$)/.test(m)) ? true : undefined), 'STOPPING=1', 10_000);
  });

  t.test(`${name}: without WATCHDOG_USEC, no pings`, { skip: missing ?? false }, async (t) => {
    const sock = await notifySocket(t);
    const dir = programDir(t);
    process.env.NOTIFY_SOCKET = sock.path;
    const running = await startProgram(bin, args(dir)).finally(() => delete process.env.NOTIFY_SOCKET);
    await waitFor(async () => (sock.messages.some((m) => m.includes('READY=1')) ? true : undefined), 'READY=1');
    t.equal(await running.stop(), 0);
    await waitFor(async () => (sock.messages.some((m) => m.includes('STOPPING=1')) ? true : undefined), 'STOPPING=1', 10_000);
    t.notOk(sock.messages.some((m) => m.includes('WATCHDOG=1')), 'no watchdog asked for, none sent');
  });
}

t.test('the units ask for the watchdog', async (t) => {
  for (const unit of ['capstan-server.service', 'capstan-relayd.service']) {
    t.match(await readFile(resolve(ROOT, 'packaging/systemd', unit), 'utf8'), /^WatchdogSec=\d+s$/m, unit);
  }
});
