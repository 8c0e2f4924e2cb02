/**
 * `npm start` (scripts/quickstart.mjs): a server, a relay and an agent on loopback, and the shell
 * commands it prints for a newcomer to look at the result. Every printed command is run here in
 * bash, as a newcomer would paste it, and must succeed; then SIGTERM stops the whole demo.
 */
import { spawn } from 'node:child_process';
import { mkdir, symlink } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { createInterface } from 'node:readline';
import t from 'tap';
import { programCommand, programDir, ROOT } from '../helpers/programs.js';

const QUICKSTART = resolve(ROOT, 'scripts/quickstart.mjs');
const DONE = 'Server and relay keep running; Ctrl-C stops them.';

t.test('npm start runs the demo, every command it prints works, SIGTERM stops it all', async (t) => {
  const dir = programDir(t);
  const state = join(dir, 'qs');
  const proc = spawn(...programCommand(QUICKSTART, ['--dir', state, '--server-listen', '127.0.0.1:0', '--relay-listen', '127.0.0.1:0']), {
    stdio: ['ignore', 'pipe', 'pipe'],
  });
  const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
  t.teardown(async () => {
    if (proc.exitCode === null) proc.kill('SIGTERM');
    await exited;
  });
  let stderr = '';
  proc.stderr!.on('data', (d: Buffer) => (stderr += d.toString()));
  const lines: string[] = [];
  const finished = await new Promise<boolean>((res) => {
    const timer = setTimeout(() => res(false), 120_000);
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      lines.push(line);
      if (line === DONE) {
        clearTimeout(timer);
        res(true);
      }
    });
    void exited.then(() => {
      clearTimeout(timer);
      res(false);
    });
  });
  t.ok(finished, `the demo came up and printed its commands (stderr: ${stderr})`);
  if (!finished) return;
  const text = lines.join('\n');
  const serverUrl = /^server (http:\/\/127\.0\.0\.1:\d+), relay (http:\/\/127\.0\.0\.1:\d+)/m.exec(text);
  t.ok(serverUrl, 'it says where the server and the relay listen');
  const nodeId = /^node (\S+) is accepted$/m.exec(text)?.[1];
  t.ok(nodeId, 'the agent enrolled and was accepted');
  t.match(text, /config [0-9a-f]+: 1 repaired, 0 errors, compliance 100%/, "the second run applied the rule's directive");
  t.equal(stderr, '', 'nothing on stderr');

  // The commands, as printed: indented lines. `listen` runs until stopped: left out.
  const commands = lines.filter((l) => l.startsWith('  ') && !/ listen /.test(l)).map((l) => l.trim());
  t.ok(commands.length >= 15, `${commands.length} commands printed`);
  // They name the programs by paths relative to the checkout (server/…, agent/…); a directory
  // with links to those two keeps what they write (policy export's ./policy) out of the checkout.
  const work = join(dir, 'work');
  await mkdir(work);
  for (const p of ['server', 'agent']) await symlink(join(ROOT, p), join(work, p));
  const script = commands.map((c, i) => `echo "::cmd ${i}::"\n${c}\necho "::rc $?::"`).join('\n');
  const out = await new Promise<string>((res, rej) => {
    const sh = spawn('/usr/bin/env', ['-u', 'NODE_OPTIONS', 'bash', '-c', script], { cwd: work, stdio: ['ignore', 'pipe', 'pipe'] });
    let o = '';
    sh.stdout.on('data', (d: Buffer) => (o += d.toString()));
    sh.stderr.on('data', (d: Buffer) => (o += d.toString()));
    const timer = setTimeout(() => {
      sh.kill('SIGKILL');
      rej(new Error(`the printed commands did not finish: ${o}`));
    }, 120_000);
    sh.once('exit', () => {
      clearTimeout(timer);
      res(o);
    });
  });
  const results = [...out.matchAll(/::cmd (\d+)::\n([\s\S]*?)::rc (\d+)::/g)].map((m) => ({ cmd: commands[Number(m[1])]!, out: m[2]!, rc: Number(m[3]) }));
  t.equal(results.length, commands.length, 'every command ran');
  for (const r of results) {
    t.equal(r.rc, 0, `${r.cmd} → exit 0 (${r.out.slice(0, 300)})`);
    if (r.cmd.startsWith('curl') && !r.cmd.includes('format=csv')) {
      let body: { error?: unknown } | undefined;
      try {
        body = JSON.parse(r.out) as { error?: unknown };
      } catch {
        body = undefined;
      }
      t.ok(body && !body.error, `${r.cmd} → JSON without an error (${r.out.slice(0, 300)})`);
    }
  }
  const byCmd = (re: RegExp) => results.find((r) => re.test(r.cmd))?.out ?? '';
  t.match(byCmd(/nodes list -q 'os\.name = \w+'/), nodeId!, "the filter example finds the demo's node");
  const csv = byCmd(/format=csv/);
  t.match(csv, /^node_id,hostname,/, 'compliance as CSV, with its header');
  t.match(csv, new RegExp(`^${nodeId},`, 'm'), 'compliance as CSV lists the node');
  t.match(byCmd(/\/runs\?reports=true/), /"reports":\[/, 'the runs come with their reports');
  t.match(byCmd(/ changes list$/), /quickstart-motd/, 'the change the agent made is listed');

  proc.kill('SIGTERM');
  t.equal(await exited, 0, 'SIGTERM stops the demo');
  const [, server, relay] = serverUrl!;
  for (const url of [server!, relay!]) {
    const stopped = await (async () => {
      const until = Date.now() + 30_000;
      while (Date.now() < until) {
        const up = await fetch(url).then(() => true, () => false);
        if (!up) return true;
        await new Promise((r) => setTimeout(r, 50));
      }
      return false;
    })();
    t.ok(stopped, `${url} no longer answers: the server and the relay went with it`);
  }
});
