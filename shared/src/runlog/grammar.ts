/**
 * The building blocks of RUDDER's run-log grammar (relayd src/data/report.rs), over a table of
 * lines instead of a parser-combinator stream.
 *
 * relayd's nom parser searches for separators with `take_until`, which scans the rest of the
 * input on every attempt; on a large broken log that is quadratic. Here every search is bounded
 * by a line, lines are found once, and the forward searches that may span lines (`R: @@` after a
 * broken report) go through `Finder`, which remembers its last answer. The semantics are relayd's:
 * `\n`, `\r\n` and lone `\r` end lines; an optional line timestamp is stripped from continuation
 * lines; a line that starts with a level tag or `R:` ends a message.
 */
import { capstanError } from '../errors.js';
import { rfc3339End } from './time.js';

/** Level tags in relayd's order (first match wins) and the event type each log becomes. */
const TAGS: ReadonlyArray<readonly [string, string]> = [
  ['CRITICAL', 'log_warn'], ['   error', 'log_warn'], [' warning', 'log_warn'], ['  notice', 'log_info'],
  ['    info', 'log_info'], [' verbose', 'log_debug'], ['   debug', 'log_debug'],
  // at info level and above CFEngine prefixes the program name, which is always "rudder" here
  ['rudder CRITICAL', 'log_warn'], ['rudder    error', 'log_warn'], ['rudder  warning', 'log_warn'],
  ['rudder   notice', 'log_info'], ['rudder     info', 'log_info'],
  // ncf logs, ncf's non-standard WARNING, and the CFEngine stdlib's "R: DEBUG" (log_warn, as relayd)
  ['R: [FATAL]', 'log_warn'], ['R: [ERROR]', 'log_warn'], ['R: [INFO]', 'log_info'], ['R: [DEBUG]', 'log_debug'],
  ['R: WARNING', 'log_warn'], ['R: DEBUG', 'log_warn'],
];

/** The tags grouped by first character code, so a line is compared with a few tags at most. */
const TAGS_BY_CHAR = new Map<number, ReadonlyArray<readonly [string, string]>>();
for (const entry of TAGS) {
  const c = entry[0].charCodeAt(0);
  TAGS_BY_CHAR.set(c, [...(TAGS_BY_CHAR.get(c) ?? []), entry]);
}

/** Next occurrence of a needle at or after a position, remembering the last answer. */
export class Finder {
  private from = Number.MAX_SAFE_INTEGER;
  private at = -1;
  constructor(private readonly s: string, private readonly needle: string) {}

  find(p: number): number {
    // the last search from `from` saw nothing before `at`, so the answer from p in [from, at] is the same
    if (p >= this.from && (this.at < 0 || this.at >= p)) return this.at;
    this.from = p;
    this.at = this.s.indexOf(this.needle, p);
    return this.at;
  }
}

export class Lines {
  readonly count: number;
  /**
   * Where each line starts, then one more entry: where a next line would start. Ends are derived
   * from the line break before the next start, so a hostile file of empty lines costs 4 bytes per
   * line, not the 16 of two number arrays.
   */
  private readonly starts: Int32Array;
  /** false when the text does not end with a line break: relayd never accepts that last line */
  private readonly lastTerminated: boolean;
  /** the line's event type when `levelEnd` found a tag */
  level = '';
  /** the line after the one `pieces` stopped at */
  next = 0;
  private stampAt = -1;
  private stampResult = -1;

  constructor(readonly s: string, maxLineBytes: number) {
    const len = s.length;
    const starts = new Int32Array(countBreaks(s) + 2);
    let count = 0;
    let p = 0;
    let lf = s.indexOf('\n');
    let cr = s.indexOf('\r');
    let terminated = true;
    while (p < len) {
      if (lf >= 0 && lf < p) lf = s.indexOf('\n', p);
      if (cr >= 0 && cr < p) cr = s.indexOf('\r', p);
      let end: number;
      let next: number;
      if (cr >= 0 && (lf < 0 || cr < lf)) {
        end = cr;
        next = s.charCodeAt(cr + 1) === 10 ? cr + 2 : cr + 1;
      } else if (lf >= 0) {
        end = lf;
        next = lf + 1;
      } else {
        end = len;
        next = len;
        terminated = false;
      }
      checkLineLength(s, p, end, maxLineBytes);
      starts[count++] = p;
      p = next;
    }
    starts[count] = len;
    this.starts = starts;
    this.count = count;
    this.lastTerminated = terminated;
  }

