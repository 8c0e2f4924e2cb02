/**
 * mount_present, mount_absent, kernel_module_loaded and hostname for real inside a throwaway root:
 * real mounts (tmpfs, a bind mount) in the root's mount namespace with util-linux's mount, the
 * root's /etc/fstab edited in place, the host name of the root's UTS namespace. Loading a module
 * would change the host's kernel, which a root shares: there `modprobe` is a shim that writes a
 * fake modules list, and the real /proc/modules is only read.
 */
import { readFileSync } from 'node:fs';
import { hostname } from 'node:os';
import t from 'tap';
import { rootSkipReason, throwawayRoot } from '../helpers/root.js';

t.setTimeout(180_000);

const FSTAB = `# static file system information
/dev/sdz1 /srv ext4 defaults 0 2
old-tmp /mnt/data tmpfs size=8m 0 0
/dev/sdz2 /home ext4 defaults 0 2
old-again /mnt/data/ tmpfs defaults 0 0
`;
const hostFstab = readFileSync('/etc/fstab', 'utf8');
const why = await rootSkipReason({});

t.test('mount_present writes the one fstab line of its mount point and mounts, remounts or swaps what is mounted there; mount_absent undoes it', { skip: why }, async (t) => {
  const root = await throwawayRoot(t);
  t.equal((await root.sh(`mkdir -p /mnt/data /mnt/bind /srv/bindsrc && echo here > /srv/bindsrc/file && cat > /etc/fstab <<'EOF'\n${FSTAB}EOF`)).code, 0);
  const data = { path: '/mnt/data', device: 'capstan-tmp', fstype: 'tmpfs', options: 'size=16m,noexec' };
  const first = await root.methods([
    { method: 'mount_present', params: data, mode: 'audit' },
    { method: 'mount_present', params: data },
    { method: 'mount_present', params: data },
    { method: 'mount_present', params: { path: '/mnt/bind', device: '/srv/bindsrc', fstype: 'none', options: ['bind'] } },
    { method: 'mount_present', params: { path: '/mnt/bind', device: '/srv/bindsrc', fstype: 'none', options: ['bind'] } },
    { method: 'mount_present', params: { ...data, path: '/mnt/nowhere' } },
  ]);
  t.match(first[0], [{ component: 'Mount present', key: '/mnt/data', status: 'noncompliant', message: '/etc/fstab line for /mnt/data differs; /mnt/data is not mounted' }]);
  t.equal(first[0]![0]!.diff!.diff, [
    '--- a/etc/fstab', '+++ b/etc/fstab', '@@ -1,5 +1,4 @@', ' # static file system information', ' /dev/sdz1 /srv ext4 defaults 0 2',
    '-old-tmp /mnt/data tmpfs size=8m 0 0', '+capstan-tmp /mnt/data tmpfs size=16m,noexec 0 0', ' /dev/sdz2 /home ext4 defaults 0 2',
    '-old-again /mnt/data/ tmpfs defaults 0 0', 'mounted capstan-tmp on /mnt/data', '',
  ].join('\n'), 'the line is replaced where it stood, the duplicate dropped, the rest kept');
  t.same(first.slice(1, 5).map((o) => o[0]!.status), ['repaired', 'success', 'repaired', 'success']);
  t.match(first[5], [{ status: 'error', message: /mount point \/mnt\/nowhere does not exist/ }], 'a mount point that does not exist is an error, and fstab is left as it was');
  const mounted = (await root.sh('grep " /mnt/data " /proc/self/mountinfo; stat -c %i /mnt/bind /srv/bindsrc; cat /mnt/bind/file')).stdout;
  t.match(mounted, /noexec.* - tmpfs capstan-tmp rw,.*size=16384k/);
  const [a, b] = mounted.split('\n').slice(1, 3);
  t.equal(a, b, 'the bind mount shows its source directory');

  // Options changed: a remount keeps what is on the file system; another device: unmount, mount.
  await root.sh('echo kept > /mnt/data/file');
  const bigger = { ...data, options: 'size=32m,noexec' };
  const second = await root.methods([
    { method: 'mount_present', params: bigger },
    { method: 'mount_present', params: bigger },
  ]);
  t.match(second[0], [{ status: 'repaired', message: /mounted without size=32m \(is 16384k\)/, diff: { diff: /remounted \/mnt\/data \(size=32m\)\n$/ } }]);
  t.equal((await root.sh('cat /mnt/data/file; grep -c "size=32768k" /proc/self/mountinfo')).stdout, 'kept\n1\n', 'remounted, not replaced');
  await root.sh('umount /mnt/data && mount -t tmpfs intruder /mnt/data');
  const third = await root.methods([
    { method: 'mount_present', params: bigger, mode: 'audit' },
    { method: 'mount_present', params: bigger },
    { method: 'mount_absent', params: { path: '/mnt/data' }, mode: 'audit' },
    { method: 'mount_absent', params: { path: '/mnt/data' } },
    { method: 'mount_absent', params: { path: '/mnt/data' } },
  ]);
  t.match(third[0], [{ status: 'noncompliant', message: 'intruder (tmpfs) is mounted on /mnt/data, not capstan-tmp' }]);
  t.match(third[1], [{ status: 'repaired' }]);
  t.match(third[2], [{ status: 'noncompliant', message: '/etc/fstab has a line for /mnt/data; capstan-tmp is mounted on /mnt/data' }]);
  t.same(third.slice(3).map((o) => o[0]!.status), ['repaired', 'success']);
  const after = await root.sh('cat /etc/fstab; grep -c " /mnt/data " /proc/self/mountinfo || true');
  t.equal(after.stdout, '# static file system information\n/dev/sdz1 /srv ext4 defaults 0 2\n/dev/sdz2 /home ext4 defaults 0 2\n/srv/bindsrc /mnt/bind none bind 0 0\n0\n');
  t.equal(readFileSync('/etc/fstab', 'utf8'), hostFstab, 'the host\'s fstab is untouched');
  t.notMatch(readFileSync('/proc/self/mountinfo', 'utf8'), /capstan-tmp|intruder/, 'and so are its mounts');
});

