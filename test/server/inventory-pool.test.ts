/**
 * Inventories are read on worker threads (server/src/ingest/inventory-pool.ts): a costly one is
 * refused past the time or memory limit and its worker replaced, accepted nodes' inventories
 * are taken before newcomers', and a full queue answers ERR_INVENTORY_BUSY at once. The OCS
 * reader is linear: long texts and blank runs that cost seconds before cost milliseconds.
 */
import t from 'tap';
import { InventoryPool } from '@capstan/server/ingest/inventory-pool';
import { readSmallInventory, type InventoryJob } from '@capstan/server/ingest/inventory-read';
import { readOcsInventory, DEFAULT_OCS_LIMITS } from '@capstan/server/ingest/ocs';
import { ocsXml, rudderNode, signOcs } from '../helpers/ocs.js';

const limits = { maxDecompressedBytes: 64 << 20, maxReports: 1000, maxLineBytes: 1 << 20, ocs: DEFAULT_OCS_LIMITS };
const node = rudderNode('5e0b1c2d-3e4f-4a5b-8c6d-7e8f9a0b1c2d');

function job(xml: Buffer): InventoryJob {
  return { format: 'ocs', compression: 'none', raw: xml, sign: signOcs(xml, node), known: null, limits };
}

/** Legal and costly: as many empty elements as the element limit lets through. */
function costly(elements = 900_000): Buffer {
  const xml = ocsXml(node).toString();
  const at = xml.indexOf('<VERSIONCLIENT>');
  return Buffer.from(`${xml.slice(0, at)}${'<X><Y/></X>'.repeat(elements / 2)}${xml.slice(at)}`);
}

/** Poll `cond` every 10 ms for at most 30 s. */
async function until(cond: () => boolean, what: string): Promise<void> {
  for (const end = Date.now() + 30_000; !cond();) {
    if (Date.now() > end) throw new Error(`timed out waiting for ${what}`);
    await new Promise((r) => setTimeout(r, 10));
  }
}

const code = async (p: Promise<unknown>) => p.then(() => 'ok', (e: { code?: string }) => e.code ?? String(e));

t.test('a costly inventory is refused past the time limit; the pool goes on', async (t) => {
  const pool = new InventoryPool({ workers: 1, maxQueued: 8, timeLimitMs: 100, memoryBytes: 512 << 20 });
  t.teardown(() => pool.close());
  const bomb = job(costly());
  const read = pool.read(bomb, false);
  await until(() => pool.queued === 0, 'the worker to take it');
  const started = Date.now();
  t.equal(await code(read), 'ERR_INVENTORY_TOO_COSTLY');
  t.ok(Date.now() - started < 3000, `answered ${Date.now() - started} ms after it was taken (limit 100 ms)`);
  const doc = await pool.read(job(ocsXml(node)), false);
  t.equal(doc.node_id, node.id, 'the replaced worker reads the next one');
  t.equal(pool.refusedForCost, 1);
});

t.test('a costly inventory is refused past the memory limit', async (t) => {
  const pool = new InventoryPool({ workers: 1, maxQueued: 8, timeLimitMs: 60_000, memoryBytes: 32 << 20 });
  t.teardown(() => pool.close());
  t.equal(await code(pool.read(job(costly()), false)), 'ERR_INVENTORY_TOO_COSTLY');
  t.equal((await pool.read(job(ocsXml(node)), false)).node_id, node.id);
});

t.test('accepted nodes first; a full queue is answered at once', async (t) => {
  const pool = new InventoryPool({ workers: 1, maxQueued: 2, timeLimitMs: 60_000, memoryBytes: 512 << 20 });
  t.teardown(() => pool.close());
  const order: string[] = [];
  const read = (name: string, accepted: boolean, xml = ocsXml(node)) => pool.read(job(xml), accepted).then(() => order.push(name), (e: { code?: string }) => order.push(`${name}:${e.code}`));
  const first = read('first', false, costly(200_000));
  await until(() => pool.queued === 0, 'the worker to take the first');
  const newcomer = read('newcomer', false);
  const accepted = read('accepted', true);
  t.equal(await code(pool.read(job(ocsXml(node)), true)), 'ERR_INVENTORY_BUSY', 'a third waiting one is refused, transient');
  await Promise.all([first, newcomer, accepted]);
  t.same(order, ['first', 'accepted', 'newcomer']);
});

t.test('the OCS reader is linear: long texts and blank runs', async (t) => {
  const base = ocsXml(node).toString();
  const at = base.indexOf('<VERSIONCLIENT>');
  for (const [what, filler] of [['blanks', ' '.repeat(8 << 20)], ['one long text', `<NOTE>${'y'.repeat(8 << 20)}</NOTE>`]] as const) {
    const xml = Buffer.from(`${base.slice(0, at)}${filler}${base.slice(at)}`);
    const s = performance.now();
    t.equal(readOcsInventory(xml).doc.node_id, node.id);
    // fast-xml-parser took 5-6 s for 6.4 MB of either (garbage collection of per-character strings).
    t.ok(performance.now() - s < 1500, `${what}: 8 MiB read in ${Math.round(performance.now() - s)} ms`);
  }
});

t.test('small inventories are read in the calling thread, larger ones are left to the pool', async (t) => {
  const small = job(ocsXml(node));
  t.equal((await readSmallInventory(small, 256 * 1024))?.node_id, node.id);
  t.equal(await readSmallInventory(small, 1024), null, 'over the inline size: null, for the pool');
  const gz = { ...job(costly(100_000)), compression: 'gzip' as const };
  gz.raw = (await import('node:zlib')).gzipSync(gz.raw);
  t.equal(await readSmallInventory(gz, 256 * 1024), null, 'a gzip\'d one expanding past it too');
});
