/**
 * Stored run logs that cannot be read, on both stores (docs/faults.md, "A damaged value in the
 * registry"). A node-day's run base holds that day's first run; the day's other runs are kept as
 * differences against it (run-codec.ts). When the base's bytes are damaged:
 * - the node's next runs that day are still stored, one at a time and in a batch with other
 *   nodes' runs, each on its own (compressed alone), and read back exactly; the opener is told,
 *   once per store (server process);
 * - the runs stored against it, and a run whose own bytes are damaged, answer ERR_RUN_UNREADABLE
 *   when their log is read, while a page of the node's runs still lists them.
 */
import t, { type Test } from 'tap';
import { decompress } from '@capstan/shared';
import type { Store, UnreadableValue } from '@capstan/server/store/index';
import { bytesLiteral, run, runText, setup, type Backend, type Db } from './store-suite.js';
import { postgresBackend, sqliteBackend } from './backends.js';
import { postgresOrSkipFile } from './pg.js';

const DAY = '2024-05-01';
const at = (hour: number) => `${DAY}T${String(hour).padStart(2, '0')}:00:00Z`;
const outcomes = (i: number) => [{ rule_id: 'r1', directive_id: 'd1', component: 'File', outcome: i % 2 ? 'result_repaired' : 'result_success', count: 1 }];
const texted = (node: string, hour: number) => run(node, at(hour), { log_compressed: undefined, log_text: runText(node, at(hour), hour), outcomes: outcomes(hour) });

async function bytesOf(db: Db, sql: string): Promise<Buffer> {
  const [row] = await db.rows!(sql);
  return Buffer.from(Object.values(row!)[0] as Uint8Array);
}

/** The log of `id` reads back as `text`, as text and as zstd. */
async function readsBack(t: Test, store: Store, id: number, text: Buffer, what: string): Promise<void> {
  t.ok((await store.getRunLogText(id, 1 << 20))?.equals(text), `${what}: its log's text reads back exactly`);
  t.ok((await decompress((await store.getRunLog(id))!, 'zstd', { maxBytes: 1 << 20 })).equals(text), `${what}: its zstd log too`);
}

