/**
 * failed/ keeps the evidence of a forgery against a flood of anonymous junk. Its bounds used to
 * remove the oldest files whatever they were: 10,974 one-byte uploads evicted a forged run log
 * kept there. Junk of one kind now evicts its own kind first (by refusal code, then node), and a
 * refused file never replaces another kept under its name.
 */
import { readdir, readFile, utimes } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { Spool } from '@capstan/toolkit';
import type { SpoolKind } from '@capstan/shared/protocol';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const runName = (node: string, i: number) => `${new Date(Date.UTC(2026, 0, 1) + i * 1000).toISOString().replace(/\.\d{3}Z$/, '+00:00')}@${node}.log`;
const randomNode = (i: number) => `00000000-0000-4000-8000-${String(i).padStart(12, '0')}`;
const FORGED = Buffer.from('forged run log signed by some other key');

async function fail(spool: Spool, kind: SpoolKind, name: string, body: Buffer, reason: string, ageS: number): Promise<void> {
  await spool.acceptBuffer(kind, name, body);
  const at = Date.now() / 1000 - ageS;
  await utimes(join(spool.incomingDir(kind), name), at, at);
  await spool.fail(kind, name, reason);
}

const junkVariants: Array<[string, (i: number) => [SpoolKind, string, string]]> = [
  ['one-byte run logs of random nodes', (i) => ['reports', runName(randomNode(i), i), 'ERR_DECOMPRESS: corrupt zstd stream']],
  ['junk naming the same node', (i) => ['reports', runName(NODE, 1000 + i), 'ERR_RUNLOG_EMPTY: no report']],
  ['junk inventories', (i) => ['inventories', `${randomNode(i)}_2026-01-01T00:00:00Z.json.gz`, 'ERR_DECOMPRESS: corrupt gzip stream']],
  ['junk of a few mixed codes', (i) => ['reports', runName(randomNode(i), i), `ERR_${['DECOMPRESS', 'SMIME_FORMAT', 'NODE_UNKNOWN'][i % 3]}: junk`]],
];

for (const [what, junk] of junkVariants) {
  for (const bound of ['files', 'bytes'] as const) {
    t.test(`a forgery in failed/ outlives a flood of ${what} (bound on ${bound})`, async (t) => {
      const dir = t.testdir();
      const spool = new Spool({ root: dir, maxFileBytes: 4096, ...(bound === 'files' ? { failedMaxFiles: 30 } : { failedMaxBytes: 200 }) });
      await spool.init();
      const evidence = runName(NODE, 1);
      // The forgery is the oldest file there: age alone would evict it first.
      await fail(spool, 'reports', evidence, FORGED, 'ERR_SMIME_SIGNATURE: signature does not verify', 10_000);
      for (let i = 0; i < 240; i++) {
        const [kind, name, reason] = junk(i);
        await fail(spool, kind, name, Buffer.from('x'), reason, 5_000 - i);
      }
      const u = spool.failedUsage;
      t.ok(bound === 'files' ? u.files <= 30 : u.bytes <= 200, `failed/ within its bound (${u.files} files, ${u.bytes} bytes)`);
      t.ok(u.evicted > 0, 'junk was evicted');
      t.same(await readFile(join(spool.failedDir('reports'), evidence)), FORGED, 'the forged file is still there');
      t.match(await readFile(join(spool.failedDir('reports'), `${evidence}.reason`), 'utf8'), /ERR_SMIME_SIGNATURE/, 'with its reason');
    });
  }
}

t.test('a refused file never replaces another kept in failed/ under its name', async (t) => {
  const dir = t.testdir();
  const spool = new Spool({ root: dir, maxFileBytes: 4096 });
  await spool.init();
  const name = runName(NODE, 1);
  await fail(spool, 'reports', name, FORGED, 'ERR_SMIME_SIGNATURE: signature does not verify', 100);
  await fail(spool, 'reports', name, Buffer.from('x'), 'ERR_DECOMPRESS: junk under the same name', 50);
  await spool.failBuffer('reports', name, Buffer.from('y'), 'ERR_DECOMPRESS: junk from a batch');
  t.same(await readFile(join(spool.failedDir('reports'), name)), FORGED, 'the first file kept');
  t.match(await readFile(join(spool.failedDir('reports'), `${name}.reason`), 'utf8'), /ERR_SMIME_SIGNATURE/, 'with its own reason');
  const names = (await readdir(spool.failedDir('reports'))).filter((n) => !n.endsWith('.reason'));
  t.equal(names.length, 3, `the later ones kept beside it (${names.join(', ')})`);
  t.equal(spool.failedUsage.files, 3, 'all counted');
});
