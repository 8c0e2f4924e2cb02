import fs from 'node:fs';
import path from 'node:path';
import { isDeepStrictEqual } from 'node:util';
import t from 'tap';
import { fixturesAbsent } from '../helpers/programs.js';
import fc from 'fast-check';
import { CapstanError, countByType, formatReport, isCompleteRun, parseRunInfo, parseRunLog, DEFAULT_RUNLOG_LIMITS, type Report, type RunLog } from '@capstan/shared';
import { thrownCode } from '../helpers/thrown.js';

const RUDDER = path.resolve(import.meta.dirname, '../../../shared/conformance/rudder');
const absent = fixturesAbsent(RUDDER);
const RUNLOGS = path.join(RUDDER, 'files/runlogs');
const INFO = { node_id: 'root', timestamp: '2018-08-24T15:55:01+00:00' };
const TS = '2018-08-24T15:55:01+00:00';
const START = '2018-08-24 15:55:01+00:00';

/** A report line as an agent writes it; `fields` overrides the defaults of a Common report. */
function line(fields: Partial<Record<'ts' | 'policy' | 'type' | 'rule' | 'dir' | 'id' | 'comp' | 'key' | 'start' | 'node' | 'msg', string>> = {}): string {
  const f = { ts: TS, policy: 'Common', type: 'result_success', rule: 'rule1', dir: 'dir1', id: '0', comp: 'Comp', key: 'None', start: START, node: 'root', msg: 'ok', ...fields };
  return `${f.ts} R: @@${f.policy}@@${f.type}@@${f.rule}@@${f.dir}@@${f.id}@@${f.comp}@@${f.key}@@${f.start}##${f.node}@#${f.msg}`;
}

function report(fields: Partial<Report> = {}): Report {
  return {
    start_datetime: TS, rule_id: 'rule1', directive_id: 'dir1', component: 'Comp', key_value: 'None',
    event_type: 'result_success', msg: 'ok', policy: 'Common', node_id: 'root', execution_datetime: TS, report_id: '0',
    ...fields,
  };
}

function reports(text: string | Buffer): Report[] {
  return parseRunLog(text, INFO).reports;
}

function parseFixture(file: string, nodeId?: string): RunLog {
  const info = parseRunInfo(path.basename(file));
  return parseRunLog(fs.readFileSync(file), { node_id: nodeId ?? info.nodeId, timestamp: info.timestamp });
}

t.test('the four RUDDER run logs parse exactly to their reference JSON', { skip: absent }, async (t) => {
  const refs = fs.readdirSync(RUNLOGS).filter((f) => f.endsWith('.json'));
  t.equal(refs.length, 4);
  for (const ref of refs) {
    const expected = JSON.parse(fs.readFileSync(path.join(RUNLOGS, ref), 'utf8')) as RunLog;
    const got = parseFixture(path.join(RUNLOGS, ref.replace(/\.json$/, '.log')));
    t.same(got, expected, ref);
    t.equal(isCompleteRun(got), true, `${ref} is a complete run`);
    const counts: Record<string, number> = {};
    for (const r of expected.reports) counts[r.event_type] = (counts[r.event_type] ?? 0) + 1;
    t.same(countByType(got.reports), counts, `${ref} counts by type`);
  }
});

t.test('a run log whose reports name another node than its file is inconsistent', { skip: absent }, async (t) => {
  const file = path.join(RUNLOGS, '2018-08-24T15_55_01+00_00@e745a140-40bc-4b86-b6dc-084488fc906c.log');
  t.equal(thrownCode(() => parseFixture(file)), 'ERR_RUNLOG_INCONSISTENT');
});

