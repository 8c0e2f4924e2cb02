/**
 * symlink_present, symlink_absent and timezone on temporary paths (the time zone against a
 * temporary zoneinfo tree, /etc/localtime and /etc/timezone given as paths).
 */
import { lstat, mkdir, readdir, readFile, readlink, symlink } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { applyMethod, driftCycle, snapshot } from '../helpers/methods.js';

t.test('symlink_present makes, then re-points a link, and reports what it changed', async (t) => {
  const dir = t.testdir({ v1: 'one\n', v2: 'two\n' });
  const path = join(dir, 'current');
  const made = await driftCycle(t, dir, 'symlink_present', { path, target: 'v1' });
  t.equal(made.diff?.diff, `created link ${path} → v1\n`);
  t.equal(await readlink(path), 'v1');
  const moved = await driftCycle(t, dir, 'symlink_present', { path, target: join(dir, 'v2') });
  t.equal(moved.diff?.diff, `link ${path} → ${join(dir, 'v2')} (was → v1)\n`);
  t.equal(await readFile(path, 'utf8'), 'two\n');
  t.same((await readdir(dir)).sort(), ['current', 'v1', 'v2'], 'no temporary link left');
});

t.test('symlink_present replaces a file or an empty directory only with force, a non-empty directory never', async (t) => {
  const dir = t.testdir({ file: 'data\n', empty: {}, full: { keep: 'x' } });
  const before = await snapshot(dir);
  for (const name of ['file', 'empty', 'full']) {
    t.match(await applyMethod('symlink_present', { path: join(dir, name), target: '/etc/hostname' }, 'enforce'), { status: 'error', code: 'ERR_FILE_TYPE' }, `${name} without force`);
  }
  t.match(await applyMethod('symlink_present', { path: join(dir, 'full'), target: '/etc/hostname', force: true }, 'enforce'), { status: 'error', code: 'ERR_FILE_TYPE' }, 'a non-empty directory even with force');
  t.same(await snapshot(dir), before, 'nothing replaced');
  for (const name of ['file', 'empty']) {
    const out = await driftCycle(t, dir, 'symlink_present', { path: join(dir, name), target: '/etc/hostname', force: true });
    t.match(out.diff?.diff, name === 'file' ? /\(replaces a regular file of 5 bytes\)/ : /\(replaces an empty directory\)/);
    t.equal(await readlink(join(dir, name)), '/etc/hostname');
  }
  t.equal(await readFile(join(dir, 'full', 'keep'), 'utf8'), 'x');
});

t.test('symlink_absent removes a link (never its target) and refuses anything else', async (t) => {
  const dir = t.testdir({ target: 'keep\n', file: 'not a link\n' });
  await symlink(join(dir, 'target'), join(dir, 'link'));
  const out = await driftCycle(t, dir, 'symlink_absent', { path: join(dir, 'link') });
  t.equal(out.diff?.diff, `deleted link ${join(dir, 'link')} (→ ${join(dir, 'target')})\n`);
  t.equal(await readFile(join(dir, 'target'), 'utf8'), 'keep\n', 'the target stays');
  t.match(await applyMethod('symlink_absent', { path: join(dir, 'file') }, 'enforce'), { status: 'error', code: 'ERR_FILE_TYPE' });
  t.equal(await readFile(join(dir, 'file'), 'utf8'), 'not a link\n');
  t.equal((await applyMethod('symlink_absent', { path: join(dir, 'nothing') }, 'audit')).status, 'compliant', 'nothing there is compliant');
});

t.test('timezone points localtime at the zone and writes the zone name, from a copied localtime too', async (t) => {
  const dir = t.testdir({
    zoneinfo: { UTC: 'TZif utc', Europe: { Paris: 'TZif paris', Berlin: 'TZif berlin' } },
    etc: { localtime: 'TZif copied', timezone: 'Etc/UTC\n' },
  });
  const params = { name: 'Europe/Paris', zoneinfo: join(dir, 'zoneinfo'), localtime: join(dir, 'etc', 'localtime'), timezone_file: join(dir, 'etc', 'timezone') };
  const out = await driftCycle(t, dir, 'timezone', params);
  t.match(out, { component: 'Timezone', key: 'Europe/Paris' });
  t.equal(await readlink(params.localtime), join(dir, 'zoneinfo', 'Europe', 'Paris'));
  t.equal(await readFile(params.timezone_file, 'utf8'), 'Europe/Paris\n');
  t.match(out.diff?.diff, /^link .*localtime → .*Europe\/Paris \(replaces a regular file of 11 bytes\)\n--- a.*timezone\n/);
  const berlin = await driftCycle(t, dir, 'timezone', { ...params, name: 'Europe/Berlin' });
  t.match(berlin.diff?.diff, /\(was → .*Europe\/Paris\)/);
  const before = await snapshot(dir);
  for (const name of ['Europe/Nowhere', 'Europe']) {
    t.match(await applyMethod('timezone', { ...params, name }, 'enforce'), { status: 'error', code: 'ERR_METHOD_PARAMS' }, `${name} is not a zone of this node`);
  }
  t.same(await snapshot(dir), before, 'an unknown zone changes nothing');
});

t.test('timezone without a timezone file manages only the link', async (t) => {
  const dir = t.testdir({ zoneinfo: { UTC: 'TZif' }, etc: {} });
  await mkdir(join(dir, 'etc'), { recursive: true });
  const params = { name: 'UTC', zoneinfo: join(dir, 'zoneinfo'), localtime: join(dir, 'etc', 'localtime'), timezone_file: '' };
  await driftCycle(t, dir, 'timezone', params);
  t.ok((await lstat(params.localtime)).isSymbolicLink());
  t.same(await readdir(join(dir, 'etc')), ['localtime'], 'no timezone file written');
});
