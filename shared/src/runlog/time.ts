/**
 * The two timestamp forms of a RUDDER run log, checked and normalised without `Date`.
 *
 * Line stamps and file names are RFC 3339 (`2019-05-11T12:58:13+00:00`); the start time inside a
 * report is `%Y-%m-%d %H:%M:%S%z` (`2020-04-07 13:20:57+02:00`, `+0200`, or a space before the
 * offset). Both are normalised to RFC 3339 with the writer's offset kept, as relayd's chrono
 * output does. `Date` would lose the offset and accept impossible dates, so these scanners work on
 * character codes at a position in a larger string: the parser calls them on every line.
 */

const DAYS = [31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31];

function num2(s: string, p: number): number {
  const a = s.charCodeAt(p) - 48;
  const b = s.charCodeAt(p + 1) - 48;
  // NaN (past the end) fails both comparisons, so no bounds check is needed
  if (!(a >= 0 && a <= 9 && b >= 0 && b <= 9)) return -1;
  return a * 10 + b;
}

/** `YYYY-MM-DD` at p: true when it is a real calendar date. */
function dateAt(s: string, p: number): boolean {
  const hi = num2(s, p);
  const lo = num2(s, p + 2);
  if (hi < 0 || lo < 0 || s.charCodeAt(p + 4) !== 45 || s.charCodeAt(p + 7) !== 45) return false;
  const year = hi * 100 + lo;
  const month = num2(s, p + 5);
  const day = num2(s, p + 8);
  if (month < 1 || month > 12 || day < 1) return false;
  const leap = year % 4 === 0 && (year % 100 !== 0 || year % 400 === 0);
  return day <= (month === 2 && leap ? 29 : DAYS[month - 1]!);
}

/** `HH:MM:SS` at p (second 60 allowed: chrono accepts a leap second). */
function timeAt(s: string, p: number): boolean {
  const h = num2(s, p);
  const m = num2(s, p + 3);
  const sec = num2(s, p + 6);
  return h >= 0 && h <= 23 && m >= 0 && m <= 59 && sec >= 0 && sec <= 60
    && s.charCodeAt(p + 2) === 58 && s.charCodeAt(p + 5) === 58;
}

/** `±HH:MM` (or `±HHMM` when `colon` is false) at p; returns its end or -1. */
function offsetAt(s: string, p: number, colonOptional: boolean): number {
  const sign = s.charCodeAt(p);
  if (sign !== 43 && sign !== 45) return -1;
  const h = num2(s, p + 1);
  if (h < 0 || h > 23) return -1;
  let q = p + 3;
  if (s.charCodeAt(q) === 58) q++;
  else if (!colonOptional) return -1;
  const m = num2(s, q);
  return m >= 0 && m <= 59 ? q + 2 : -1;
}

/**
 * End (exclusive) of an RFC 3339 timestamp starting at p, or -1. Accepts what chrono's
 * `parse_from_rfc3339` does between spaces: `T`/`t`, up to 9 fraction digits, `Z`/`z` or `±HH:MM`.
 */
export function rfc3339End(s: string, p: number): number {
  if (!dateAt(s, p)) return -1;
  const t = s.charCodeAt(p + 10);
  if ((t !== 84 && t !== 116) || !timeAt(s, p + 11)) return -1;
  let q = p + 19;
  if (s.charCodeAt(q) === 46) {
    const f = ++q;
    while (q - f < 10 && s.charCodeAt(q) >= 48 && s.charCodeAt(q) <= 57) q++;
    if (q === f || q - f > 9) return -1;
  }
  const z = s.charCodeAt(q);
  if (z === 90 || z === 122) return q + 1;
  return offsetAt(s, q, false);
}

/** Offset text as chrono prints it: `Z` and `-00:00` become `+00:00`. */
function offsetText(s: string, p: number, end: number): string {
  if (end === p + 1) return '+00:00';
  const hh = s.slice(p + 1, p + 3);
  const mm = s.slice(end - 2, end);
  const sign = hh === '00' && mm === '00' ? '+' : s[p];
  return `${sign}${hh}:${mm}`;
}

/**
 * Canonical text of the timestamp in [p, end) found by `rfc3339End`: upper-case `T`, fraction in
 * groups of 3 digits and dropped when zero, numeric offset. Already canonical text is sliced.
 */
export function normalizeRfc3339(s: string, p: number, end: number): string {
  if (end - p === 25 && s.charCodeAt(p + 10) === 84 && s.charCodeAt(p + 19) !== 46
    && !(s.charCodeAt(p + 19) === 45 && s.startsWith('00:00', p + 20))) {
    return s.slice(p, end);
  }
  let q = p + 19;
  let frac = '';
  if (s.charCodeAt(q) === 46) {
    const f = q + 1;
    q = f;
    while (s.charCodeAt(q) >= 48 && s.charCodeAt(q) <= 57) q++;
    let digits = s.slice(f, q).padEnd(9, '0');
    // chrono's AutoSi: milli, micro or nano precision, nothing when zero
    if (digits === '000000000') digits = '';
    else if (digits.endsWith('000000')) digits = digits.slice(0, 3);
    else if (digits.endsWith('000')) digits = digits.slice(0, 6);
    if (digits) frac = `.${digits}`;
  }
  return `${s.slice(p, p + 10)}T${s.slice(p + 11, p + 19)}${frac}${offsetText(s, q, end)}`;
}

/** A whole string as a normalised RFC 3339 timestamp, or null. */
export function parseRfc3339(text: string): string | null {
  return rfc3339End(text, 0) === text.length && text.length > 0 ? normalizeRfc3339(text, 0, text.length) : null;
}

/**
 * A report's start time in [p, end) (`%Y-%m-%d %H:%M:%S%z`, spaces allowed before the offset,
 * `±HHMM` or `±HH:MM`) as RFC 3339, or null when it is not exactly that.
 */
export function parseStartTime(s: string, p: number, end: number): string | null {
  if (!dateAt(s, p) || s.charCodeAt(p + 10) !== 32 || !timeAt(s, p + 11)) return null;
  let q = p + 19;
  while (q < end && s.charCodeAt(q) === 32) q++;
  const oe = offsetAt(s, q, true);
  if (oe !== end) return null;
  return `${s.slice(p, p + 10)}T${s.slice(p + 11, p + 19)}${offsetText(s, q, oe)}`;
}

/** An RFC 3339 timestamp in the start-time form reports carry (whole seconds), or null. */
export function startTimeText(rfc3339: string): string | null {
  const end = rfc3339End(rfc3339, 0);
  if (end !== rfc3339.length || rfc3339.charCodeAt(19) === 46) return null;
  const n = normalizeRfc3339(rfc3339, 0, end);
  return `${n.slice(0, 10)} ${n.slice(11)}`;
}

/** A `Date` as RFC 3339 in UTC with whole seconds (`2018-08-24T15:55:01+00:00`), as agents stamp lines. */
export function rfc3339Utc(date: Date): string {
  const iso = date.toISOString(); // throws RangeError on an invalid date; callers check first
  return `${iso.slice(0, 19)}+00:00`;
}