  start(i: number): number {
    return this.starts[i]!;
  }

  /** Offset of line i's line break (or of the end of the text). */
  end(i: number): number {
    const next = this.starts[i + 1]!;
    if (i === this.count - 1 && !this.lastTerminated) return next;
    // a "\r" right before a "\n" is always part of the same "\r\n" break
    return this.s.charCodeAt(next - 1) === 10 && this.s.charCodeAt(next - 2) === 13 ? next - 2 : next - 1;
  }

  terminated(i: number): boolean {
    return i < this.count - 1 || this.lastTerminated;
  }

  /** Position after `<RFC 3339> ` at p, or -1. */
  stampEnd(p: number): number {
    // the same line start is asked about by the message before it, the item loop and the report
    if (p === this.stampAt) return this.stampResult;
    const end = rfc3339End(this.s, p);
    this.stampAt = p;
    this.stampResult = end >= 0 && this.s.charCodeAt(end) === 32 ? end + 1 : -1;
    return this.stampResult;
  }

  /** Position after a level tag at p, its `:` and following spaces (sets `level`), or -1. */
  levelEnd(p: number): number {
    const s = this.s;
    const c = s.charCodeAt(p);
    let q = -1;
    const tags = TAGS_BY_CHAR.get(c);
    // most lines are reports: settle them before trying the R: tags
    if (c === 82 && s.startsWith('R: @@', p)) return -1;
    if (tags !== undefined) {
      for (const [tag, type] of tags) {
        if (s.startsWith(tag, p)) {
          q = p + tag.length;
          this.level = type;
          break;
        }
      }
      // any other "R:" that does not start a Rudder report is an untagged log: assume info
      if (q < 0 && c === 82 && s.charCodeAt(p + 1) === 58 && !s.startsWith(' @@', p + 2)) {
        q = p + 2;
        this.level = 'log_info';
      }
    }
    if (q < 0) return -1;
    if (s.charCodeAt(q) === 58) q++;
    while (s.charCodeAt(q) === 32) q++;
    return q;
  }

  /** True when text at p would start a new entry: a level tag or any `R:` (a report or a log). */
  startsEntry(p: number): boolean {
    const s = this.s;
    if (s.charCodeAt(p) === 82 && s.charCodeAt(p + 1) === 58) return true;
    return this.levelEnd(p) >= 0;
  }

  /**
   * relayd's `simpleline` at p in line i: an optional timestamp, then text that does not start an
   * entry, up to a line break. Returns where the kept text starts, or -1.
   */
  piece(p: number, i: number): number {
    const t = this.stampEnd(p);
    const q = t < 0 ? p : t;
    return this.startsEntry(q) || !this.terminated(i) ? -1 : q;
  }

  /**
   * A message: the piece at p in line i, then every following line that is a piece, joined with
   * "\n" (or "" when the text is not kept). Sets `next` to the first line not taken; null when
   * even the first piece fails.
   */
  pieces(p: number, i: number, keep = true): string | null {
    const q = this.piece(p, i);
    if (q < 0) return null;
    const s = this.s;
    let text = keep ? s.slice(q, this.end(i)) : '';
    let j = i + 1;
    for (; j < this.count; j++) {
      const r = this.piece(this.starts[j]!, j);
      if (r < 0) break;
      if (keep) text += `\n${s.slice(r, this.end(j))}`;
    }
    this.next = j;
    return text;
  }
}

/** Line breaks, counting "\r\n" twice: an upper bound on lines, so the table is allocated once. */
function countBreaks(s: string): number {
  let n = 0;
  for (let p = s.indexOf('\n'); p >= 0; p = s.indexOf('\n', p + 1)) n++;
  for (let p = s.indexOf('\r'); p >= 0; p = s.indexOf('\r', p + 1)) n++;
  return n;
}

function checkLineLength(s: string, start: number, end: number, max: number): void {
  const units = end - start;
  // a UTF-16 unit is 1 to 3 UTF-8 bytes: only lines in between need counting
  if (units > max || (units * 3 > max && Buffer.byteLength(s.slice(start, end)) > max)) {
    throw capstanError('ERR_RUNLOG_LINE_TOO_LONG', `run log line longer than ${max} bytes`);
  }
}
