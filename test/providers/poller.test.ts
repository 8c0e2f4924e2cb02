/**
 * The Poller that relays and the server run (toolkit/src/providers/poller.ts), with static
 * managers over host files: each manager polled at once and then at its own interval, a failed
 * poll reported as {error}, managers created, changed and deleted upstream picked up at the next
 * refresh, a failing manager list keeping the current ones, and stop ending everything.
 */
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { checkManager, Poller, type ManagerSpec, type PollOutcome } from '@capstan/toolkit/providers/index';
import { waitFor, programDir } from '../helpers/programs.js';

interface Report {
  id: string;
  outcome: PollOutcome;
  interval: number;
}

function setup(t: Test) {
  const dir = programDir(t);
  const reports: Report[] = [];
  let specs: ManagerSpec[] = [];
  let listFails = false;
  const poller = new Poller({
    refreshMs: 3_600_000,
    managers: async () => {
      if (listFails) throw new Error('upstream down');
      return specs;
    },
    report: async (spec, outcome) => void reports.push({ id: spec.id, outcome, interval: spec.poll_interval_ms }),
  });
  t.teardown(() => poller.stop());
  const hosts = (name: string, list: string[]) => {
    const file = join(dir, name);
    writeFileSync(file, list.join('\n'));
    return file;
  };
  const spec = (id: string, file: string, poll = '1h') => checkManager({ id, type: 'static', poll_interval: poll, config: { file } });
  return {
    poller, reports, hosts, spec,
    set: (s: ManagerSpec[]) => void (specs = s),
    failList: (v: boolean) => void (listFails = v),
    seen: (id: string) => reports.filter((r) => r.id === id),
  };
}

const names = (o: PollOutcome | undefined) => (o && 'instances' in o ? o.instances.map((i) => i.hostname) : o);

t.test('each manager is polled at once, then at its own interval; a failed poll is reported as its error', async (t) => {
  const s = setup(t);
  const fast = s.hosts('fast', ['a', 'b']);
  s.set([s.spec('fast', fast, '1s'), s.spec('slow', s.hosts('slow', ['c'])), s.spec('broken', join(t.testdirName, 'absent'))]);
  s.poller.start();
  await waitFor(async () => (s.reports.length >= 3 ? true : undefined), 'the first polls');
  t.same(names(s.seen('fast')[0]?.outcome), ['a', 'b']);
  t.same(names(s.seen('slow')[0]?.outcome), ['c']);
  t.match(s.seen('broken')[0]?.outcome, { error: /static host file .*absent/ });
  t.same(s.poller.managerIds().sort(), ['broken', 'fast', 'slow']);
  // The file changes; the 1s manager sees it at its next poll, the 1h one is not polled again.
  writeFileSync(fast, 'a\nd\n');
  await waitFor(async () => (s.seen('fast').length >= 2 ? true : undefined), 'the second poll of the 1s manager', 10_000);
  t.same(names(s.seen('fast')[1]?.outcome), ['a', 'd']);
  t.equal(s.seen('slow').length, 1);
});

t.test('managers created, changed and deleted upstream are picked up at the next refresh; a failing list keeps the current ones', async (t) => {
  const s = setup(t);
  const one = s.hosts('one', ['a']);
  s.set([s.spec('m1', one), s.spec('m2', s.hosts('two', ['b']))]);
  await s.poller.refresh();
  await Promise.all([s.poller.pollNow('m1'), s.poller.pollNow('m2')]);
  const count = s.reports.length;
  t.ok(count >= 2);

  // Unchanged: not restarted (no new poll); removed: dropped; changed: restarted (polled at once).
  s.set([s.spec('m1', one, '2h'), s.spec('m3', s.hosts('three', ['c']))]);
  await s.poller.refresh();
  t.same(s.poller.managerIds().sort(), ['m1', 'm3']);
  await waitFor(async () => (s.seen('m3').length >= 1 && s.reports.some((r) => r.id === 'm1' && r.interval === 7_200_000) ? true : undefined), 'the new and the changed manager polled');
  // Its first poll (started by the refresh) and the pollNow above may have been one or two.
  const m2Polls = s.seen('m2').length;
  t.ok(m2Polls >= 1);
  await s.poller.pollNow('m2');
  t.equal(s.seen('m2').length, m2Polls, 'a dropped manager is polled no more');

  s.failList(true);
  await s.poller.refresh();
  t.same(s.poller.managerIds().sort(), ['m1', 'm3'], 'the upstream being down drops nothing');
});

t.test('stop ends timers and reports nothing after', async (t) => {
  const s = setup(t);
  s.set([s.spec('m1', s.hosts('one', ['a']), '1s')]);
  s.poller.start();
  await waitFor(async () => (s.reports.length >= 1 ? true : undefined), 'the first poll');
  await s.poller.stop();
  const n = s.reports.length;
  await s.poller.pollNow('m1');
  t.equal(s.reports.length, n, 'a poll after stop reports nothing');
});
