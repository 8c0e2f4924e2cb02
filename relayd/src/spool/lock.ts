/**
 * One relayd per spool directory. Two would both forward every file (duplicates upstream) and
 * the start-up sweep of one would delete the other's uploads in progress. A pid file taken with
 * O_EXCL; one left by a dead process (kill -9, power loss) is taken over.
 */
import { open, readFile, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';

/** Is `pid` a live relayd? A recycled pid (common in containers) belonging to something else is not. */
async function relaydAlive(pid: number): Promise<boolean> {
  try {
    process.kill(pid, 0);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'EPERM') return false;
  }
  const cmdline = await readFile(`/proc/${pid}/cmdline`, 'utf8').catch(() => null);
  return cmdline === null || cmdline.includes('relayd');
}

/** Spools locked by this process (a pid file cannot tell two relays of one process apart). */
const held = new Set<string>();

export async function lockSpool(dir: string): Promise<() => Promise<void>> {
  const path = join(dir, 'relayd.pid');
  if (held.has(path)) throw capstanError('ERR_STARTUP', `spool ${dir} is in use by this process`);
  for (let attempt = 0; attempt < 3; attempt++) {
    try {
      const fh = await open(path, 'wx', 0o644);
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
      held.add(path);
      return async () => {
        held.delete(path);
        const pid = Number((await readFile(path, 'utf8').catch(() => '')).trim());
        if (pid === process.pid) await unlink(path).catch(() => {});
      };
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number((await readFile(path, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(pid) && pid > 0 && pid !== process.pid && (await relaydAlive(pid))) {
        throw capstanError('ERR_STARTUP', `spool ${dir} is in use by relayd pid ${pid}`);
      }
      await unlink(path).catch(() => {});
    }
  }
  throw capstanError('ERR_STARTUP', `cannot lock spool ${dir}`);
}
