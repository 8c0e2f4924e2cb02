/**
 * One run at a time per state directory (the timer and an admin's manual run may overlap), and
 * never two runs in the same second: a run is identified at the server by (node id, start time to
 * the second, RUDDER's precision), so a second run within one second would be taken as a duplicate.
 */
import { open, readFile, unlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';

function alive(pid: number): boolean {
  try {
    process.kill(pid, 0);
    return true;
  } catch (err) {
    return (err as NodeJS.ErrnoException).code === 'EPERM';
  }
}

export async function acquireRunLock(stateDir: string): Promise<() => Promise<void>> {
  const path = join(stateDir, 'run.lock');
  for (let attempt = 0; attempt < 2; attempt++) {
    try {
      const fh = await open(path, 'wx', 0o600);
      await fh.writeFile(`${process.pid}\n`);
      await fh.close();
      return () => unlink(path).catch(() => {});
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw err;
      const pid = Number((await readFile(path, 'utf8').catch(() => '')).trim());
      if (Number.isInteger(pid) && pid > 0 && alive(pid)) {
        throw capstanError('ERR_CONFLICT', `another run (pid ${pid}) holds ${path}`);
      }
      await unlink(path).catch(() => {}); // stale: its process is gone
    }
  }
  throw capstanError('ERR_CONFLICT', `cannot take ${path}`);
}

/** Wait, if needed, so this run's start second is later than the previous run's. */
export async function nextRunStart(stateDir: string, clock: () => Date): Promise<Date> {
  const path = join(stateDir, 'last-run');
  const last = Number((await readFile(path, 'utf8').catch(() => '0')).trim()) || 0;
  let now = clock();
  while (Math.floor(now.getTime() / 1000) <= Math.floor(last / 1000)) {
    await new Promise((r) => setTimeout(r, 1000 - (now.getTime() % 1000) + 5));
    now = clock();
  }
  await writeFile(path, `${now.getTime()}\n`, { mode: 0o600 });
  return now;
}