t.test('the 2017 run log parses like its 2018 sibling without the broken line', { skip: absent }, async (t) => {
  const got = parseFixture(path.join(RUNLOGS, '2017-08-24T15_55_01+00_00@e745a140-40bc-4b86-b6dc-084488fc906b.log'));
  const y2018 = parseFixture(path.join(RUNLOGS, '2018-08-24T15_55_01+00_00@e745a140-40bc-4b86-b6dc-084488fc906b.log'));
  t.equal(got.reports.length, y2018.reports.length);
  t.same(countByType(got.reports), countByType(y2018.reports));
  t.equal(got.config_id, y2018.config_id);
});

t.test('the CRLF S/MIME content parses as root and is inconsistent for another node', { skip: absent }, async (t) => {
  const file = path.join(RUDDER, 'files/smime/normal.log');
  const text = fs.readFileSync(file);
  const log = parseRunLog(text, INFO);
  t.equal(log.reports.length, 71);
  t.equal(isCompleteRun(log), true);
  t.ok(log.reports.every((r) => !r.msg.includes('\r') && !r.key_value.includes('\r')), 'no CR left in fields');
  t.equal(thrownCode(() => parseRunLog(text, { ...INFO, node_id: 'e745a140-40bc-4b86-b6dc-084488fc906b' })), 'ERR_RUNLOG_INCONSISTENT');
});

t.test('a pre-6.0 log without line timestamps is rejected with a coded error', { skip: absent }, async (t) => {
  t.equal(thrownCode(() => parseRunLog(fs.readFileSync(path.join(RUDDER, 'files/gz/normal.log')), INFO)), 'ERR_RUNLOG_INCONSISTENT');
});

t.test('a report line maps to its fields, with relayd defaults for empty report id and key', async (t) => {
  t.same(reports(`${line()}\n`), [report()]);
  t.same(reports(`${line({ id: '', key: '' })}\n`), [report({ report_id: '0', key_value: 'None' })]);
  t.same(reports(`${line({ id: '42', key: 'k', comp: '', type: 'audit_na', policy: 'P o', msg: '' })}\n`),
    [report({ report_id: '42', key_value: 'k', component: '', event_type: 'audit_na', policy: 'P o', msg: '' })]);
  // a single @ inside a field does not end it
  t.same(reports(`${line({ comp: 'a@b', key: 'x@y@z' })}\n`), [report({ component: 'a@b', key_value: 'x@y@z' })]);
});

t.test('start and line times come out as RFC 3339 with their offset kept', async (t) => {
  const cases: [string, string][] = [
    ['2020-04-07 13:20:57+02:00', '2020-04-07T13:20:57+02:00'],
    ['2018-08-24 15:55:01+0000', '2018-08-24T15:55:01+00:00'],
    ['2018-08-24 15:55:01 +00:00', '2018-08-24T15:55:01+00:00'],
    ['2018-08-24 15:55:01 -0530', '2018-08-24T15:55:01-05:30'],
  ];
  for (const [start, expected] of cases) t.equal(reports(`${line({ start })}\n`)[0]!.start_datetime, expected, start);
  const stamps: [string, string][] = [
    ['2019-05-11T12:58:13Z', '2019-05-11T12:58:13+00:00'],
    ['2019-05-11t12:58:13-00:00', '2019-05-11T12:58:13+00:00'],
    ['2019-05-11T12:58:13.5+01:00', '2019-05-11T12:58:13.500+01:00'],
    ['2019-05-11T12:58:13.000+00:00', '2019-05-11T12:58:13+00:00'],
    ['2019-05-11T12:58:13.1234+00:00', '2019-05-11T12:58:13.123400+00:00'],
  ];
  for (const [ts, expected] of stamps) t.equal(reports(`${line({ ts })}\n`)[0]!.execution_datetime, expected, ts);
});

t.test('a report with an unreadable start time or line time is skipped', async (t) => {
  for (const start of ['2018-02-30 15:55:01+00:00', '2018-08-24T15:55:01+00:00', '2018-08-24 15:55:01', 'yesterday']) {
    t.same(reports(`${line({ start, msg: 'bad' })}\n${line()}\n`), [report()], start);
  }
  t.equal(thrownCode(() => reports(`${line({ ts: '2018-08-24T15:55:01+00:00x' })}\n`)), 'ERR_RUNLOG_INCONSISTENT');
});

