/**
 * What a change changed, carried inside the signed run log.
 *
 * Right after a report of a change (`result_repaired`, or `audit_noncompliant` in audit mode and
 * dry runs) an agent may write one more report with the same policy, rule, directive, report id,
 * component and key, of type `log_info`, whose message is `capstan-diff ` followed by a one-line
 * JSON object `{"diff": "<text>", "truncated": <bool>}`. The text is a unified diff for file
 * content, or `old → new` lines for modes and owners.
 *
 * Why this shape: `log_info` is information in RUDDER's parser and in every Capstan server (it is
 * counted, never a compliance item), so older servers and RUDDER's relayd read such a run log
 * unchanged. JSON keeps the whole diff on one line: a raw diff line such as `   error_log …`
 * would start with one of the run-log level tags and turn into a report of its own.
 */

/** The event type of a diff report. */
export const DIFF_EVENT_TYPE = 'log_info';
/** What a diff report's message starts with. */
export const DIFF_MARKER = 'capstan-diff ';
/** The default cap on one diff's text, in UTF-8 bytes (agent `max_diff_bytes`). */
export const DEFAULT_MAX_DIFF_BYTES = 16 * 1024;
/** The line that ends a diff cut at its cap. */
export const TRUNCATED_LINE = '\\ diff truncated';

/** The report types that are changes: what an agent changed, or in audit what it would change. */
export const CHANGE_EVENT_TYPES: ReadonlySet<string> = new Set(['result_repaired', 'audit_noncompliant']);

export interface ReportDiff {
  /** A unified diff, or `old → new` lines (`mode 0644 → 0600`). */
  diff: string;
  /** The diff was cut at the agent's `max_diff_bytes`. */
  truncated: boolean;
}

/**
 * Cut a diff to at most `maxBytes` UTF-8 bytes, at a line boundary, ending it with
 * TRUNCATED_LINE when cut (the marker is counted in the cap).
 */
export function capDiff(text: string, maxBytes: number = DEFAULT_MAX_DIFF_BYTES): ReportDiff {
  if (Buffer.byteLength(text, 'utf8') <= maxBytes) return { diff: text, truncated: false };
  const budget = Math.max(0, maxBytes - Buffer.byteLength(`${TRUNCATED_LINE}\n`, 'utf8'));
  let used = 0;
  let end = 0;
  for (const line of text.split('\n')) {
    const size = Buffer.byteLength(line, 'utf8') + 1;
    if (used + size > budget) break;
    used += size;
    end += line.length + 1;
  }
  return { diff: `${text.slice(0, end)}${TRUNCATED_LINE}\n`, truncated: true };
}

/** The message of a diff report. */
export function diffMessage(d: ReportDiff): string {
  return `${DIFF_MARKER}${JSON.stringify({ diff: d.diff, truncated: d.truncated })}`;
}

/**
 * The diff a report's message carries, or null when it is not a diff report (any other
 * `log_info` message, or a malformed one: a diff is information, never a reason to refuse a run).
 * `maxBytes` bounds what is accepted from the wire.
 */
export function parseDiffMessage(msg: string, maxBytes = 1024 * 1024): ReportDiff | null {
  if (!msg.startsWith(DIFF_MARKER) || msg.length > maxBytes + DIFF_MARKER.length + 64) return null;
  let v: unknown;
  try {
    v = JSON.parse(msg.slice(DIFF_MARKER.length));
  } catch {
    return null;
  }
  if (typeof v !== 'object' || v === null) return null;
  const { diff, truncated } = v as { diff?: unknown; truncated?: unknown };
  if (typeof diff !== 'string' || (truncated !== undefined && typeof truncated !== 'boolean')) return null;
  return { diff, truncated: truncated === true };
}
