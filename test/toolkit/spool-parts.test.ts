// The spool's parts that have no behaviour of their own through Spool's methods: the one mapping
// of a full file system to ERR_SPOOL_FULL, and the clean-up timer the relay and the server run.
import { utimes, writeFile, readdir } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { type Logger } from '@capstan/shared';
import { Spool, startSpoolCleanup } from '@capstan/toolkit';
import { asSpoolFull } from '@capstan/toolkit/spool/admission';
import { programDir } from '../helpers/programs.js';

const sys = (code: string): NodeJS.ErrnoException => Object.assign(new Error(`${code}: failed`), { code, syscall: 'write' });

t.test('a full file system or a reached disk quota is ERR_SPOOL_FULL; other errors pass as they are', async (t) => {
  for (const code of ['ENOSPC', 'EDQUOT']) {
    const cause = sys(code);
    const mapped = asSpoolFull(cause) as Error & { code: string; statusCode: number; cause: unknown };
    t.match(mapped, { code: 'ERR_SPOOL_FULL', statusCode: 507 }, code);
    t.equal(mapped.cause, cause, `${code} kept as the cause`);
  }
  for (const err of [sys('EIO'), sys('ENOENT'), new Error('plain'), null, 'text']) t.equal(asSpoolFull(err), err);
});

/** A logger that records what it was told (silentLogger would hide whether the clean-up ran). */
function recordingLogger(lines: Array<{ level: string; obj: unknown; msg?: string }>): Logger {
  const at = (level: string) => (obj: unknown, msg?: string) => void lines.push({ level, obj, msg });
  const log: Logger = { trace: at('trace'), debug: at('debug'), info: at('info'), warn: at('warn'), error: at('error'), child: () => log };
  return log;
}

t.test('the clean-up timer sweeps old failed files and partial uploads at once, then on its interval', async (t) => {
  const root = programDir(t);
  const spool = new Spool({ root, maxFileBytes: 1024, writerThreads: 0 });
  await spool.init();
  t.teardown(() => spool.close());
  const old = new Date(Date.now() - 3_600_000);
  await spool.acceptBuffer('reports', 'bad.log', Buffer.from('x'));
  await spool.fail('reports', 'bad.log', 'refused');
  await utimes(join(spool.failedDir('reports'), 'bad.log'), old, old);
  await writeFile(join(root, 'tmp', 'left.part'), 'partial');
  await utimes(join(root, 'tmp', 'left.part'), old, old);

  const lines: Array<{ level: string; obj: unknown; msg?: string }> = [];
  const timer = await startSpoolCleanup(spool, { failedRetention: 60_000, tmpRetention: 60_000, interval: 20, log: recordingLogger(lines) });
  t.teardown(() => clearInterval(timer));
  // The first clean-up is done when the call returns.
  t.same(lines, [{ level: 'info', obj: { failed: 1, tmp: 1 }, msg: 'spool clean-up' }]);
  t.same(await readdir(join(root, 'tmp')), []);
  t.equal(spool.failedUsage.files, 0);
  t.notOk(timer.hasRef(), 'the timer does not hold the process open');

  // Later ones run on the interval: a partial upload aged after the start is swept without a call.
  await writeFile(join(root, 'tmp', 'later.part'), 'partial');
  await utimes(join(root, 'tmp', 'later.part'), old, old);
  const deadline = Date.now() + 10_000;
  while ((await readdir(join(root, 'tmp'))).length > 0 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 10));
  t.same(await readdir(join(root, 'tmp')), []);
  t.same(lines[1], { level: 'info', obj: { failed: 0, tmp: 1 }, msg: 'spool clean-up' });
});

t.test('a failed clean-up is logged as a warning and does not stop the timer', async (t) => {
  const lines: Array<{ level: string; obj: unknown; msg?: string }> = [];
  let calls = 0;
  const spool = {
    sweepFailed: async () => {
      if (calls++ === 0) throw Object.assign(new Error('EACCES: permission denied'), { code: 'EACCES' });
      return 0;
    },
    sweepTmp: async () => 0,
  };
  const timer = await startSpoolCleanup(spool, { failedRetention: 1, tmpRetention: 1, interval: 5, log: recordingLogger(lines) });
  t.teardown(() => clearInterval(timer));
  t.equal(lines.length, 1);
  t.match(lines[0], { level: 'warn', obj: { err: { code: 'EACCES' } }, msg: 'spool clean-up failed' });
  const deadline = Date.now() + 10_000;
  while (calls < 3 && Date.now() < deadline) await new Promise((r) => setTimeout(r, 5));
  t.ok(calls >= 3, 'the timer went on after the failure');
  t.equal(lines.length, 1, 'nothing to say when nothing was removed');
});