t.test('a report cut short anywhere before its message is skipped', async (t) => {
  const full = line({ msg: 'cut' });
  const from = full.indexOf('R: @@') + 5;
  const to = full.indexOf('@#') + 2;
  for (let cut = from; cut < to; cut++) {
    const got = reports(`${full.slice(0, cut)}\n${line()}\n`);
    if (!t.same(got, [report()], `cut after ${JSON.stringify(full.slice(from, cut))}`)) break;
  }
});

t.test('line stamps with impossible offsets or fractions are not timestamps', async (t) => {
  for (const ts of ['2019-05-11T12:58:13+24:00', '2019-05-11T12:58:13+01:60', '2019-05-11T12:58:13+0100', '2019-05-11T12:58:13.+00:00',
    '2019-05-11T12:58:13.1234567891+00:00', '2019-05-11T12:58:13*00:00', '2019-05-11X12:58:13+00:00', '2019-05-11T12-58-13+00:00']) {
    t.equal(thrownCode(() => reports(`${line({ ts })}\n`)), 'ERR_RUNLOG_INCONSISTENT', ts);
  }
  t.equal(reports(`${line({ ts: '2016-12-31T23:59:60+00:00' })}\n`)[0]!.execution_datetime, '2016-12-31T23:59:60+00:00',
    'a leap second is kept, as chrono does');
});

t.test('multi-line messages join continuation lines with or without their own timestamp', async (t) => {
  const text = `${line({ msg: 'first' })}\n${TS} second\nthird\n\n${TS} \n${line({ msg: 'next' })}\n`;
  t.same(reports(text), [report({ msg: 'first\nsecond\nthird\n\n' }), report({ msg: 'next' })]);
});

t.test('CRLF and lone CR end lines like LF', async (t) => {
  const crlf = `${line({ msg: 'a' })}\r\n${TS} b\r\n${line()}\r\n`;
  t.same(reports(crlf), [report({ msg: 'a\nb' }), report()]);
  const cr = `${line({ msg: 'a\rb' })}\r${line()}\r`;
  t.same(reports(cr), [report({ msg: 'a\nb' }), report()]);
  t.same(reports(`${line({ msg: 'a' })}\r\r\n${line()}\n`), [report({ msg: 'a\n' }), report()], 'CR then CRLF is an empty line');
});

t.test('component and key may span lines, each continuation stamped again', async (t) => {
  // relayd's own cases (#21736, #26290)
  t.same(reports(`${line({ key: `multi\r\n${TS} line` })}\r\n`), [report({ key_value: 'multi\nline' })]);
  t.same(reports(`${line({ key: 'multi\r\nline' })}\r\n`), [report({ key_value: 'multi\nline' })]);
  t.same(reports(`${line({ comp: `Comp\n${TS} onent`, key: `k1\nk2\n${TS} k3` })}\n`),
    [report({ component: 'Comp\nonent', key_value: 'k1\nk2\nk3' })]);
  // the broken report is dropped up to its first line; what follows is read as a log entry, as in relayd
  t.same(reports(`${line({ key: `k1\n${TS} R: [INFO] k2\nk3`, msg: 'lost' })}\n${line()}\n`),
    [report({ event_type: 'log_info', msg: `k2\nk3@@${START}##root@#lost` }), report()],
    'a key line without the separator that starts a log entry breaks the report');
  t.same(reports(`${line({ key: `k1\n${TS} R: [INFO] k2` })}\n`), [report({ key_value: 'k1\nR: [INFO] k2' })],
    'the line holding the separator is taken as it is, as relayd does');
});

