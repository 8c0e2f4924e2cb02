/**
 * RPM version order (rpm's `rpmvercmp` over `[epoch:]version[-release]`), written from rpm's
 * documented behaviour and checked against rpm 4.18's own comparison (`rpm.vercmp` in its Lua,
 * test/shared/rpm-version.test.ts). It differs from dpkg's order where packages can tell:
 * - separators are not compared: `1.0`, `1_0` and `1+0` are equal (dpkg orders `+` after `.`);
 * - a version is split into runs of digits and runs of letters, and a digit run beats a letter
 *   run (`1.0.1` > `1.0a`, where dpkg says the opposite);
 * - `^` sorts after the end of the version but before anything else there (`1.0` < `1.0^git1`
 *   < `1.0.1`), which dpkg does not have;
 * - only ASCII letters and digits take part; every other character just separates.
 * `~` sorts before everything, the end of the version included, as in dpkg. A missing epoch is 0;
 * a missing release compares as an empty one (rpm 4.18: `1.0-1` > `1.0`).
 */

const isDigit = (c: number) => c >= 0x30 && c <= 0x39;
const isAlpha = (c: number) => (c >= 0x41 && c <= 0x5a) || (c >= 0x61 && c <= 0x7a);
const TILDE = 0x7e;
const CARET = 0x5e;

/** rpm's comparison of one version part (epoch, version or release): -1, 0 or 1. */
export function rpmvercmp(a: string, b: string): number {
  if (a === b) return 0;
  let i = 0;
  let j = 0;
  const at = (s: string, k: number) => (k < s.length ? s.charCodeAt(k) : 0);
  while (i < a.length || j < b.length) {
    // Skip separators: anything but letters, digits, `~` and `^`.
    while (i < a.length && !isAlpha(at(a, i)) && !isDigit(at(a, i)) && at(a, i) !== TILDE && at(a, i) !== CARET) i++;
    while (j < b.length && !isAlpha(at(b, j)) && !isDigit(at(b, j)) && at(b, j) !== TILDE && at(b, j) !== CARET) j++;
    const x = at(a, i);
    const y = at(b, j);
    if (x === TILDE || y === TILDE) {
      if (x !== TILDE) return 1;
      if (y !== TILDE) return -1;
      i++;
      j++;
      continue;
    }
    // `^` is like `~` except that the end of the other version sorts before it.
    if (x === CARET || y === CARET) {
      if (i >= a.length) return -1;
      if (j >= b.length) return 1;
      if (x !== CARET) return 1;
      if (y !== CARET) return -1;
      i++;
      j++;
      continue;
    }
    if (i >= a.length || j >= b.length) break;
    const numeric = isDigit(x);
    const like = numeric ? isDigit : isAlpha;
    let ie = i;
    let je = j;
    while (ie < a.length && like(at(a, ie))) ie++;
    while (je < b.length && like(at(b, je))) je++;
    // A digit run against a letter run (an empty run of the same kind): digits are newer.
    if (je === j) return numeric ? 1 : -1;
    let sa = a.slice(i, ie);
    let sb = b.slice(j, je);
    if (numeric) {
      sa = sa.replace(/^0+/, '');
      sb = sb.replace(/^0+/, '');
      if (sa.length !== sb.length) return sa.length > sb.length ? 1 : -1;
    }
    if (sa !== sb) return sa < sb ? -1 : 1;
    i = ie;
    j = je;
  }
  if (i >= a.length && j >= b.length) return 0;
  return i >= a.length ? -1 : 1;
}

export interface Evr {
  epoch: string;
  version: string;
  release: string;
}

/** Split `[epoch:]version[-release]` as rpm does: the epoch is the leading digits before a `:`, the release follows the last `-`. */
export function parseEvr(v: string): Evr {
  let k = 0;
  while (k < v.length && isDigit(v.charCodeAt(k))) k++;
  const hasEpoch = v[k] === ':';
  const epoch = hasEpoch ? v.slice(0, k) || '0' : '0';
  const rest = hasEpoch ? v.slice(k + 1) : v;
  const dash = rest.lastIndexOf('-');
  return dash >= 0 ? { epoch, version: rest.slice(0, dash), release: rest.slice(dash + 1) } : { epoch, version: rest, release: '' };
}

/** Negative, zero or positive as `a` sorts before, with or after `b` in RPM version order. */
export function compareRpmVersions(a: string, b: string): number {
  const x = parseEvr(a);
  const y = parseEvr(b);
  return rpmvercmp(x.epoch, y.epoch) || rpmvercmp(x.version, y.version) || rpmvercmp(x.release, y.release);
}
