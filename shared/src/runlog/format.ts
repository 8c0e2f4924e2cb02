/**
 * Writing one report the way a RUDDER agent's output reaches the run log: the report line stamped
 * with its time, and every further line of a multi-line component, key or message stamped again
 * (agent share/lib/timestamp stamps each line it sees).
 *
 * The format has no escaping: a field holding a separator, or a message line starting with a
 * level tag, reads back as something else. Rather than write a line that silently turns into
 * other reports, the writer reads its own output back with the parser and throws when it differs.
 */
import { capstanError } from '../errors.js';
import { Lines } from './grammar.js';
import { ReportReader, type Report } from './report.js';
import { parseRfc3339, startTimeText } from './time.js';

const BREAK = /\r\n|\r|\n/g;

function unwritable(why: string): Error {
  return capstanError('ERR_INTERNAL', `report cannot be written as a run-log line: ${why}`);
}

/**
 * The report as run-log text without a final line break: a run log is these joined with "\n"
 * and ended with one (relayd ignores a last line without it). An empty key reads back as "None"
 * and an empty report id as "0", as relayd defines; "\r\n" and "\r" in multi-line fields read
 * back as "\n". Throws ERR_INTERNAL when the text would not read back as this report.
 */
export function formatReport(r: Omit<Report, 'execution_datetime'> & { execution_datetime: string }): string {
  const exec = parseRfc3339(r.execution_datetime);
  if (exec === null) throw unwritable('execution_datetime is not RFC 3339');
  const start = startTimeText(r.start_datetime);
  if (start === null) throw unwritable('start_datetime is not RFC 3339 with whole seconds');
  const restamp = `\n${exec} `;
  const multi = (text: string) => text.replace(BREAK, restamp);
  const text = `${exec} R: @@${r.policy}@@${r.event_type}@@${r.rule_id}@@${r.directive_id}@@${r.report_id}`
    + `@@${multi(r.component)}@@${multi(r.key_value)}@@${start}##${r.node_id}@#${multi(r.msg)}`;

  const expected: Report = {
    ...r,
    start_datetime: `${start.slice(0, 10)}T${start.slice(11)}`,
    component: r.component.replace(BREAK, '\n'),
    key_value: r.key_value === '' ? 'None' : r.key_value.replace(BREAK, '\n'),
    msg: r.msg.replace(BREAK, '\n'),
    execution_datetime: exec,
    report_id: r.report_id === '' ? '0' : r.report_id,
  };
  const lines = new Lines(`${text}\n`, Number.POSITIVE_INFINITY);
  const reader = new ReportReader(lines);
  const back = reader.read(0);
  if (back === null) throw unwritable('a field holds a separator or a line the parser stops at');
  if (reader.next !== lines.count) throw unwritable('a message line would start a new log entry or report');
  for (const field of Object.keys(back) as (keyof Report)[]) {
    if (back[field] !== expected[field]) throw unwritable(`${field} would read back differently`);
  }
  return text;
}
