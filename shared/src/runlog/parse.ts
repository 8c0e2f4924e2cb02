/**
 * Run-log parsing with RUDDER relayd's semantics (src/data/report.rs and runlog.rs).
 *
 * A run log is a sequence of items, each zero or more agent log entries followed by one report;
 * the log entries become rows that copy the report's metadata with their own type, message and
 * time. Bad input is skipped the way relayd skips it: an untimestamped plain line is garbage; any
 * other unparsable item is dropped up to and including the line holding the next `R: @@` (even
 * when that line is a valid report, as relayd does); whatever follows the last item that parses
 * is ignored. The result must then hold at least one report, all from the file's node.
 */
import { capstanError } from '../errors.js';
import { Finder, Lines } from './grammar.js';
import { ReportReader, type Report } from './report.js';
import { normalizeRfc3339 } from './time.js';

export type { Report } from './report.js';
export { formatReport } from './format.js';

export interface RunLog {
  info: { node_id: string; timestamp: string };
  /** key of the first control start or end report; null when there is none (relayd only warns) */
  config_id: string | null;
  reports: Report[];
}

export interface RunLogLimits {
  maxBytes: number;
  maxLineBytes: number;
  maxReports: number;
}

/**
 * Far above real runs (the RUDDER fixtures are 2–40 KB with at most 107 reports): these only stop
 * hostile input. The report count also bounds the memory a log that parses well can take.
 */
export const DEFAULT_RUNLOG_LIMITS: RunLogLimits = Object.freeze({
  maxBytes: 64 * 1024 * 1024,
  maxLineBytes: 1024 * 1024,
  maxReports: 200_000,
});

// lossy like relayd (#24565): invalid bytes become U+FFFD; a BOM is kept, as Rust's from_utf8_lossy does
const decoder = new TextDecoder('utf-8', { fatal: false, ignoreBOM: true });

interface LogEntry {
  type: string;
  msg: string;
  time: string;
}

function shown(text: string): string {
  return JSON.stringify(text.length > 80 ? `${text.slice(0, 80)}…` : text);
}

function decode(content: Buffer | Uint8Array | string, maxBytes: number): string {
  const tooLarge = () => capstanError('ERR_RUNLOG_TOO_LARGE', `run log larger than ${maxBytes} bytes`);
  if (typeof content === 'string') {
    // a UTF-16 unit is 1 to 3 UTF-8 bytes: count only when the length leaves a doubt
    if (content.length > maxBytes || (content.length * 3 > maxBytes && Buffer.byteLength(content) > maxBytes)) {
      throw tooLarge();
    }
    return content;
  }
  if (content.byteLength > maxBytes) throw tooLarge();
  return decoder.decode(content);
}

export function parseRunLog(
  content: Buffer | string,
  info: { node_id: string; timestamp: string },
  limits?: Partial<RunLogLimits>,
): RunLog {
  const maxBytes = limits?.maxBytes ?? DEFAULT_RUNLOG_LIMITS.maxBytes;
  const maxReports = limits?.maxReports ?? DEFAULT_RUNLOG_LIMITS.maxReports;
  const text = decode(content, maxBytes);
  if (text.length === 0) throw capstanError('ERR_RUNLOG_EMPTY', 'run log is empty');
  const lines = new Lines(text, limits?.maxLineBytes ?? DEFAULT_RUNLOG_LIMITS.maxLineBytes);
  const reader = new ReportReader(lines);
  const nextReport = new Finder(text, 'R: @@');
  const reports: Report[] = [];
  const logs: LogEntry[] = [];
  const entryLines: number[] = [];
  // Lines where the last failed item's log entries started: an item tried again from one of them
  // reads the same entries and fails on the same report, so it is not tried again. Without this, a
  // long run of log entries before a broken report would be re-read once per entry.
  const failed: number[] = [];
  let f = 0;
  let line = 0;

  while (line < lines.count) {
    const start = lines.start(line);
    // both a log entry and a report start with a timestamp: without one, the item cannot parse
    const stamped = lines.stampEnd(start) >= 0;
    while (f < failed.length && failed[f]! < line) f++;
    if (stamped && failed[f] !== line) {
      logs.length = 0;
      entryLines.length = 0;
      let j = line;
      while (j < lines.count) {
        const lineStart = lines.start(j);
        const p = lines.stampEnd(lineStart);
        const q = p < 0 ? -1 : lines.levelEnd(p);
        if (q < 0) break;
        const type = lines.level;
        // past the report limit the entries are still read (the outcome depends on what follows
        // them) but not kept, so a file of log lines cannot fill memory
        const keep = reports.length + logs.length < maxReports;
        const msg = lines.pieces(q, j, keep);
        if (msg === null) break;
        if (keep) logs.push({ type, msg, time: normalizeRfc3339(text, lineStart, p - 1) });
        entryLines.push(j);
        j = lines.next;
      }
      const report = reader.read(j);
      if (report !== null) {
        if (report.node_id !== info.node_id) {
          throw capstanError('ERR_RUNLOG_INCONSISTENT',
            `inconsistent run log: report from node ${shown(report.node_id)} in a file from ${shown(info.node_id)}`);
        }
        if (reports.length + entryLines.length + 1 > maxReports) {
          throw capstanError('ERR_RUNLOG_TOO_MANY_REPORTS', `run log has more than ${maxReports} reports`);
        }
        for (const log of logs) {
          reports.push({
            start_datetime: report.start_datetime,
            rule_id: report.rule_id,
            directive_id: report.directive_id,
            component: report.component,
            key_value: report.key_value,
            event_type: log.type,
            msg: log.msg,
            policy: report.policy,
            node_id: report.node_id,
            execution_datetime: log.time,
            report_id: report.report_id,
          });
        }
        reports.push(report);
        line = reader.next;
        continue;
      }
      failed.length = 0;
      for (const entry of entryLines) failed.push(entry);
      failed.push(j);
      f = 0;
    }
    if (!stamped && lines.piece(start, line) >= 0) {
      line++; // garbage: an untimestamped plain line
      continue;
    }
    // a broken item: drop everything up to the next "R: @@" and the plain lines after it
    const k = nextReport.find(start);
    if (k < 0) break;
    let m = line;
    while (lines.end(m) < k) m++;
    if (lines.pieces(k + 5, m) === null) break;
    line = lines.next;
  }

  if (reports.length === 0) throw capstanError('ERR_RUNLOG_INCONSISTENT', 'inconsistent run log: no valid report');
  return { info: { node_id: info.node_id, timestamp: info.timestamp }, config_id: configId(reports), reports };
}

function isControl(r: Report, component: string): boolean {
  return r.event_type === 'control' && r.component === component;
}

function configId(reports: Report[]): string | null {
  const control = reports.find((r) => isControl(r, 'start') || isControl(r, 'end'));
  return control === undefined ? null : control.key_value;
}

/** A complete run has a control/start report; others (e.g. `rudder agent inventory`) are partial. */
export function isCompleteRun(log: RunLog): boolean {
  return log.reports.some((r) => isControl(r, 'start'));
}

export function countByType(reports: Report[]): Record<string, number> {
  // no prototype: an event type named "__proto__" must count like any other
  const counts: Record<string, number> = Object.create(null);
  for (const r of reports) counts[r.event_type] = (counts[r.event_type] ?? 0) + 1;
  return counts;
}
