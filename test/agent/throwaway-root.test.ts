/**
 * The throwaway-root harness (test/helpers/root.ts) that the system-method tests rely on: what
 * happens inside a root stays in its upper layer and its namespaces, and nothing of it is left
 * running once its test is over. If these fail, no test run in a root may be trusted.
 */
import { existsSync, readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { rootSkipReason, throwawayRoot } from '../helpers/root.js';

t.setTimeout(120_000);

const why = await rootSkipReason({});
const systemdWhy = why ?? (await rootSkipReason({ systemd: true, family: 'rpm' }));
if (why !== undefined) {
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  const user = `capstan-rt-${process.pid}`;
  const hostPasswd = readFileSync('/etc/passwd', 'utf8');
  const hostMounts = readFileSync('/proc/self/mountinfo', 'utf8');
  const hostName = hostname();
  let first = 0;

  await t.test('a user, a file, a mount and a host name made inside a root land in the root only', async (t) => {
    const root = await throwawayRoot(t);
    const r = await root.sh(`useradd -M ${user} && id -u ${user} && echo marker > /etc/capstan-root-marker && mkdir -p /mnt/capstan-rt && mount -t tmpfs capstan-rt /mnt/capstan-rt && hostname capstan-rt.example && hostname && cat /proc/self/net/dev`);
    t.equal(r.code, 0, r.stderr);
    t.match(r.stdout, /capstan-rt\.example/, 'the root has its own host name');
    t.notMatch(r.stdout, /eth0|ens|enp/, 'and a network of its own: only its loopback');
    t.ok(existsSync(join(root.upper, 'etc/capstan-root-marker')), 'a written file is in the upper layer');
    t.match(readFileSync(join(root.upper, 'etc/passwd'), 'utf8'), new RegExp(`^${user}:`, 'm'), 'so is the new user');
    t.notOk(existsSync('/etc/capstan-root-marker'), 'the host has no such file');
    t.equal(readFileSync('/etc/passwd', 'utf8'), hostPasswd, 'the host passwd file is untouched');
    t.notMatch(readFileSync('/proc/self/mountinfo', 'utf8'), /capstan-rt/, 'the host sees no mount of the root');
    t.equal(hostname(), hostName, 'the host name is the host\'s');
    t.equal((await root.exec('cat', ['/proc/1/comm'])).stdout, 'sleep\n', 'the root has its own PID namespace, its holder as PID 1');
    first = root.pid;
  });

  t.test('after the test, the root\'s processes are gone, its user absent from the host and nothing of it mounted', async (t) => {
    t.throws(() => process.kill(first, 0), { code: 'ESRCH' });
    t.notMatch(readFileSync('/etc/passwd', 'utf8'), new RegExp(`^${user}:`, 'm'));
    const mounts = readFileSync('/proc/self/mountinfo', 'utf8');
    t.notMatch(mounts, /capstan-rt|overlay overlay/);
    t.equal(mounts.split('\n').length, hostMounts.split('\n').length, 'as many mounts as before');
  });

  await t.test('an RPM root with systemd as PID 1: rpm and dnf answer, units start, and all of it goes with the test', { skip: systemdWhy }, async (t) => {
    let cgroup: string | null = null;
    let pid = 0;
    await t.test('inside', async (t) => {
      const root = await throwawayRoot(t, { family: 'rpm', systemd: true });
      ({ cgroup, pid } = root);
      const r = await root.sh('command -v dpkg-query || echo no-dpkg; rpm --eval %_dbpath; rpm -q capstan-root-release; systemctl is-system-running; readlink /proc/1/exe');
      t.equal(r.code, 0, r.stderr);
      t.match(r.stdout, /^no-dpkg\n\/var\/lib\/rpm\ncapstan-root-release-1-1\.noarch\n(running|degraded)\n.*systemd\n$/);
      const unit = '[Unit]\\nDefaultDependencies=no\\n[Service]\\nExecStart=/usr/bin/sleep infinity\\n';
      const started = await root.sh(`printf '${unit}' > /etc/systemd/system/capstan-rt.service && systemctl daemon-reload && systemctl start capstan-rt && systemctl show -p MainPID --value capstan-rt`);
      t.equal(started.code, 0, started.stderr);
      t.ok(Number(started.stdout.trim()) > 1, 'systemd started the unit\'s process');
      t.ok(cgroup !== null && existsSync(join(cgroup, 'system.slice', 'capstan-rt.service')), 'in the root\'s own cgroup');
    });
    t.throws(() => process.kill(pid, 0), { code: 'ESRCH' }, 'the root\'s systemd is gone');
    t.notOk(existsSync(cgroup!), 'and so is its cgroup');
  });
}
