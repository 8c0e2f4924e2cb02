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
  /** start offset and end offset (before the line break) of each line */
  readonly starts: number[] = [];
  readonly ends: number[] = [];
  readonly count: number;
  /** false when the text does not end with a line break: relayd never accepts that last line */
  private readonly lastTerminated: boolean;
  /** the line's event type when `levelEnd` found a tag */
  level = '';
  /** the line after the one `pieces` stopped at */
  next = 0;

  constructor(readonly s: string, maxLineBytes: number) {
    const len = s.length;
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
      this.starts.push(p);
      this.ends.push(end);
      p = next;
    }
    this.count = this.starts.length;
    this.lastTerminated = terminated;
  }

  terminated(i: number): boolean {
    return i < this.count - 1 || this.lastTerminated;
  }

  /** Position after `<RFC 3339> ` at p, or -1. */
  stampEnd(p: number): number {
    const end = rfc3339End(this.s, p);
    return end >= 0 && this.s.charCodeAt(end) === 32 ? end + 1 : -1;
  }

  /** Position after a level tag at p, its `:` and following spaces (sets `level`), or -1. */
  levelEnd(p: number): number {
    const s = this.s;
    const c = s.charCodeAt(p);
    let q = -1;
    const tags = TAGS_BY_CHAR.get(c);
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
   * "\n". Sets `next` to the first line not taken; null when even the first piece fails.
   */
  pieces(p: number, i: number): string | null {
    const q = this.piece(p, i);
    if (q < 0) return null;
    const s = this.s;
    let text = s.slice(q, this.ends[i]);
    let j = i + 1;
    for (; j < this.count; j++) {
      const r = this.piece(this.starts[j]!, j);
      if (r < 0) break;
      text += `\n${s.slice(r, this.ends[j])}`;
    }
    this.next = j;
    return text;
  }
}

function checkLineLength(s: string, start: number, end: number, max: number): void {
  const units = end - start;
  // a UTF-16 unit is 1 to 3 UTF-8 bytes: only lines in between need counting
  if (units > max || (units * 3 > max && Buffer.byteLength(s.slice(start, end)) > max)) {
    throw capstanError('ERR_RUNLOG_LINE_TOO_LONG', `run log line longer than ${max} bytes`);
  }
}
