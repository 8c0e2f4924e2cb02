/**
 * A data or spool directory on a file system that refuses it stops the start with exit 3 and a
 * message naming the directory. Node's `mkdir(…, { recursive: true })` used to spin forever on
 * /proc (ENOENT for a directory whose parent exists): the server and the relay hung at start-up
 * with a busy CPU and printed nothing, so these runs timed out instead of exiting.
 */
import { randomBytes } from 'node:crypto';
import { stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { makeDir } from '@capstan/shared';
import { BIN, runProgram } from '../helpers/programs.js';

// procfs answers ENOENT to mkdir in its root: the file system that showed the hang.
const procfs = await stat('/proc/self/status').then(() => true, () => false);
const skip = procfs ? false : '/proc is not mounted: no file system here refuses mkdir the way procfs does';
if (skip && process.env.CI === 'true') t.fail(skip);
const refusing = () => `/proc/capstan-${randomBytes(4).toString('hex')}/data`;

t.test('makeDir makes missing parents, accepts an existing directory, refuses a file in the way', async (t) => {
  const dir = t.testdir({ file: 'x' });
  const deep = join(dir, 'a', 'b', 'c');
  await makeDir(deep, 0o750);
  t.ok((await stat(deep)).isDirectory());
  t.equal((await stat(deep)).mode & 0o777, 0o750 & ~process.umask());
  await makeDir(deep);
  await t.rejects(makeDir(join(dir, 'file', 'sub')), { code: 'ERR_DIRECTORY' });
  await t.rejects(makeDir(join(dir, 'file')), { code: 'ERR_DIRECTORY' });
  // Many callers making overlapping trees at once all succeed (EEXIST from a sibling is fine).
  await Promise.all(Array.from({ length: 20 }, (_, i) => makeDir(join(dir, 'p', 'q', String(i % 3), 'r'))));
  for (const i of [0, 1, 2]) t.ok((await stat(join(dir, 'p', 'q', String(i), 'r'))).isDirectory());
  await writeFile(join(dir, 'p', 'q', 'f'), '');
  await t.rejects(makeDir(join(dir, 'p', 'q', 'f', 'r')), { code: 'ERR_DIRECTORY' });
});

t.test('directories on a file system that refuses them', { skip }, async (t) => {
  await t.rejects(makeDir(refusing()), { code: 'ERR_DIRECTORY' });

  t.test('the server exits 3 and names its data directory', async (t) => {
    const dir = refusing();
    const r = await runProgram(BIN.server, ['serve', '--listen', '127.0.0.1:0', '--data-dir', dir], 20_000);
    t.equal(r.code, 3, r.stderr);
    t.match(r.stderr, `cannot create directory ${dir}`);
    t.match(r.stdout, /"code":"ERR_DIRECTORY"/);
  });

  t.test('the relay exits 3 and names its spool directory', async (t) => {
    const dir = refusing();
    const r = await runProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', dir, '--upstream', 'http://127.0.0.1:9'], 20_000);
    t.equal(r.code, 3, r.stderr);
    t.match(r.stderr, `cannot create directory ${dir}`);
    t.match(r.stdout, /"code":"ERR_DIRECTORY"/);
  });
});
