/**
 * The spool processor under a backlog, as the ingest benchmark drives it. Its watcher used to be
 * chokidar, which re-lists the whole directory and lstat()s every entry on each change and keeps
 * a watch per file: with n files waiting each arrival cost O(n), over half of relayd's CPU in the
 * benchmark. It is now one inotify watch on the directory. What must still hold, and is checked
 * here: files already there at start and files arriving while a backlog waits are each handled
 * once, removals and dot files never reach the handler, and nothing is left behind.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { Spool, SpoolProcessor } from '@capstan/toolkit';
import { programDir } from '../helpers/programs.js';

const name = (i: number) => `2025-01-01T00:00:00+00:00@node-${String(i).padStart(5, '0')}.log`;

async function until(what: string, ok: () => boolean, ms = 60_000): Promise<void> {
  const end = Date.now() + ms;
  while (!ok()) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 20));
  }
}

t.test('a backlog and new arrivals are each handled once, through the directory watch', async (t) => {
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1 << 20 });
  await spool.init();
  const before = 400;
  const during = 800;
  for (let i = 0; i < before; i++) await spool.acceptBuffer('reports', name(i), Buffer.from(`body ${i}`));

  const handled = new Map<string, number>();
  let calls = 0;
  const p = new SpoolProcessor({
    kind: 'reports',
    spool,
    log: silentLogger,
    concurrency: 4,
    // Far away: arrivals must be seen by the watcher, not by the periodic listing.
    catchupIntervalMs: 3_600_000,
    // Like the real handlers: read the file; a file gone meanwhile is ENOENT, which the processor drops.
    handle: async (path, n) => {
      calls++;
      const body = await readFile(path, 'utf8');
      if (body !== `body ${Number(n.slice(-9, -4))}`) throw new Error(`wrong body for ${n}`);
      handled.set(n, (handled.get(n) ?? 0) + 1);
    },
  });
  t.teardown(() => p.stop());
  await p.start();
  // A dot file (an editor's or rsync's temporary) is never offered.
  await writeFile(join(spool.incomingDir('reports'), '.partial.log'), 'x');
  for (let i = before; i < before + during; i++) await spool.acceptBuffer('reports', name(i), Buffer.from(`body ${i}`));

  await until('every file handled', () => handled.size === before + during);
  await until('the spool emptied', () => p.pending === 0);
  t.equal(handled.size, before + during);
  t.same([...handled.values()].filter((c) => c !== 1), [], 'no file handled twice');
  t.ok(calls >= before + during, 'every handler call accounted for');
  t.same(await spool.list('reports'), [], 'nothing left in incoming/ (dot files are not listed)');
});
