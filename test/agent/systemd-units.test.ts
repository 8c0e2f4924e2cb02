/** The agent's systemd units: a oneshot service and a 5-minute timer with a fixed random splay. */
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';

const UNITS = resolve(import.meta.dirname, '../../packaging/systemd');
const run = promisify(execFile);

t.test('timer and service say what the fleet needs', async (t) => {
  const timer = await readFile(join(UNITS, 'capstan-agent.timer'), 'utf8');
  t.match(timer, /^OnUnitActiveSec=5min$/m);
  t.match(timer, /^RandomizedDelaySec=\S+$/m);
  t.match(timer, /^FixedRandomDelay=true$/m);
  const service = await readFile(join(UNITS, 'capstan-agent.service'), 'utf8');
  t.match(service, /^Type=oneshot$/m);
  t.match(service, /^ExecStart=\/usr\/bin\/capstan-agent run /m);
});

t.test('systemd-analyze verify accepts both units', async (t) => {
  const probe = await run('systemd-analyze', ['--version']).catch(() => null);
  if (!probe) {
    t.comment('skipping: systemd-analyze is not installed here');
    return;
  }
  const dir = t.testdir();
  // verify checks that ExecStart exists: point it at a binary that does, the rest unchanged.
  const service = (await readFile(join(UNITS, 'capstan-agent.service'), 'utf8')).replace('/usr/bin/capstan-agent', process.execPath);
  await writeFile(join(dir, 'capstan-agent.service'), service);
  await writeFile(join(dir, 'capstan-agent.timer'), await readFile(join(UNITS, 'capstan-agent.timer'), 'utf8'));
  const r = await run('systemd-analyze', ['verify', '--man=no', join(dir, 'capstan-agent.service'), join(dir, 'capstan-agent.timer')]).then(
    (o) => ({ code: 0, stderr: o.stderr }),
    (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
  );
  t.equal(r.code, 0, r.stderr);
  t.notMatch(r.stderr, /capstan-agent\.(service|timer)/, 'no warning about our units');
});
