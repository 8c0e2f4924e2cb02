/**
 * Debian version order (dpkg's `verrevcmp`), written from its definition in deb-version(7): an
 * optional numeric epoch before the first `:`, the upstream version, an optional revision after
 * the last `-`. Each of upstream and revision is compared as alternating runs of non-digits and
 * digits: non-digits character by character with `~` before everything (even the end of the run),
 * then the end, then letters, then every other character; digits by numeric value.
 * RPM's rpmvercmp agrees with it on the versions packages use in practice (`~` included).
 *
 * `versionKey` turns a version into a string whose byte order is that version order, so that
 * both stores compare versions with a plain (indexable) `<` on a precomputed column.
 */

function split(v: string): { epoch: string; upstream: string; revision: string } {
  const colon = v.indexOf(':');
  const hasEpoch = colon > 0 && /^\d+$/.test(v.slice(0, colon));
  const epoch = hasEpoch ? v.slice(0, colon) : '0';
  const rest = hasEpoch ? v.slice(colon + 1) : v;
  const dash = rest.lastIndexOf('-');
  return dash > 0 ? { epoch, upstream: rest.slice(0, dash), revision: rest.slice(dash + 1) } : { epoch, upstream: rest, revision: '' };
}

const isDigit = (c: string) => c >= '0' && c <= '9';
const isLetter = (c: string) => (c >= 'A' && c <= 'Z') || (c >= 'a' && c <= 'z');

/** dpkg's order of one character of a non-digit run ('' is the run's end). */
function order(c: string): number {
  if (c === '' || isDigit(c)) return 0;
  if (isLetter(c)) return c.charCodeAt(0);
  if (c === '~') return -1;
  return c.charCodeAt(0) + 256;
}

function compareRuns(a: string, b: string): number {
  let i = 0;
  let j = 0;
  while (i < a.length || j < b.length) {
    let diff = 0;
    while ((i < a.length && !isDigit(a[i]!)) || (j < b.length && !isDigit(b[j]!))) {
      const ac = order(a[i] ?? '');
      const bc = order(b[j] ?? '');
      if (ac !== bc) return ac - bc;
      i++;
      j++;
    }
    while (a[i] === '0') i++;
    while (b[j] === '0') j++;
    while (i < a.length && isDigit(a[i]!) && j < b.length && isDigit(b[j]!)) {
      if (!diff) diff = a.charCodeAt(i) - b.charCodeAt(j);
      i++;
      j++;
    }
    if (i < a.length && isDigit(a[i]!)) return 1;
    if (j < b.length && isDigit(b[j]!)) return -1;
    if (diff) return diff;
  }
  return 0;
}

/** Negative, zero or positive as `a` sorts before, with or after `b` in Debian version order. */
export function compareVersions(a: string, b: string): number {
  const x = split(a);
  const y = split(b);
  const epoch = compareNumbers(x.epoch, y.epoch);
  if (epoch) return epoch;
  const up = compareRuns(x.upstream, y.upstream);
  if (up) return Math.sign(up);
  return Math.sign(compareRuns(x.revision, y.revision));
}

function compareNumbers(a: string, b: string): number {
  const x = a.replace(/^0+/, '');
  const y = b.replace(/^0+/, '');
  if (x.length !== y.length) return x.length < y.length ? -1 : 1;
  return x < y ? -1 : x > y ? 1 : 0;
}

// Key alphabet (all printable ASCII, so the key is the same text in SQLite and in Postgres
// under COLLATE "C"): `~` < end of the version part < end of a non-digit run < letters < others.
const TILDE = '!';
const END = '"';
const RUN_END = '#';
/** Longest digit run kept exactly; longer runs (never seen in packages) saturate. */
const MAX_DIGITS = 60;

function numberKey(digits: string): string {
  const bare = digits.replace(/^0+/, '').slice(0, MAX_DIGITS);
  return String.fromCharCode(0x30 + bare.length) + bare;
}

function charKey(c: string): string {
  if (c === '~') return TILDE;
  if (isLetter(c)) return c;
  // Every other character sorts after the letters, in its own order; non-ASCII saturates.
  const code = c.charCodeAt(0);
  return code < 0x7f ? '\u007b' + String.fromCharCode(0x21 + (code - 0x20)) : '\u007d';
}

function runsKey(s: string): string {
  let out = '';
  let i = 0;
  do {
    let start = i;
    while (i < s.length && !isDigit(s[i]!)) out += charKey(s[i++]!);
    out += RUN_END;
    start = i;
    while (i < s.length && isDigit(s[i]!)) i++;
    out += numberKey(s.slice(start, i));
  } while (i < s.length);
  return out + END;
}

/** A string whose byte order is Debian version order (equal versions get equal keys). */
export function versionKey(v: string): string {
  const { epoch, upstream, revision } = split(v);
  return numberKey(epoch) + runsKey(upstream) + runsKey(revision);
}