t.test('agent log lines become rows attached to the next report, emitted before it', async (t) => {
  const tags: [string, string][] = [
    ['CRITICAL: m', 'log_warn'], ['   error: m', 'log_warn'], [' warning: m', 'log_warn'], ['  notice: m', 'log_info'],
    ['    info: m', 'log_info'], [' verbose: m', 'log_debug'], ['   debug: m', 'log_debug'], ['rudder CRITICAL: m', 'log_warn'],
    ['rudder    error: m', 'log_warn'], ['rudder  warning: m', 'log_warn'], ['rudder   notice: m', 'log_info'],
    ['rudder     info: m', 'log_info'], ['R: [FATAL] m', 'log_warn'], ['R: [ERROR] m', 'log_warn'], ['R: [INFO] m', 'log_info'],
    ['R: [DEBUG] m', 'log_debug'], ['R: WARNING m', 'log_warn'], ['R: DEBUG m', 'log_warn'], ['R: m', 'log_info'],
    ['CRITICAL:m', 'log_warn'], ['CRITICAL     m', 'log_warn'], ['R: [INFO]:    m', 'log_info'],
  ];
  const logTs = '2019-01-01T00:00:00+00:00';
  for (const [text, type] of tags) {
    const got = reports(`${logTs} ${text}\n${line({ msg: 'the report' })}\n`);
    t.same(got, [report({ event_type: type, msg: 'm', execution_datetime: logTs }), report({ msg: 'the report' })], text);
  }
  const many = `${TS} R: [INFO] one\nmore\n${TS} CRITICAL: two\n${line({ key: 'k', id: '7' })}\n`;
  t.same(reports(many), [
    report({ event_type: 'log_info', msg: 'one\nmore', key_value: 'k', report_id: '7' }),
    report({ event_type: 'log_warn', msg: 'two', key_value: 'k', report_id: '7' }),
    report({ key_value: 'k', report_id: '7' }),
  ]);
});

t.test('content after the last complete report is ignored', async (t) => {
  t.same(reports(`${line()}\n${TS} R: [INFO] trailing log\n`), [report()]);
  t.same(reports(`${line()}\n${line({ msg: 'no newline' })}`), [report()]);
});

t.test('untimestamped lines before a report are garbage and skipped', async (t) => {
  const text = `Rudder agent 6.0.5\nNode uuid: root\n\n${line()}\n`;
  t.same(reports(text), [report()]);
});

t.test('a broken report is skipped up to the next R: @@', async (t) => {
  // the 2018 fixture's truncated line
  t.same(reports(`${line({ msg: 'a' })}\n${TS} R: @@Common@@\n${line()}\n`), [report({ msg: 'a' }), report()]);
  t.same(reports(`${TS} R: @@Common@@broken\ncontinued\n${line()}\n`), [report()]);
  t.same(reports(`garbage\n${line({ key: '' })}\r\n`), [report()]);
  // relayd's until_next: a timestamped line that is neither log nor report drops everything up
  // to and including the line holding the next "R: @@", even a valid report
  t.same(reports(`${TS} orphan\n${TS} R: [INFO] gone\n${line({ msg: 'gone too' })}\n${line()}\n`), [report()]);
});

t.test('invalid UTF-8 bytes become U+FFFD', async (t) => {
  const bytes = Buffer.concat([Buffer.from(line({ msg: 'End ' })), Buffer.from([0x80, 0xff]), Buffer.from('x\n')]);
  t.same(reports(bytes), [report({ msg: 'End \uFFFD\uFFFDx' })]);
});

t.test('empty input, no report and a foreign node id are coded errors', async (t) => {
  t.equal(thrownCode(() => reports('')), 'ERR_RUNLOG_EMPTY');
  t.equal(thrownCode(() => reports(Buffer.alloc(0))), 'ERR_RUNLOG_EMPTY');
  t.equal(thrownCode(() => reports('\n\n')), 'ERR_RUNLOG_INCONSISTENT');
  t.equal(thrownCode(() => reports(`${TS} R: [INFO] only logs\n`)), 'ERR_RUNLOG_INCONSISTENT');
  t.equal(thrownCode(() => reports(`${line()}\n${line({ node: 'other' })}\n`)), 'ERR_RUNLOG_INCONSISTENT');
});

