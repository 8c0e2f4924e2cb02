/**
 * Custom facts from the facts directory, and the disks the inventory lists: every kind of fact
 * source, each failure reported (not fatal) with the other sources kept, and the limits on time,
 * size and count. Disks: memory-backed and kernel mounts left out, a mount point listed twice kept once.
 */
import { chmod, chown, mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { collectInventory, realMounts } from '@capstan/agent/inventory/collect';
import { readFacts } from '@capstan/agent/inventory/facts';

const opts = (dir: string, over: Partial<{ timeoutMs: number; maxBytes: number; maxFiles: number }> = {}) =>
  ({ dir, timeoutMs: 5000, maxBytes: 4096, maxFiles: 100, ...over });

t.test('JSON and TOML files and executables are merged in name order', async (t) => {
  const dir = t.testdir();
  await writeFile(join(dir, '10-role.json'), JSON.stringify({ role: 'web', rack: { row: 3 } }));
  await writeFile(join(dir, '20-site.toml'), 'site = "paris"\n[hw]\nslots = 4\n');
  await writeFile(join(dir, '30-probe'), '#!/bin/sh\necho \'{"role": "cache", "probe": true}\'\n');
  await chmod(join(dir, '30-probe'), 0o755);
  await writeFile(join(dir, 'README'), 'not a fact source');
  await mkdir(join(dir, 'sub'));
  const r = await readFacts(opts(dir));
  t.same(r.facts, { role: 'cache', rack: { row: 3 }, site: 'paris', hw: { slots: 4 }, probe: true });
  t.same(r.errors, {});
});

t.test('a failing source is reported and the others kept', async (t) => {
  const dir = t.testdir();
  const exe = async (name: string, body: string) => {
    await writeFile(join(dir, name), `#!/bin/sh\n${body}\n`);
    await chmod(join(dir, name), 0o755);
  };
  await writeFile(join(dir, 'a-good.json'), '{"ok": 1}');
  await writeFile(join(dir, 'b-bad.json'), '{"ok": ');
  await writeFile(join(dir, 'c-bad.toml'), 'x = = 1');
  await writeFile(join(dir, 'd-list.json'), '[1, 2]');
  await writeFile(join(dir, 'e-big.json'), JSON.stringify({ big: 'x'.repeat(5000) }));
  await exe('f-fails', 'echo "{}"; exit 3');
  await exe('g-slow', 'exec sleep 30');
  await exe('h-noisy', 'head -c 10000 /dev/zero | tr "\\0" "a"');
  await exe('i-text', 'echo hello');
  const r = await readFacts(opts(dir, { timeoutMs: 300 }));
  t.same(r.facts, { ok: 1 });
  t.same(Object.keys(r.errors).sort(), ['b-bad.json', 'c-bad.toml', 'd-list.json', 'e-big.json', 'f-fails', 'g-slow', 'h-noisy', 'i-text']);
  t.match(r.errors['g-slow'], /longer than 300 ms/);
  t.match(r.errors['e-big.json'], /larger than 4096 bytes/);
  t.match(r.errors['f-fails'], /status 3/);
});

t.test('files beyond the count limit are reported; a missing directory is no facts', async (t) => {
  const dir = t.testdir();
  for (const n of ['a', 'b', 'c']) await writeFile(join(dir, `${n}.json`), JSON.stringify({ [n]: true }));
  const r = await readFacts(opts(dir, { maxFiles: 2 }));
  t.same(r.facts, { a: true, b: true });
  t.match(r.errors, { 'c.json': /skipped/ });
  t.same(await readFacts(opts(join(dir, 'absent'))), { facts: {}, errors: {} });
});

// The agent (root) ran executables anyone could have written: world- or group-writable ones,
// ones owned by another user, ones in a directory others could write to. Like sshd's StrictModes,
// a source and every directory above it must be owned by root (or the agent's user) and writable
// by nobody else; a refused source is named in facts_errors and never run or read.
t.test('a fact source others could have written is refused, not run or read', async (t) => {
  const witness = (dir: string) => join(dir, 'ran');
  const exe = async (path: string, dir: string) => {
    await writeFile(path, `#!/bin/sh\ntouch ${witness(dir)}\necho '{"evil": true}'\n`);
    await chmod(path, 0o755);
  };
  const cases: Array<[string, (facts: string, root: string) => Promise<string>]> = [
    ['a world-writable executable', async (f) => { await exe(join(f, 'x'), f); await chmod(join(f, 'x'), 0o757); return 'x'; }],
    ['a group-writable executable', async (f) => { await exe(join(f, 'x'), f); await chmod(join(f, 'x'), 0o775); return 'x'; }],
    ['an executable owned by another user', async (f) => { await exe(join(f, 'x'), f); await chown(join(f, 'x'), 65534, 65534); return 'x'; }],
    ['an executable in a world-writable directory', async (f) => { await exe(join(f, 'x'), f); await chmod(f, 0o777); return 'x'; }],
    ['an executable in a directory owned by another user', async (f) => { await exe(join(f, 'x'), f); await chown(f, 65534, 65534); return 'x'; }],
    ['an executable below a group-writable directory', async (f, root) => { await exe(join(f, 'x'), f); await chmod(root, 0o775); return 'x'; }],
    ['a world-writable JSON file', async (f) => { await writeFile(join(f, 'y.json'), '{"evil": true}'); await chmod(join(f, 'y.json'), 0o646); return 'y.json'; }],
    ['a TOML file owned by another user', async (f) => { await writeFile(join(f, 'y.toml'), 'evil = true\n'); await chown(join(f, 'y.toml'), 65534, 65534); return 'y.toml'; }],
  ];
  for (const [what, make] of cases) {
    const root = t.testdir({ parent: { 'facts.d': {} } });
    const facts = join(root, 'parent', 'facts.d');
    await writeFile(join(facts, 'good.json'), '{"good": 1}');
    await chmod(root, 0o755);
    const name = await make(facts, join(root, 'parent'));
    const r = await readFacts(opts(facts));
    t.notOk(r.facts.evil, `${what}: its facts are not taken`);
    t.ok(r.errors[name] ?? r.errors[facts], `${what}: named in facts_errors (${r.errors[name] ?? r.errors[facts]})`);
    t.equal(await stat(witness(facts)).then(() => 'ran', () => 'not run'), 'not run', `${what}: never run`);
    // Modes put back so that tap can clean the directory.
    await chmod(facts, 0o755);
  }
});

// An executable's background children outlived the run (and the agent's unit).
t.test('an executable\'s whole process group ends with it, on success and on time-out', async (t) => {
  for (const [what, tail, timeoutMs] of [['exits', 'echo \'{"x": 1}\'', 5000], ['times out', 'sleep 30', 500]] as const) {
    const dir = t.testdir();
    await writeFile(join(dir, 'bg'), `#!/bin/sh\nsleep 300 </dev/null >/dev/null 2>&1 &\necho $! > ${join(dir, 'pid')}\n${tail}\n`);
    await chmod(join(dir, 'bg'), 0o755);
    await readFacts(opts(dir, { timeoutMs }));
    const pid = Number(await readFile(join(dir, 'pid'), 'utf8'));
    t.ok(pid > 0, `${what}: the background child started (${pid})`);
    const end = Date.now() + 5000;
    let alive = true;
    while (alive && Date.now() < end) {
      try {
        process.kill(pid, 0);
        const st = await readFile(`/proc/${pid}/stat`, 'utf8').catch(() => '');
        if (/^\d+ \([^)]*\) Z/.test(st)) alive = false; // a zombie: ended, not yet reaped
        else await new Promise((r) => setTimeout(r, 50));
      } catch {
        alive = false;
      }
    }
    if (alive) process.kill(pid, 'SIGKILL');
    t.notOk(alive, `${what}: the background child ended with it`);
  }
});

