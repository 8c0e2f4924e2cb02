// @ts-check
/**
 * The steady-state per-stage breakdown alone (bench/lib/floor.mjs `floorBreakdown`), SQLite, for
 * comparing builds quickly: N nodes' first runs inserted untimed, then their next runs timed
 * stage by stage, in CPU µs per run log.
 *
 *   node bench/breakdown.mjs [--nodes 500] [--reports 100]
 */
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir, loadavg } from 'node:os';
import { join } from 'node:path';
import { parseArgs } from 'node:util';
import { prepareFleet } from './lib/fixtures.mjs';
import { floorBreakdown } from './lib/floor.mjs';

const { values } = parseArgs({ options: { nodes: { type: 'string', default: '500' }, reports: { type: 'string', default: '100' }, module: { type: 'string' } } });
const fleet = await prepareFleet({ nodes: Number(values.nodes), reports: Number(values.reports), steady: true, rounds: 1 });
const dir = await mkdtemp(join(tmpdir(), 'capstan-breakdown-'));
try {
  const breakdown = values.module ? (await import(values.module)).floorBreakdown : floorBreakdown;
  const b = await breakdown({ kind: 'sqlite', dir, files: fleet.next, warmFiles: [...fleet.files, ...fleet.settle], identities: fleet.identities });
  console.log(JSON.stringify({ load: loadavg()[0].toFixed(1), ...b.usPerRunLog, reports: b.avgReports }));
} finally {
  await rm(dir, { recursive: true, force: true });
}
