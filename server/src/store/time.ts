/**
 * Timestamps in the registry: what callers hand us is RFC 3339 with any offset (a run's start
 * time is copied from the agent's reports); what we store for ordering and return in records is
 * one spelling, `YYYY-MM-DDTHH:MM:SS.sssZ`. One spelling means ISO strings compare correctly as
 * text in SQLite, and both backends agree to the millisecond (Postgres would keep microseconds,
 * SQLite text would keep whatever it got; we drop sub-millisecond digits in both).
 */
import { capstanError } from '@capstan/shared/errors';

// RFC 3339, plus the space separator and `+hhmm` offsets that RUDDER reports use in practice.
const RFC3339 = /^(\d{4})-(\d{2})-(\d{2})[Tt ](\d{2}):(\d{2}):(\d{2})(?:\.(\d+))?([Zz]|[+-]\d{2}:?\d{2})$/;

/** Parse an RFC 3339 timestamp into epoch milliseconds, or undefined if it is not one. */
export function parseRfc3339(value: string): number | undefined {
  const m = RFC3339.exec(value);
  if (!m) return undefined;
  const [year, month, day, hour, minute, second] = m.slice(1, 7).map(Number) as [number, number, number, number, number, number];
  const millis = m[7] ? Number(m[7].slice(0, 3).padEnd(3, '0')) : 0;
  // A leap second (:60) is stored as :59.999 rather than rejected: the run did happen.
  const sec = second === 60 ? 59 : second;
  const ms = second === 60 ? 999 : millis;
  const local = Date.UTC(year, month - 1, day, hour, minute, sec, ms);
  // Date.UTC rolls 2024-02-31 over into March; a round trip catches impossible dates.
  const check = new Date(local);
  if (check.getUTCFullYear() !== year || check.getUTCMonth() !== month - 1 || check.getUTCDate() !== day
    || hour > 23 || minute > 59 || second > 60) return undefined;
  const zone = m[8]!;
  if (zone === 'Z' || zone === 'z') return local;
  const sign = zone[0] === '-' ? -1 : 1;
  const digits = zone.slice(1).replace(':', '');
  const offH = Number(digits.slice(0, 2));
  const offM = Number(digits.slice(2, 4));
  if (offH > 23 || offM > 59) return undefined;
  return local - sign * (offH * 60 + offM) * 60_000;
}

/**
 * Normalise a timestamp to ISO 8601 UTC with milliseconds. A value that is not a timestamp is
 * a caller's bug or bad input, never a database problem, so it is a permanent error.
 */
export function toUtcIso(value: string, field: string): string {
  const ms = typeof value === 'string' ? parseRfc3339(value) : undefined;
  if (ms === undefined || !Number.isFinite(ms)) {
    throw capstanError('ERR_BAD_REQUEST', `${field} is not an RFC 3339 timestamp`);
  }
  return new Date(ms).toISOString();
}

/** A run range's ends normalised (from inclusive, to exclusive); an absent end is null. */
export function runRange(range: { from?: string; to?: string }): { from: string | null; to: string | null } {
  return {
    from: range.from === undefined ? null : toUtcIso(range.from, 'from'),
    to: range.to === undefined ? null : toUtcIso(range.to, 'to'),
  };
}

/** A time as read back: a Date from node-pg, ISO text already from SQLite. */
export const isoOf = (v: unknown): string => (v instanceof Date ? v.toISOString() : String(v));