// Appends a /proc/modules line to the fake list (with `_`, as the kernel writes names), as loading would; logs each call.
const SHIM = `#!/bin/sh
echo "$*" >> /run/capstan-modprobe.log
echo "$(echo "$1" | tr - _) 16384 0 - Live 0x0000000000000000" >> /run/capstan-fake-proc/modules
`;

t.test('kernel_module_loaded reads /proc/modules and modules.builtin, loads with modprobe and persists in modules-load.d', { skip: why }, async (t) => {
  const root = await throwawayRoot(t);
  // Every modprobe of the root is the shim (the root shares the host's kernel).
  const shim = `mkdir -p /run/capstan-fake-proc && echo 'loop 40960 0 - Live 0x0000000000000000' > /run/capstan-fake-proc/modules
for m in /usr/local/sbin/modprobe /usr/sbin/modprobe /sbin/modprobe; do if [ -e "$m" ] || [ "$m" = /usr/local/sbin/modprobe ]; then cat > "$m" <<'EOF'\n${SHIM}EOF\nchmod 0755 "$m"; fi; done
mkdir -p /lib/modules/$(uname -r) && echo kernel/fs/capstan-fs/capstan-builtin.ko >> /lib/modules/$(uname -r)/modules.builtin`;
  t.equal((await root.sh(shim)).code, 0);
  const fake = { procRoot: '/run/capstan-fake-proc' };
  const out = await root.methods([
    { method: 'kernel_module_loaded', params: { name: 'capstan_dummy' }, mode: 'audit' },
    { method: 'kernel_module_loaded', params: { name: 'capstan_builtin' }, mode: 'audit' },
    { method: 'kernel_module_loaded', params: { name: 'loop' }, mode: 'audit', ...fake },
    { method: 'kernel_module_loaded', params: { name: 'capstan-dummy', persist: true }, mode: 'audit', ...fake },
    { method: 'kernel_module_loaded', params: { name: 'capstan-dummy', persist: true }, ...fake },
    { method: 'kernel_module_loaded', params: { name: 'capstan-dummy', persist: true }, ...fake },
  ]);
  t.match(out[0], [{ component: 'Kernel module loaded', key: 'capstan_dummy', status: 'noncompliant', message: 'capstan_dummy is not loaded' }], 'the real /proc/modules does not list it');
  t.match(out[1], [{ status: 'compliant', message: 'capstan_builtin is built in' }], 'modules.builtin names it (- and _ are one)');
  t.match(out[2], [{ status: 'compliant', message: 'loop is loaded' }]);
  t.match(out[3], [{ status: 'noncompliant' }, { component: 'Kernel module persistent', status: 'noncompliant', diff: { diff: /^created \/etc\/modules-load\.d\/capstan-dummy\.conf\n.*\n\+capstan-dummy\n$/s } }]);
  t.same(out[4]!.map((o) => o.status), ['repaired', 'repaired']);
  t.same(out[5]!.map((o) => o.status), ['success', 'success']);
  t.equal((await root.sh('cat /run/capstan-modprobe.log /etc/modules-load.d/capstan-dummy.conf')).stdout, 'capstan-dummy\ncapstan-dummy\n', 'modprobe ran once, and the name is listed for boot');
});

t.test('hostname without systemd writes /etc/hostname and sets the live name of the root\'s UTS namespace only', { skip: why }, async (t) => {
  const root = await throwawayRoot(t);
  const before = hostname();
  const out = await root.methods([
    { method: 'hostname', params: { name: 'db-7' }, mode: 'audit' },
    { method: 'hostname', params: { name: 'db-7' }, dryRun: true },
    { method: 'hostname', params: { name: 'db-7' } },
    { method: 'hostname', params: { name: 'db-7' } },
  ]);
  t.match(out[0], [{ status: 'noncompliant', message: `/etc/hostname says ${before}, the live host name is ${before}` }]);
  t.match(out[1], [{ status: 'noncompliant', diff: { diff: `--- a/etc/hostname\n+++ b/etc/hostname\n@@ -1,1 +1,1 @@\n-${before}\n+db-7\nhostname ${before} → db-7\n` } }]);
  t.same(out.slice(2).map((o) => o[0]!.status), ['repaired', 'success']);
  t.equal((await root.sh('cat /etc/hostname; hostname')).stdout, 'db-7\ndb-7\n');
  t.equal(hostname(), before);
  t.equal(readFileSync('/etc/hostname', 'utf8').trim(), before);
});