t.test('config id comes from the first control start or end; a run without start is partial', async (t) => {
  const start = line({ type: 'control', rule: 'rudder', dir: 'run', comp: 'start', key: 'cfg-1', msg: 'Start execution' });
  const end = line({ type: 'control', rule: 'rudder', dir: 'run', comp: 'end', key: 'cfg-2', msg: 'End execution' });
  const full = parseRunLog(`${start}\n${line()}\n${end}\n`, INFO);
  t.equal(full.config_id, 'cfg-1');
  t.equal(isCompleteRun(full), true);
  const partial = parseRunLog(`${line()}\n${end}\n`, INFO);
  t.equal(partial.config_id, 'cfg-2');
  t.equal(isCompleteRun(partial), false);
  t.equal(parseRunLog(`${line()}\n`, INFO).config_id, null);
  t.same(full.info, INFO);
});

t.test('countByType counts any event type, including __proto__', async (t) => {
  const counts = countByType([report(), report({ event_type: '__proto__' }), report()]);
  t.equal(counts.result_success, 2);
  t.equal(counts.__proto__, 1);
});

t.test('size, line length and report count limits raise their codes', async (t) => {
  const text = `${line()}\n${line()}\n`;
  t.equal(thrownCode(() => parseRunLog(text, INFO, { maxBytes: text.length - 1 })), 'ERR_RUNLOG_TOO_LARGE');
  t.equal(thrownCode(() => parseRunLog(Buffer.from(text), INFO, { maxBytes: text.length - 1 })), 'ERR_RUNLOG_TOO_LARGE');
  t.equal(parseRunLog(text, INFO, { maxBytes: text.length }).reports.length, 2);
  // 'é' is two bytes in UTF-8: the limit counts bytes, not characters
  const wide = `${line({ msg: 'é'.repeat(100) })}\n`;
  const lineBytes = Buffer.byteLength(wide) - 1;
  t.equal(thrownCode(() => parseRunLog(wide, INFO, { maxLineBytes: lineBytes - 1 })), 'ERR_RUNLOG_LINE_TOO_LONG');
  t.equal(parseRunLog(wide, INFO, { maxLineBytes: lineBytes }).reports.length, 1);
  t.equal(thrownCode(() => parseRunLog(`garbage ${'x'.repeat(100)}\n${line()}\n`, INFO, { maxLineBytes: 100 })), 'ERR_RUNLOG_LINE_TOO_LONG');
  t.equal(thrownCode(() => parseRunLog(text, INFO, { maxReports: 1 })), 'ERR_RUNLOG_TOO_MANY_REPORTS');
  t.equal(thrownCode(() => parseRunLog(`${TS} R: [INFO] log\n${line()}\n`, INFO, { maxReports: 1 })), 'ERR_RUNLOG_TOO_MANY_REPORTS');
  t.equal(parseRunLog(text, INFO, { maxReports: 2 }).reports.length, 2);
  const logs = `${TS} R: [INFO] log\n`.repeat(5);
  t.equal(thrownCode(() => parseRunLog(`${line()}\n${logs}${line()}\n`, INFO, { maxReports: 3 })), 'ERR_RUNLOG_TOO_MANY_REPORTS',
    'log entries past the limit count even though they are not kept');
  t.same(parseRunLog(`${line()}\n${logs}`, INFO, { maxReports: 1 }).reports, [report()],
    'trailing log entries past the limit are still ignored, not an error');
  t.ok(Object.isFrozen(DEFAULT_RUNLOG_LIMITS));
});

