/** The server's systemd unit: notify type, exit codes that must not restart it, and its sandbox. */
import { execFile } from 'node:child_process';
import { readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { promisify } from 'node:util';
import t from 'tap';

const UNIT = resolve(import.meta.dirname, '../../packaging/systemd/capstan-server.service');
const run = promisify(execFile);

t.test('the unit waits for READY, keeps config errors down and is sandboxed', async (t) => {
  const unit = await readFile(UNIT, 'utf8');
  for (const line of [
    'Type=notify', 'NotifyAccess=all', 'RestartPreventExitStatus=2 3', 'NoNewPrivileges=yes', 'ProtectSystem=strict',
    'ProtectHome=yes', 'PrivateTmp=yes', 'PrivateDevices=yes', 'RestrictAddressFamilies=AF_UNIX AF_INET AF_INET6',
    'CapabilityBoundingSet=', 'SystemCallFilter=@system-service', 'ReadWritePaths=/var/lib/capstan/server',
  ]) {
    t.match(unit, new RegExp(`^${line.replace(/[.*+?^${}()|[\]\\]/g, '\\$&')}$`, 'm'), line);
  }
  t.match(unit, /^ExecStartPre=\/usr\/bin\/capstan-server serve --config \/etc\/capstan\/server\.toml --test$/m);
  t.match(unit, /^ExecStart=\/usr\/bin\/capstan-server serve --config \/etc\/capstan\/server\.toml$/m);
});

t.test('systemd-analyze verify accepts the unit', async (t) => {
  const probe = await run('systemd-analyze', ['--version']).catch(() => null);
  if (!probe) {
    t.comment('skipping: systemd-analyze is not installed here');
    return;
  }
  const dir = t.testdir();
  // verify checks that the binaries exist: point them at one that does, the rest unchanged.
  const unit = (await readFile(UNIT, 'utf8')).replaceAll('/usr/bin/capstan-server', process.execPath);
  await writeFile(join(dir, 'capstan-server.service'), unit);
  const r = await run('systemd-analyze', ['verify', '--man=no', join(dir, 'capstan-server.service')]).then(
    (o) => ({ code: 0, stderr: o.stderr }),
    (e: { code: number; stderr: string }) => ({ code: e.code, stderr: e.stderr }),
  );
  t.equal(r.code, 0, r.stderr);
  t.notMatch(r.stderr, /capstan-server\.service/, 'no warning about the unit');
});
