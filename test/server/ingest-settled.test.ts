/**
 * Which uploaded files the ingest is done with: a wait ends when its file settles (or had
 * already), or after its bound; memory is bounded per kind.
 */
import t from 'tap';
import { MAX_REMEMBERED_NAMES, SettledFiles } from '@capstan/server/ingest/settled';

t.test('a wait ends when its file settles, at once when it already had, false after its bound', async (t) => {
  const s = new SettledFiles();
  const pending = s.wait('inventories', 'a.json', 60_000);
  const other = s.wait('inventories', 'b.json', 60_000);
  let bSettled = false;
  void other.then(() => { bSettled = true; });
  s.settle('reports', 'a.json');
  s.settle('inventories', 'a.json');
  t.equal(await pending, true, 'woken by its own kind and name');
  await Promise.resolve();
  t.equal(bSettled, false, 'another name still waits');
  s.settle('inventories', 'b.json');
  t.equal(await other, true);
  t.equal(await s.wait('inventories', 'a.json', 0), true, 'already settled: at once, whatever the bound');
  t.equal(await s.wait('inventories', 'c.json', 0), false, 'no bound: no wait');
  t.equal(await s.wait('inventories', 'c.json', 20), false, 'the bound passed');
  const twice = [s.wait('inventories', 'd.json', 60_000), s.wait('inventories', 'd.json', 60_000)];
  s.settle('inventories', 'd.json');
  t.same(await Promise.all(twice), [true, true], 'every waiter of a name is woken');
});

t.test('only the last MAX_REMEMBERED_NAMES names of a kind are remembered', async (t) => {
  const s = new SettledFiles();
  for (let i = 0; i <= MAX_REMEMBERED_NAMES; i++) s.settle('inventories', `f${i}`);
  t.equal(await s.wait('inventories', 'f0', 0), false, 'the oldest forgotten');
  t.equal(await s.wait('inventories', 'f1', 0), true);
  t.equal(await s.wait('inventories', `f${MAX_REMEMBERED_NAMES}`, 0), true);
});