t.test('hostile logs parse in linear time', async (t) => {
  // Each of these re-scans the rest of the input per line in a naive take_until parser.
  const n = 100_000;
  const logsThenBroken = `${`${TS} R: [INFO] log R: @@ mid-line\n`.repeat(n)}${TS} R: @@broken\n${line()}\n`;
  const noSeparators = `${`${TS} R: @@a@@b@@c@@d@@e@@f\n`.repeat(n)}${line()}\n`;
  const longKey = `${TS} R: @@a@@b@@c@@d@@e@@f${'\nkey'.repeat(n)}\n${line()}\n`;
  for (const [name, text] of [['logs before a broken report', logsThenBroken], ['no separators', noSeparators], ['long key', longKey]]) {
    const begin = performance.now();
    const got = reports(text!);
    const ms = performance.now() - begin;
    t.same(got.at(-1), report(), name);
    t.ok(ms < 5000, `${name}: ${Math.round(ms)} ms`);
  }
});

t.test('formatReport writes the RUDDER report line the parser reads', async (t) => {
  const r = report({ start_datetime: '2020-04-07T13:20:57+02:00', key_value: 'k', report_id: '3', msg: 'done' });
  const text = formatReport(r);
  t.equal(text, `${TS} R: @@Common@@result_success@@rule1@@dir1@@3@@Comp@@k@@2020-04-07 13:20:57+02:00##root@#done`);
  t.same(reports(`${text}\n`), [r]);
});

t.test('formatReport stamps every continuation line of multi-line fields', async (t) => {
  const r = report({ component: 'C1\nC2', key_value: 'k1\r\nk2', msg: 'line 1\n\nline 3\rline 4' });
  const text = formatReport({ ...r, execution_datetime: '2018-08-24T15:55:01Z' });
  t.equal(text.split('\n').length, 6, 'six lines');
  t.ok(text.split('\n').every((l) => l.startsWith(`${TS} `)), 'every line starts with the time');
  t.same(reports(`${text}\n`), [{ ...r, key_value: 'k1\nk2', msg: 'line 1\n\nline 3\nline 4' }]);
});

t.test('formatReport refuses reports that would read back differently', async (t) => {
  const bad: [string, Partial<Report>][] = [
    ['separator in policy', { policy: 'a@@b' }],
    ['line break in rule id', { rule_id: 'a\nb' }],
    ['field ending with @', { directive_id: 'dir@' }],
    ['separator in component', { component: 'a@@b' }],
    ['node id with @#', { node_id: 'ro@#ot' }],
    ['message line that is a log entry', { msg: 'ok\nR: [INFO] not a message line' }],
    ['message starting like a report', { msg: 'R: @@x' }],
    ['message starting with a timestamp', { msg: `${TS} text` }],
    ['start time with a fraction', { start_datetime: '2018-08-24T15:55:01.5+00:00' }],
    ['start time not RFC 3339', { start_datetime: START }],
    ['line time not RFC 3339', { execution_datetime: 'now' }],
  ];
  for (const [name, fields] of bad) t.equal(thrownCode(() => formatReport(report(fields))), 'ERR_INTERNAL', name);
});

/** Text built from the run-log grammar's own tokens, to reach its corners more often than random strings. */
const tokens = fc.constantFrom(
  'R: @@', '@@', '##', '@#', ' ', '\n', '\r', '\r\n', 'R: [INFO] ', 'CRITICAL:', '   error: ', 'rudder     info: ', 'R: ',
  `${TS} `, '2018-08-24T15:55:01Z ', START, 'root', 'control', 'start', 'x', '@', '#', '\u00e9', '\uFFFD', '\uD800',
);
const grammarText = fc.array(fc.oneof(tokens, fc.string({ maxLength: 4 })), { maxLength: 60 }).map((a) => a.join(''));

function onlyCodedErrors(input: string | Buffer): boolean {
  try {
    const log = parseRunLog(input, INFO, { maxBytes: 4096, maxLineBytes: 512, maxReports: 50 });
    return log.reports.length > 0 && log.reports.every((r) => r.node_id === INFO.node_id);
  } catch (err) {
    return err instanceof CapstanError && err.code.startsWith('ERR_');
  }
}

