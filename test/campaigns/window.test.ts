/**
 * Maintenance windows by the zone's wall clock: winter and summer offsets, the spring gap and
 * the autumn repeat, windows across midnight, and the request checks.
 */
import t from 'tap';
import { parseWindow, windowState, zonedToUtc } from '@capstan/server/campaigns/window';

const ms = (s: string) => Date.parse(s);
const iso = (n: number | null) => (n === null ? null : new Date(n).toISOString());
const state = (w: ReturnType<typeof parseWindow> | null, at: string) => {
  const s = windowState(w, ms(at));
  return { open: s.open, closes_at: iso(s.closes_at), opens_at: iso(s.opens_at) };
};

t.test('a weekend window in Paris follows the offset of the season', async (t) => {
  const w = parseWindow({ days: ['sat', 'sun'], start: '02:00', duration: '3h', tz: 'Europe/Paris' });
  t.same(w, { days: ['sat', 'sun'], start: '02:00', duration_ms: 3 * 3600_000, tz: 'Europe/Paris' });
  // Saturday 10 January 2026, UTC+1: 02:00 local is 01:00Z.
  t.same(state(w, '2026-01-10T00:59:59.000Z'), { open: false, closes_at: null, opens_at: '2026-01-10T01:00:00.000Z' });
  t.same(state(w, '2026-01-10T01:00:00.000Z'), { open: true, closes_at: '2026-01-10T04:00:00.000Z', opens_at: null });
  t.same(state(w, '2026-01-10T04:00:00.000Z'), { open: false, closes_at: null, opens_at: '2026-01-11T01:00:00.000Z' }, 'the end is excluded; Sunday is next');
  t.same(state(w, '2026-01-11T05:00:00.000Z'), { open: false, closes_at: null, opens_at: '2026-01-17T01:00:00.000Z' }, 'after Sunday: next Saturday');
  // Saturday 11 July 2026, UTC+2: 02:00 local is 00:00Z.
  t.same(state(w, '2026-07-11T00:30:00.000Z'), { open: true, closes_at: '2026-07-11T03:00:00.000Z', opens_at: null });
  t.same(state(w, '2026-07-10T23:59:00.000Z'), { open: false, closes_at: null, opens_at: '2026-07-11T00:00:00.000Z' });
});

t.test('daylight saving edges: the skipped hour moves the start forward, the repeated hour takes the first', async (t) => {
  // Sunday 29 March 2026: Paris clocks go 02:00 → 03:00; 02:30 does not exist.
  const spring = parseWindow({ days: ['sun'], start: '02:30', duration: '1h', tz: 'Europe/Paris' });
  t.equal(iso(zonedToUtc('Europe/Paris', Date.UTC(2026, 2, 29, 2, 30))), '2026-03-29T01:30:00.000Z', '02:30 → 03:30 CEST');
  t.same(state(spring, '2026-03-29T01:00:00.000Z'), { open: false, closes_at: null, opens_at: '2026-03-29T01:30:00.000Z' });
  t.same(state(spring, '2026-03-29T02:00:00.000Z'), { open: true, closes_at: '2026-03-29T02:30:00.000Z', opens_at: null });
  // A window opening before the change lasts its real duration across it.
  const across = parseWindow({ days: ['sun'], start: '01:00', duration: '3h', tz: 'Europe/Paris' });
  t.same(state(across, '2026-03-29T02:59:00.000Z'), { open: true, closes_at: '2026-03-29T03:00:00.000Z', opens_at: null }, '01:00 CET + 3h = 05:00 CEST');
  // Sunday 25 October 2026: 03:00 CEST → 02:00 CET; 02:30 happens twice, at 00:30Z and 01:30Z.
  const autumn = parseWindow({ days: ['sun'], start: '02:30', duration: '30m', tz: 'Europe/Paris' });
  t.equal(iso(zonedToUtc('Europe/Paris', Date.UTC(2026, 9, 25, 2, 30))), '2026-10-25T00:30:00.000Z');
  t.same(state(autumn, '2026-10-25T00:45:00.000Z'), { open: true, closes_at: '2026-10-25T01:00:00.000Z', opens_at: null });
  t.same(state(autumn, '2026-10-25T01:40:00.000Z'), { open: false, closes_at: null, opens_at: '2026-11-01T01:30:00.000Z' }, 'not again at the repeat');
  // New York changes on other dates (8 March 2026): 02:30 is skipped there too.
  t.equal(iso(zonedToUtc('America/New_York', Date.UTC(2026, 2, 8, 2, 30))), '2026-03-08T07:30:00.000Z', '02:30 EST offset → 03:30 EDT');
  t.equal(iso(zonedToUtc('America/New_York', Date.UTC(2026, 2, 8, 4, 0))), '2026-03-08T08:00:00.000Z', 'EDT after the change');
});

t.test('windows across midnight belong to the day they start on', async (t) => {
  const w = parseWindow({ days: ['fri'], start: '23:00', duration: '3h', tz: 'UTC' });
  // Friday 9 January 2026.
  t.same(state(w, '2026-01-09T22:59:00.000Z'), { open: false, closes_at: null, opens_at: '2026-01-09T23:00:00.000Z' });
  t.same(state(w, '2026-01-10T01:00:00.000Z'), { open: true, closes_at: '2026-01-10T02:00:00.000Z', opens_at: null }, 'Saturday 01:00 is still Friday\'s window');
  t.same(state(w, '2026-01-10T02:00:00.000Z'), { open: false, closes_at: null, opens_at: '2026-01-16T23:00:00.000Z' });
  const tokyo = parseWindow({ days: ['mon'], start: '22:00', duration: '4h', tz: 'Asia/Tokyo' });
  // Monday 12 January 2026 22:00 JST = 13:00Z, until 17:00Z (Tuesday 02:00 JST).
  t.same(state(tokyo, '2026-01-12T16:59:00.000Z'), { open: true, closes_at: '2026-01-12T17:00:00.000Z', opens_at: null });
  // Overlapping openings join: every day for 25 hours is open for good.
  const always = parseWindow({ days: ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'], start: '00:00', duration: '25h', tz: 'UTC' });
  const s = windowState(always, ms('2026-01-12T12:00:00.000Z'));
  t.ok(s.open && s.closes_at! > ms('2026-01-18T00:00:00.000Z'), 'chained openings run on');
  t.same(windowState(null, 0), { open: true, closes_at: null, opens_at: null }, 'no window: always open');
});

t.test('bad windows are refused with a coded error', async (t) => {
  const good = { days: ['sat'], start: '02:00', duration: '3h', tz: 'Europe/Paris' };
  t.equal(parseWindow({ days: ['mon'], start: '00:00', duration: '1h' }).tz, 'UTC', 'UTC when no zone is given');
  for (const [what, v] of [
    ['a day', { ...good, days: ['saturday'] }], ['no day', { ...good, days: [] }], ['a time', { ...good, start: '24:00' }], ['a time', { ...good, start: '2:00' }],
    ['a duration', { ...good, duration: '30s' }], ['a duration', { ...good, duration: '8d' }], ['a duration', { ...good, duration: 3 }],
    ['a zone', { ...good, tz: 'Mars/Olympus_Mons' }], ['a field', { ...good, every: 'week' }], ['an object', 'sat 02:00'],
  ] as const) {
    t.throws(() => parseWindow(v), { code: 'ERR_BAD_REQUEST' }, `refused: ${what} (${JSON.stringify(v)})`);
  }
});
