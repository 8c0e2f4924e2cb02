/**
 * One Rudder report at a line:
 * `<RFC3339> R: @@policy@@type@@rule@@directive@@report_id@@component@@key@@<start>##node@#message`.
 *
 * As in relayd, the component and key may continue on following lines (the agent re-stamps each
 * line, RUDDER #21736/#26290) and the message takes every following plain line. Unlike relayd,
 * the other fields must end on the report's own line. relayd's `take_until` looks for their
 * separators in the following lines too; on a truncated line such as the 2018 fixture's
 * `R: @@Common@@` that only fails later, at the start time, with the same outcome, but it scans
 * the rest of the input each time, and it would accept a policy or rule id holding a line break.
 */
import { Finder, type Lines } from './grammar.js';
import { normalizeRfc3339, parseStartTime } from './time.js';

/** Field names and order as relayd serialises a report (the reference JSON files). */
export interface Report {
  start_datetime: string;
  rule_id: string;
  directive_id: string;
  component: string;
  key_value: string;
  event_type: string;
  msg: string;
  policy: string;
  node_id: string;
  execution_datetime: string;
  report_id: string;
}

export class ReportReader {
  private readonly atat: Finder;
  private readonly hashes: Finder;
  private readonly nodeEnd: Finder;
  /** where the last metadata field stopped: its `@@` and that line */
  private pos = 0;
  private line = 0;
  /** the line after the last report read */
  next = 0;
  /** the last start time that parsed, as written and as RFC 3339 (`startTime`) */
  private lastStartText = '';
  private lastStart = '';

  constructor(private readonly lines: Lines) {
    this.atat = new Finder(lines.s, '@@');
    this.hashes = new Finder(lines.s, '##');
    this.nodeEnd = new Finder(lines.s, '@#');
  }

  /** The report starting at line j, or null when there is none (or it is broken). */
  read(j: number): Report | null {
    const L = this.lines;
    const s = L.s;
    if (j >= L.count) return null;
    const lineStart = L.start(j);
    const head = L.stampEnd(lineStart);
    if (head < 0 || !s.startsWith('R: @@', head)) return null;
    let p = head + 5;
    let k = this.sep(this.atat, p, j);
    if (k < 0) return null;
    const policy = s.slice(p, k);
    p = k + 2;
    if ((k = this.sep(this.atat, p, j)) < 0) return null;
    const eventType = s.slice(p, k);
    p = k + 2;
    if ((k = this.sep(this.atat, p, j)) < 0) return null;
    const ruleId = s.slice(p, k);
    p = k + 2;
    if ((k = this.sep(this.atat, p, j)) < 0) return null;
    const directiveId = s.slice(p, k);
    p = k + 2;
    if ((k = this.sep(this.atat, p, j)) < 0) return null;
    const reportId = s.slice(p, k);
    const component = this.metadata(k + 2, j);
    if (component === null) return null;
    const key = this.metadata(this.pos + 2, this.line);
    if (key === null) return null;
    let i = this.line;
    p = this.pos + 2;
    if ((k = this.sep(this.hashes, p, i)) < 0) return null;
    const start = this.startTime(p, k);
    if (start === null) return null;
    p = k + 2;
    if ((k = this.sep(this.nodeEnd, p, i)) < 0) return null;
    const nodeId = s.slice(p, k);
    const msg = L.pieces(k + 2, i);
    if (msg === null) return null;
    this.next = L.next;
    return {
      start_datetime: start,
      rule_id: ruleId,
      directive_id: directiveId,
      component,
      // relayd's defaults for empty fields, what the webapp expects
      key_value: key === '' ? 'None' : key,
      event_type: eventType,
      msg,
      policy,
      node_id: nodeId,
      execution_datetime: normalizeRfc3339(s, lineStart, head - 1),
      report_id: reportId === '' ? '0' : reportId,
    };
  }

  /**
   * The start time in [p, k) as RFC 3339. Every report of a run carries the run's start time, so
   * the last text and its result are kept: the same text is compared, not parsed and rebuilt (a
   * tenth of the parse).
   */
  private startTime(p: number, k: number): string | null {
    const s = this.lines.s;
    // (nothing kept yet: '' never matches, an empty start time is not a time)
    if (this.lastStartText !== '' && k - p === this.lastStartText.length && s.startsWith(this.lastStartText, p)) return this.lastStart;
    const start = parseStartTime(s, p, k);
    if (start !== null) {
      this.lastStartText = s.slice(p, k);
      this.lastStart = start;
    }
    return start;
  }

  /** The separator found by `finder` at or after p, if it is in line i; else -1. */
  private sep(finder: Finder, p: number, i: number): number {
    const k = finder.find(p);
    return k >= 0 && k < this.lines.end(i) ? k : -1;
  }

  /**
   * A component or key starting at p in line i, up to the next `@@`, possibly over several
   * lines (relayd's `multilines_metadata`): each line loses an optional timestamp; a line without
   * `@@` must be a plain line (relayd then strips a second timestamp). Sets `pos` and `line`.
   */
  private metadata(p: number, i: number): string | null {
    const L = this.lines;
    const s = L.s;
    let value: string | null = null;
    for (;;) {
      if (s.charCodeAt(p) === 64 && s.charCodeAt(p + 1) === 64) break;
      const t = L.stampEnd(p);
      const q = t < 0 ? p : t;
      const k = this.sep(this.atat, q, i);
      const piece = k >= 0 ? q : L.piece(q, i);
      if (piece < 0) return null;
      const text = s.slice(piece, k >= 0 ? k : L.end(i));
      value = value === null ? text : `${value}\n${text}`;
      if (k >= 0) {
        p = k;
        break;
      }
      if (++i >= L.count) return null;
      p = L.start(i);
    }
    this.pos = p;
    this.line = i;
    return value ?? '';
  }
}