t.test('arbitrary text and bytes never raise anything but a coded CapstanError', async (t) => {
  fc.assert(fc.property(fc.oneof(fc.string(), fc.string({ unit: 'binary' }), grammarText), onlyCodedErrors), { numRuns: 5000 });
  fc.assert(fc.property(fc.uint8Array({ maxLength: 600 }), (bytes) => onlyCodedErrors(Buffer.from(bytes))), { numRuns: 2000 });
  // valid reports with grammar noise spliced in between
  fc.assert(fc.property(fc.array(fc.oneof(fc.constant(`${line()}\n`), grammarText), { maxLength: 12 }),
    (parts) => onlyCodedErrors(parts.join(''))), { numRuns: 3000 });
  t.pass('no uncoded error');
});

/** Field text that reads back as written: no separators, no leading tag or timestamp on a line. */
const word = fc.stringMatching(/^[a-zA-Z0-9][a-zA-Z0-9 .,:;_/#-]{0,12}$/).filter((w) => !/@$|^R:|^CRITICAL|^rudder /.test(w));
const multiLine = fc.array(fc.oneof(word, fc.constant('')), { minLength: 1, maxLength: 3 }).map((a) => a.join('\n'));
const stamp = fc.date({ min: new Date('1970-01-01T00:00:00Z'), max: new Date('2100-01-01T00:00:00Z'), noInvalidDate: true })
  .map((d) => `${d.toISOString().slice(0, 19)}+00:00`);
const reportArb = fc.record({
  start_datetime: stamp, rule_id: word, directive_id: word, component: multiLine, key_value: multiLine,
  event_type: fc.constantFrom('result_success', 'result_error', 'audit_na', 'control', 'log_info'),
  msg: multiLine, policy: word, node_id: fc.constant(INFO.node_id), execution_datetime: stamp, report_id: fc.oneof(word, fc.constant('')),
});

t.test('formatReport lines parse back to the same reports', async (t) => {
  fc.assert(fc.property(fc.array(reportArb, { minLength: 1, maxLength: 20 }), (rs) => {
    // as the agent writes a run log: lines joined with "\n" and ended with one
    const got = reports(`${rs.map((r) => formatReport(r)).join('\n')}\n`);
    const expected = rs.map((r) => ({ ...r, key_value: r.key_value === '' ? 'None' : r.key_value, report_id: r.report_id === '' ? '0' : r.report_id }));
    return isDeepStrictEqual(got, expected);
  }), { numRuns: 500 });
  t.pass('round trip holds');
});

t.test('each report keeps its own start time when the start times of a run log differ', async (t) => {
  // The parser reuses the last start time's result when the same text comes again: a different
  // text of the same length, an invalid one and an empty one must each be read on their own.
  const text = [
    line({ start: '2018-08-24 15:55:01+00:00' }),
    line({ start: '2018-08-24 15:55:02+00:00' }),
    line({ start: '2018-08-24 15:55:01+02:00' }),
    line({ start: '2018-08-24 15:55:01+0000' }),
    line({ start: '2018-08-24 15:55:01+00:00' }),
    '',
  ].join('\n');
  t.same(reports(text).map((r) => r.start_datetime),
    ['2018-08-24T15:55:01+00:00', '2018-08-24T15:55:02+00:00', '2018-08-24T15:55:01+02:00', '2018-08-24T15:55:01+00:00', '2018-08-24T15:55:01+00:00']);
  t.same(reports(`${line({ start: '' })}\n${line()}\n`).map((r) => r.start_datetime), [TS], 'an empty start time is not the last one');
  t.same(reports(`${line()}\n${line({ start: '2018-08-24 15:55:61+00:00' })}\n${line()}\n`).length, 2, 'an invalid one of the same length is refused');
});