function scenario(t: Test, backend: Backend): void {
  t.test("a node-day's damaged base: that day's next runs are stored on their own, and its runs answer ERR_RUN_UNREADABLE", async (t) => {
    const { db, store } = await setup(t, backend);
    for (const id of ['n1', 'n2', 'n3']) await store.createNode({ id, hostname: id });
    const first = await store.insertRun(texted('n1', 8));
    const second = await store.insertRun(texted('n1', 9));
    await store.insertRun(texted('n2', 8));
    const baseId = Number((await db.rows!(`SELECT id FROM run_bases WHERE node_id = 'n1'`))[0]!.id);
    const good = await bytesOf(db, `SELECT log_compressed FROM run_bases WHERE id = ${baseId}`);
    await db.exec(`UPDATE run_bases SET log_compressed = ${bytesLiteral(db, good.subarray(0, good.length - 6))} WHERE id = ${baseId}`);

    // Another store (another server process) has no base cached: it reads the damaged bytes.
    const told: UnreadableValue[] = [];
    const fresh = await db.open({ onUnreadable: (u) => told.push(u) });
    t.equal(await fresh.getRunBase('n1', DAY), null, 'the ingest is given no base to encode against');
    t.equal(told.length, 1, 'the opener is told once');
    t.match(told[0], { value: 'run base', node_id: 'n1', day: DAY, base_id: baseId, error: /zstd/ }, 'which base, and why');

    told.length = 0;
    const one = await fresh.insertRun(texted('n1', 10));
    t.ok(one.inserted, 'a run of that day, alone, is stored');
    const batch = await fresh.insertRuns([texted('n1', 11), texted('n2', 11), texted('n3', 11)]);
    t.same(batch.map((r) => r.ok && r.result.inserted), [true, true, true], "a batch with other nodes' runs: every run stored");
    t.same(told, [], 'told once for that base: not again at each write');
    const other: UnreadableValue[] = [];
    await (await db.open({ onUnreadable: (u) => other.push(u) })).insertRun(texted('n1', 12));
    t.same(other.map((u) => [u.value, u.node_id, u.base_id]), [['run base', 'n1', baseId]], 'another process is told at its first write that meets it');
    const ids = batch.map((r) => (r.ok ? r.result.id : NaN));
    const stored = await db.rows!(`SELECT id, node_id, base_id FROM runs WHERE id IN (${[one.id, ...ids].join(', ')}) ORDER BY id`);
    t.same(stored.map((r) => [r.node_id, r.base_id === null]), [['n1', true], ['n1', true], ['n2', false], ['n3', false]],
      "n1's runs on their own; the other nodes' against their bases as ever");

    for (const s of [fresh, store]) {
      const which = s === fresh ? 'the fresh store' : 'the first store';
      await readsBack(t, s, one.id, runText('n1', at(10), 10), `${which}, the single run`);
      await readsBack(t, s, ids[0]!, runText('n1', at(11), 11), `${which}, the batch's run`);
      await readsBack(t, s, ids[1]!, runText('n2', at(11), 11), `${which}, another node's run`);
    }
    // The runs kept against the damaged base cannot be read back; a store that decoded the base
    // before the damage (the first one, which made it) still has it in memory.
    for (const r of [first, second]) {
      await t.rejects(fresh.getRunLogText(r.id, 1 << 20), { code: 'ERR_RUN_UNREADABLE', message: new RegExp(`run ${r.id}'s stored log cannot be read`) });
      await t.rejects(fresh.getRunLog(r.id), { code: 'ERR_RUN_UNREADABLE' });
    }
    await readsBack(t, store, second.id, runText('n1', at(9), 9), 'the first store, from its memory');
    const page = await fresh.listRuns('n1', 1, 10);
    t.equal(page.total, 5, 'the page lists every run of the node');
    t.same(page.data.map((r) => r.outcomes), [12, 11, 10, 9, 8].map(outcomes), 'with their outcomes (their base\'s are whole)');

    // compact-runs leaves the whole runs of that day as they are, and goes past them.
    const progress = await fresh.compactRuns(100);
    t.match(progress, { converted: 0, skipped: 3, done: true }, 'compaction skips the runs whose base cannot be read');
    t.same((await db.rows!(`SELECT base_id FROM runs WHERE id IN (${one.id}, ${ids[0]}) ORDER BY id`)).map((r) => r.base_id), [null, null], 'they stay on their own');
    await readsBack(t, fresh, one.id, runText('n1', at(10), 10), 'after compaction');
    // The next day makes a new base, and its runs are kept against it again.
    const next = await fresh.insertRun(run('n1', '2024-05-02T08:00:00Z', { log_compressed: undefined, log_text: runText('n1', 'next', 1) }));
    const [row] = await db.rows!(`SELECT base_id FROM runs WHERE id = ${next.id}`);
    t.not(row!.base_id, null, 'the next day has a base of its own');
  });

  t.test("a run whose own stored bytes are damaged answers ERR_RUN_UNREADABLE; the day's other runs read as ever", async (t) => {
    const { db, store } = await setup(t, backend);
    await store.createNode({ id: 'n1', hostname: 'n1' });
    const runs = [];
    for (const h of [8, 9, 10]) runs.push(await store.insertRun(texted('n1', h)));
    // A run compressed alone (as stored before bases, or given compressed), damaged too.
    const alone = await store.insertRun(run('n1', at(11), { log_compressed: Buffer.from('not zstd at all') }));
    const target = runs[1]!.id;
    const good = await bytesOf(db, `SELECT log_compressed FROM runs WHERE id = ${target}`);
    await db.exec(`UPDATE runs SET log_compressed = ${bytesLiteral(db, good.subarray(0, good.length - 4))} WHERE id = ${target}`);
    await t.rejects(store.getRunLogText(target, 1 << 20), { code: 'ERR_RUN_UNREADABLE' }, 'the damaged run');
    await t.rejects(store.getRunLogText(alone.id, 1 << 20), { code: 'ERR_RUN_UNREADABLE' }, 'a run stored alone that is not zstd');
    await t.rejects(store.getRunLogText(runs[0]!.id, 10), { code: 'ERR_DECOMPRESSED_TOO_LARGE' }, 'a limit is still a limit');
    for (const [i, h] of [8, 10].entries()) await readsBack(t, store, runs[i * 2]!.id, runText('n1', at(h), h), `the run at ${h}:00`);
    t.equal((await store.listRuns('n1', 1, 10)).total, 4, 'the page lists every run');
  });
}

t.test('sqlite', async (t) => scenario(t, sqliteBackend));
if (await postgresOrSkipFile(t)) t.test('postgres', async (t) => scenario(t, postgresBackend('capstan_runlog_unreadable')));
