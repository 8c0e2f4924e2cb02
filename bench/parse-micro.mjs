// @ts-check
/**
 * Parse and summarize alone, warm, over thousands of distinct run logs made by the simulator's
 * run-log writer (steady-state mix), beside minimal versions of themselves on the same texts:
 * a split on line breaks and `@@` fields, and a Map of worst outcomes. Each log is parsed and
 * summarized and then dropped, one at a time, as an ingest worker does, so the figures are what
 * the pipeline pays (no live set of thousands of parsed logs for the collector to walk).
 *
 *   node bench/parse-micro.mjs [--logs 4000] [--reports 100] [--rounds 3]
 *   node --cpu-prof --cpu-prof-dir=/tmp/prof bench/parse-micro.mjs --only parse
 */
import { parseArgs } from 'node:util';
import { parseRunLog, summarize } from '@capstan/shared';
import { nodeProfile, runLogText } from '@capstan/bench/sim/runlog';
import { STEADY_MIX } from './lib/fixtures.mjs';

const { values } = parseArgs({ options: {
  logs: { type: 'string', default: '4000' }, reports: { type: 'string', default: '100' },
  rounds: { type: 'string', default: '3' }, only: { type: 'string' },
} });
const nLogs = Number(values.logs);
const nReports = Number(values.reports);
const rounds = Number(values.rounds);

const start = new Date(Math.floor(Date.now() / 1000) * 1000 - 3_600_000);
/** @type {{ nodeId: string, text: string }[]} */
const inputs = [];
for (let i = 0; i < nLogs; i++) {
  const nodeId = `${(i * 2654435761 >>> 0).toString(16).padStart(8, '0')}-0000-4000-8000-${String(i).padStart(12, '0')}`;
  const profile = nodeProfile(nodeId, nReports, STEADY_MIX);
  inputs.push({ nodeId, text: runLogText(profile, start, 1, STEADY_MIX) });
}
const ts = start.toISOString();

/** Minimal parse: lines, the report's fields split on `@@`, nothing checked. */
function minimalParse(/** @type {string} */ text) {
  const reports = [];
  for (const line of text.split('\n')) {
    const at = line.indexOf(' R: @@');
    if (at < 0) continue;
    const f = line.slice(at + 6).split('@@');
    const [start, rest] = f[7].split('##');
    const h = rest.indexOf('@#');
    reports.push({ start_datetime: start, rule_id: f[2], directive_id: f[3], component: f[5], key_value: f[6], event_type: f[1],
      msg: rest.slice(h + 2), policy: f[0], node_id: rest.slice(0, h), execution_datetime: line.slice(0, at), report_id: f[4] });
  }
  return reports;
}

/** Minimal summarize: worst outcome per component in a Map. */
function minimalSummarize(/** @type {{ event_type: string, rule_id: string, directive_id: string, component: string }[]} */ reports) {
  const m = new Map();
  for (const r of reports) {
    if (r.event_type === 'control' || r.event_type.startsWith('log_')) continue;
    const k = `${r.rule_id}\0${r.directive_id}\0${r.component}`;
    const c = m.get(k);
    if (c) c.count++; else m.set(k, { outcome: r.event_type, count: 1 });
  }
  return m;
}

let sink = 0;
/** CPU µs per log of fn over every input, best of `rounds` (the first round warms up). */
function time(/** @type {string} */ name, /** @type {(x: { nodeId: string, text: string }) => number} */ fn) {
  if (values.only && values.only !== name) return;
  let best = Infinity;
  for (let r = 0; r <= rounds; r++) {
    const t = process.cpuUsage();
    for (const x of inputs) sink += fn(x);
    const d = process.cpuUsage(t);
    if (r > 0) best = Math.min(best, (d.user + d.system) / inputs.length);
  }
  console.log(`${name.padEnd(20)} ${best.toFixed(1).padStart(7)} µs/log`);
}

const parsed = inputs.map((x) => parseRunLog(x.text, { node_id: x.nodeId, timestamp: ts }).reports);
console.log(`${nLogs} logs, ${Math.round(parsed.reduce((s, r) => s + r.length, 0) / nLogs)} reports, ${Math.round(inputs.reduce((s, x) => s + x.text.length, 0) / nLogs)} chars each`);
time('parse', (x) => parseRunLog(x.text, { node_id: x.nodeId, timestamp: ts }).reports.length);
time('parse minimal', (x) => minimalParse(x.text).length);
let i = 0;
time('summarize', () => summarize(parsed[i++ % parsed.length]).outcomes.length);
time('summarize minimal', () => minimalSummarize(parsed[i++ % parsed.length]).size);
time('parse+summarize', (x) => summarize(parseRunLog(x.text, { node_id: x.nodeId, timestamp: ts }).reports).outcomes.length);
if (sink === 0) console.log('');
