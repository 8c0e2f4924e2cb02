// @ts-check
/**
 * The results of one `npm run bench`: bench/results/<date>.json (every figure, the raw sections,
 * the machine) and <date>.md (the table a reader looks at, and where the time goes).
 */
import { mkdir, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

/**
 * @typedef {{ op: '>=' | '<=', value: number }} Target
 * @typedef {{ id: string, name: string, value: number | null, unit: string, target?: Target | null,
 *   floor?: { id: string, value: number, min: number } | null, note?: string, table?: boolean }} Figure
 */

/** Whether a figure meets its target and, for ingest, its share of the floor. @param {Figure} f */
export function judge(f) {
  if (f.value === null) return { status: 'n/a', ratio: null };
  const checks = [];
  /** @type {number | null} */
  let ratio = null;
  if (f.floor) {
    ratio = f.value / f.floor.value;
    checks.push(ratio >= f.floor.min);
  }
  if (f.target) {
    if (ratio === null) ratio = f.value / f.target.value;
    checks.push(f.target.op === '>=' ? f.value >= f.target.value : f.value <= f.target.value);
  }
  const status = checks.length === 0 ? '' : checks.every(Boolean) ? 'met' : 'missed';
  return { status, ratio: ratio === null ? null : Math.round(ratio * 100) / 100 };
}

/** @param {number | null} v */
function num(v) {
  if (v === null) return 'not available';
  return Math.abs(v) >= 100 ? Math.round(v).toLocaleString('en-US') : String(Math.round(v * 10) / 10);
}

/** @param {Figure} f */
function reference(f) {
  const parts = [];
  if (f.floor) parts.push(`floor ${num(f.floor.value)}${f.floor.min !== 1 ? ` (≥ ${f.floor.min}×)` : ''}`);
  if (f.target) parts.push(`target ${f.target.op === '>=' ? '≥' : '≤'} ${num(f.target.value)}`);
  return parts.join('; ');
}

/**
 * @param {any} r  the results object
 */
export function markdown(r) {
  const lines = [];
  lines.push(`# Capstan benchmarks, ${r.date.slice(0, 10)}`, '');
  lines.push(`Machine: ${r.machine.cpus} × ${r.machine.cpuModel}, ${r.machine.memoryGb} GB RAM, ${r.machine.kernel}, Node ${r.machine.node}`
    + `${r.machine.postgres ? `, PostgreSQL ${r.machine.postgres}` : ''}. Load average at start ${r.machine.loadavgStart.join(' / ')}, at end ${r.machine.loadavgEnd.join(' / ')}`
    + ` (the machine is shared: other work running at the same time lowers every figure).`
    + `${r.machine.calibrationMsStart ? ` Calibration (bench/lib/calibrate.mjs, lower is faster): ${r.machine.calibrationMsStart} ms at start, ${r.machine.calibrationMsEnd ?? '—'} ms at end.` : ''}`);
  lines.push(`Commit ${r.git.commit ?? 'unknown'}${r.git.dirty ? ' with local changes' : ''}. Input: ${r.options.nodes} nodes, one signed run log each, `
    + `${r.options.reports} reports (${num(r.input?.avgSignedBytes ?? null)} bytes signed, ${num(r.input?.avgCompressedBytes ?? null)} bytes compressed). Whole run ${Math.round(r.durationMs / 1000)} s.`, '');
  lines.push('| figure | value | unit | floor / target | ratio | |', '|---|---:|---|---|---:|---|');
  for (const f of r.figures) {
    if (f.table === false) continue;
    const j = judge(f);
    const cell = (/** @type {string} */ t) => t.replaceAll('|', '\\|'); // a `|` in a name would end the cell
    lines.push(`| ${cell(f.name)}${f.note ? ` (${cell(f.note)})` : ''} | ${num(f.value)} | ${f.unit} | ${reference(f)} | ${j.ratio ?? ''} | ${j.status} |`);
  }
  const missing = Object.entries(r.sections.external ?? {}).filter(([, v]) => /** @type {any} */ (v).status !== 'ok');
  if (missing.length > 0) {
    lines.push('', 'Not measured:', '');
    for (const [k, v] of missing) lines.push(`- ${k}: ${/** @type {any} */ (v).status} — ${/** @type {any} */ (v).reason}`);
  }
  for (const [kind, p] of Object.entries(r.sections.profile ?? {})) {
    const prof = /** @type {any} */ (p);
    if (!prof?.server) continue;
    lines.push('', `## Where the time goes: ingest end to end on ${kind}, node --cpu-prof`, '');
    lines.push(`A separate profiled run (${prof.runLogsPerSec} run logs/s under the profiler). CPU busy in the measured window: `
      + `server ${prof.server.busyMs} ms of ${prof.server.wallMs} ms, relay ${prof.relay?.busyMs ?? '?'} ms of ${prof.relay?.wallMs ?? '?'} ms.`
      + ' Native work (SQLite, crypto, fs) counts for the code that called it.', '');
    for (const who of ['server', 'relay']) {
      const s = prof[who];
      if (!s) continue;
      lines.push(`${who}:`, '', '| area | ms | share |', '|---|---:|---:|');
      for (const a of s.areas.slice(0, 10)) lines.push(`| ${a.area} | ${a.ms} | ${a.pct} % |`);
      lines.push('', `${who}, top functions (self time):`, '', '| function | area | ms | share |', '|---|---|---:|---:|');
      for (const f of s.functions.slice(0, 8)) lines.push(`| \`${f.function}\` | ${f.area} | ${f.ms} | ${f.pct} % |`);
      lines.push('');
    }
  }
  return `${lines.join('\n')}\n`;
}

/** @param {string} dir @param {any} results */
export async function writeResults(dir, results) {
  await mkdir(dir, { recursive: true });
  const stem = results.date.slice(0, 10);
  const json = join(dir, `${stem}.json`);
  const md = join(dir, `${stem}.md`);
  const figures = results.figures.map((/** @type {Figure} */ f) => ({ ...f, ...judge(f) }));
  await writeFile(json, `${JSON.stringify({ ...results, figures }, null, 2)}\n`);
  await writeFile(md, markdown(results));
  return { json, md };
}
