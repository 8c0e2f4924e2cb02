/**
 * Maintenance windows: "each listed weekday from HH:MM for a duration, in a time zone". Times are
 * wall-clock times of the zone, so a window follows daylight saving time (02:00 Paris is 01:00
 * UTC in winter, 00:00 UTC in summer). Two edges, decided once:
 * - a start inside the hour the clocks skip (02:30 on the spring change) opens when the clock
 *   reads 03:30, i.e. at the same UTC instant the old offset gives (the window is not lost);
 * - a start inside the hour the clocks repeat (02:30 twice in autumn) opens at the first one.
 * The window lasts `duration` of real time from its opening, across midnight if it must.
 */
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { WEEKDAYS, type MaintenanceWindow, type Weekday } from '../store/campaigns/types.js';

const DAY_MS = 86_400_000;
export const MAX_WINDOW_MS = 7 * DAY_MS;
const HHMM = /^([01]\d|2[0-3]):([0-5]\d)$/;

function bad(message: string): never {
  throw capstanError('ERR_BAD_REQUEST', message);
}

const formats = new Map<string, Intl.DateTimeFormat>();
function format(tz: string): Intl.DateTimeFormat {
  let f = formats.get(tz);
  if (!f) {
    f = new Intl.DateTimeFormat('en-US', { timeZone: tz, hourCycle: 'h23', year: 'numeric', month: 'numeric', day: 'numeric', hour: 'numeric', minute: 'numeric', second: 'numeric' });
    formats.set(tz, f);
  }
  return f;
}

/** Whether the zone is one this runtime knows. */
export function isTimeZone(tz: string): boolean {
  try {
    format(tz);
    return true;
  } catch {
    return false;
  }
}

/** The zone's wall clock at `utcMs`, as if it were UTC (ms). */
function wall(tz: string, utcMs: number): number {
  const p = Object.fromEntries(format(tz).formatToParts(new Date(utcMs)).map((x) => [x.type, x.value]));
  return Date.UTC(Number(p.year), Number(p.month) - 1, Number(p.day), Number(p.hour), Number(p.minute), Number(p.second));
}

const offset = (tz: string, utcMs: number) => wall(tz, utcMs) - Math.floor(utcMs / 1000) * 1000;

/** The UTC instant the zone's wall clock reads `localMs` (see the top of the file for gaps and repeats). */
export function zonedToUtc(tz: string, localMs: number): number {
  const before = offset(tz, localMs - DAY_MS / 2);
  const after = offset(tz, localMs + DAY_MS / 2);
  const candidates = [localMs - before, localMs - after].filter((t) => wall(tz, t) === localMs).sort((a, b) => a - b);
  return candidates[0] ?? localMs - before;
}

/** A window from the API's {days, start, duration, tz}, checked. */
export function parseWindow(raw: unknown, name = 'window'): MaintenanceWindow {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) bad(`${name} must be an object {days, start, duration, tz}`);
  const { days, start, duration, tz, ...rest } = raw as Record<string, unknown>;
  if (Object.keys(rest).length) bad(`${name} has unknown fields: ${Object.keys(rest).join(', ')}`);
  if (!Array.isArray(days) || days.length === 0 || days.some((d) => !WEEKDAYS.includes(d as Weekday))) bad(`${name}.days must be a non-empty list of ${WEEKDAYS.join(', ')}`);
  if (typeof start !== 'string' || !HHMM.test(start)) bad(`${name}.start must be a time HH:MM (00:00 to 23:59)`);
  const ms = typeof duration === 'string' ? parseDuration(duration) : null;
  if (ms === null || ms < 60_000 || ms > MAX_WINDOW_MS) bad(`${name}.duration must be a duration from 1m to 7d, like "3h"`);
  const zone = tz === undefined ? 'UTC' : tz;
  if (typeof zone !== 'string' || zone.length > 64 || !isTimeZone(zone)) bad(`${name}.tz must be an IANA time zone like Europe/Paris`);
  return { days: [...new Set(days as Weekday[])], start, duration_ms: ms, tz: zone };
}

/** The openings [start, end) of `w` whose local start day is within `fromDay`..`toDay` days of `atMs`'s local day. */
function openings(w: MaintenanceWindow, atMs: number, fromDay: number, toDay: number): Array<[number, number]> {
  const [h, m] = w.start.split(':').map(Number) as [number, number];
  const local = wall(w.tz, atMs);
  const day0 = Math.floor(local / DAY_MS) * DAY_MS;
  const out: Array<[number, number]> = [];
  for (let k = fromDay; k <= toDay; k++) {
    const day = day0 + k * DAY_MS;
    if (!w.days.includes(WEEKDAYS[new Date(day).getUTCDay()]!)) continue;
    const start = zonedToUtc(w.tz, day + h * 3_600_000 + m * 60_000);
    out.push([start, start + w.duration_ms]);
  }
  return out;
}

export interface WindowState {
  open: boolean;
  /** Open: when the current opening ends (overlapping ones joined). */
  closes_at: number | null;
  /** Closed: when the next one starts. */
  opens_at: number | null;
}

/** Whether `w` is open at `nowMs`, and when that changes. A null window is always open. */
export function windowState(w: MaintenanceWindow | null, nowMs: number): WindowState {
  if (!w) return { open: true, closes_at: null, opens_at: null };
  const all = openings(w, nowMs, -8, 8).sort((a, b) => a[0] - b[0]);
  let end: number | null = null;
  for (const [s, e] of all) {
    if (s <= nowMs && nowMs < e) end = Math.max(end ?? e, e);
  }
  if (end !== null) {
    // Openings that begin before this one ends continue it.
    for (const [s, e] of all) if (s <= end && e > end) end = e;
    return { open: true, closes_at: end, opens_at: null };
  }
  const next = all.find(([s]) => s > nowMs);
  return { open: false, closes_at: null, opens_at: next ? next[0] : null };
}