t.test('the inventory carries the facts and their errors', async (t) => {
  const dir = t.testdir();
  await writeFile(join(dir, 'role.json'), '{"role": "db"}');
  await writeFile(join(dir, 'broken.json'), 'nope');
  const inv = await collectInventory({ nodeId: 'n1', certPem: 'CERT', policyServer: 'relay', facts: opts(dir) });
  t.same(inv.facts, { role: 'db' });
  t.match(inv.facts_errors, { 'broken.json': /JSON/ });
});

t.test('disks are real file systems, each mount point once', async (t) => {
  // What used to be listed: tmpfs mounts (a 4 KiB one among them) and /dev/shm twice.
  const mounts = [
    'sysfs /sys sysfs rw 0 0', 'proc /proc proc rw 0 0', '/dev/vda1 / ext4 rw 0 0', 'tmpfs /run tmpfs rw 0 0',
    'tmpfs /dev/shm tmpfs rw 0 0', 'shm /dev/shm tmpfs rw 0 0', 'tmpfs /sys/firmware tmpfs ro,size=4k 0 0',
    '/dev/vdb1 /srv/data xfs rw 0 0', '/dev/vdb1 /srv/data xfs rw 0 0', '/dev/vdc1 /mnt/my\\040disk ext4 rw 0 0',
    '/dev/vdd1 /old ext4 rw 0 0', 'tmpfs /old tmpfs rw 0 0', '/dev/loop3 /snap/core/1 squashfs ro 0 0',
  ].join('\n');
  t.same(realMounts(mounts), [
    { device: '/dev/vda1', mount: '/', fstype: 'ext4' },
    { device: '/dev/vdb1', mount: '/srv/data', fstype: 'xfs' },
    { device: '/dev/vdc1', mount: '/mnt/my disk', fstype: 'ext4' },
  ]);
});
