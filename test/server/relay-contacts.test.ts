/**
 * Relay contacts (server/src/registry/relay-contacts.ts) with a recording store and a hand-moved
 * clock: the authorizer's contacts are throttled per relay, renewals are not, the beat writes the
 * linked relays not written within it, a failing store refuses nothing and is not hammered, and
 * the beat follows the unreachable threshold.
 */
import t from 'tap';
import { capstanError, silentLogger, type Logger } from '@capstan/shared';
import { MAX_REMEMBERED, MIN_BEAT_MS, RelayContacts, THROTTLE_MS } from '@capstan/server/registry/relay-contacts';

function harness(unreachableAfterMs = 15 * 60_000) {
  let now = Date.parse('2024-05-01T10:00:00Z');
  const writes: Array<[string, string, string]> = [];
  let failing = false;
  const warnings: string[] = [];
  const log: Logger = { ...silentLogger, warn: ((_o: unknown, msg?: string) => void warnings.push(msg ?? '')) as Logger['warn'] };
  const contacts = new RelayContacts({
    store: {
      recordContact: async (id, at, _actor, cause) => {
        if (failing) throw capstanError('ERR_STORE', 'database down');
        writes.push([id, at, cause ?? '']);
        return null;
      },
    },
    log,
    unreachableAfterMs,
    clock: () => now,
  });
  return {
    contacts, writes, warnings,
    advance: (ms: number) => void (now += ms),
    fail: (on: boolean) => void (failing = on),
  };
}

t.test('the beat is a quarter of the unreachable threshold; the throttle a minute, or the beat when shorter', async (t) => {
  const d = harness();
  t.equal(d.contacts.beatMs, 225_000, '15 min threshold (5 min × 3) → 3 min 45 s');
  t.equal(d.contacts.throttleMs, THROTTLE_MS);
  const short = harness(2000);
  t.equal(short.contacts.beatMs, 500);
  t.equal(short.contacts.throttleMs, 500, 'a throttle longer than the beat would let a relay seen only by requests go unreachable');
  t.equal(harness(100).contacts.beatMs, MIN_BEAT_MS, 'never below the floor');
});

t.test('requests are throttled to one write per relay per minute; renewals always write', async (t) => {
  const { contacts, writes, advance } = harness();
  await contacts.seen('r1');
  await contacts.seen('r1');
  await contacts.seen('r2');
  advance(59_999);
  await contacts.seen('r1');
  t.same(writes.map(([id, at, cause]) => `${id} ${at} ${cause}`), [
    'r1 2024-05-01T10:00:00.000Z relay request',
    'r2 2024-05-01T10:00:00.000Z relay request',
  ], 'one write per relay within the minute');
  advance(1);
  await contacts.seen('r1');
  t.equal(writes.length, 3, 'a minute later, the next request writes');
  t.same(writes[2], ['r1', '2024-05-01T10:01:00.000Z', 'relay request']);
  await contacts.record('r1', 'relay token renewal');
  t.same(writes[3], ['r1', '2024-05-01T10:01:00.000Z', 'relay token renewal'], 'a renewal is not throttled');
  await contacts.seen('r1');
  t.equal(writes.length, 4, 'and counts for the throttle');
  // Concurrent requests while the first write is in flight: one write.
  advance(THROTTLE_MS);
  await Promise.all([contacts.seen('r3'), contacts.seen('r3'), contacts.seen('r3')]);
  t.equal(writes.filter(([id]) => id === 'r3').length, 1);
});

t.test('a failing store refuses nothing, logs, and is not hammered', async (t) => {
  const { contacts, writes, warnings, advance, fail } = harness();
  fail(true);
  await t.resolves(contacts.seen('r1'), 'the relay is let in all the same');
  t.same(warnings, ['relay contact not recorded']);
  await contacts.seen('r1');
  t.equal(warnings.length, 1, 'no second attempt within the throttle');
  fail(false);
  advance(THROTTLE_MS);
  await contacts.seen('r1');
  t.equal(writes.length, 1, 'written once the throttle passed');
});

t.test('the beat writes the linked relays not written within it, one beat at a time', async (t) => {
  const { contacts, writes, warnings, advance, fail } = harness();
  let linked = ['r1', 'r2', 'r3'];
  contacts.start(() => linked);
  t.teardown(() => contacts.stop());
  await contacts.seen('r2');
  t.equal(await contacts.beat(), 2, 'r2 was just written by its request');
  t.same(writes.map(([id, , cause]) => `${id} ${cause}`), ['r2 relay request', 'r1 relay link', 'r3 relay link']);
  advance(contacts.beatMs - 1);
  t.equal(await contacts.beat(), 0, 'nothing due within a beat');
  advance(1);
  linked = ['r1', 'r3'];
  t.equal(await contacts.beat(), 3 - 1, 'a relay no longer linked is not written');
  t.same(writes.slice(3).map(([id, at]) => `${id} ${at}`), ['r1 2024-05-01T10:03:45.000Z', 'r3 2024-05-01T10:03:45.000Z']);
  // Two beats asked at once are one beat.
  advance(contacts.beatMs);
  const [a, b] = await Promise.all([contacts.beat(), contacts.beat()]);
  t.equal(a, 2);
  t.equal(b, 2, 'the second joined the first');
  t.equal(writes.length, 7);
  // The database down: one warning per beat, not per relay, and the beat goes on next time.
  advance(contacts.beatMs);
  fail(true);
  t.equal(await contacts.beat(), 0);
  t.same(warnings, ['linked relays\' contacts not recorded']);
  fail(false);
  advance(contacts.beatMs);
  t.equal(await contacts.beat(), 2);
  await contacts.stop();
  advance(contacts.beatMs);
  t.equal(await contacts.beat(), 0, 'stopped: the beat writes nothing');
});

t.test('the throttle\'s memory is bounded', async (t) => {
  const { contacts, writes, advance } = harness();
  for (let i = 0; i < MAX_REMEMBERED; i++) await contacts.seen(`r${i}`);
  t.equal(writes.length, MAX_REMEMBERED);
  await contacts.seen('r0');
  t.equal(writes.length, MAX_REMEMBERED, 'still remembered while the memory is not full');
  // Full: a new relay drops the entries past the throttle first (none yet here: all cleared).
  await contacts.seen('new-1');
  t.equal(writes.length, MAX_REMEMBERED + 1);
  await contacts.seen('r0');
  t.equal(writes.length, MAX_REMEMBERED + 2, 'cleared: r0 writes again (a few extra writes, not unbounded memory)');
  advance(THROTTLE_MS);
  await contacts.seen('new-1');
  t.equal(writes.length, MAX_REMEMBERED + 3);
});
