// @ts-check
/**
 * The benchmarks' input: N node identities (keys and certificates cached under bench/.cache/) and
 * one signed, zstd-compressed run log per node, made by the simulator's code — the agent's own
 * run-log writer, signSmime and compressSync — in worker threads before any clock starts.
 */
import { availableParallelism } from 'node:os';
import { resolve } from 'node:path';
import { loadIdentities } from '@capstan/bench/sim/identities';
import { runInWorkers } from '@capstan/bench/sim/workers';
import { DEFAULT_MIX } from '@capstan/bench/sim/runlog';

/** Keys, certificates and profiles kept between runs (git-ignored); CAPSTAN_BENCH_CACHE moves it. */
export const CACHE_DIR = process.env.CAPSTAN_BENCH_CACHE || resolve(import.meta.dirname, '../.cache');
/** A fleet after its first hour: ~2 % of components repaired per run, a few failing, a fifth logging a line. */
export const STEADY_MIX = Object.freeze({ repaired: 0.02, error: 0.005, info: DEFAULT_MIX.info });
const SIGN_WORKER = new URL(import.meta.resolve('@capstan/bench/sim/sign-worker'));

/**
 * @param {{ nodes: number, reports: number, seed?: string, cacheDir?: string, steady?: boolean, rounds?: number, progress?: (msg: string) => void }} o
 *   `rounds`: how many next runs each node sends in the steady state (default 3: a measured
 *   window of three thousand run logs for a thousand nodes, long enough that filling and draining
 *   the pipeline are not most of it). Rounds before them, `settle`, go unmeasured, so that with
 *   the first runs as many run logs go before the measured window as into it: a relay in a
 *   fleet's steady state has taken that load before, and keeps the spool files such a burst
 *   needs (free/, recycle_files), where a relay meeting its first burst creates them.
 */
export async function prepareFleet(o) {
  const say = o.progress ?? (() => undefined);
  say(`identities for ${o.nodes} nodes`);
  const identities = await loadIdentities({ count: o.nodes, keys: Math.min(16, o.nodes), seed: o.seed ?? 'capstan-bench', cacheDir: o.cacheDir ?? CACHE_DIR });
  say(`signing ${o.nodes} run logs of ${o.reports} reports`);
  // One run per node, an hour ago, on a whole second (file names have second precision).
  const startedAtMs = Math.floor((Date.now() - 3_600_000) / 1000) * 1000;
  /** @type {{ name: string, body: ArrayBuffer }[]} */
  const signed = await runInWorkers(
    SIGN_WORKER,
    identities.map((id) => ({ kind: 'run', id, startedAtMs, run: 0, reports: o.reports, mix: DEFAULT_MIX })),
    availableParallelism(),
  );
  const files = signed.map((f, i) => ({ nodeId: identities[i].nodeId, name: f.name, body: Buffer.from(f.body) }));
  const bytes = files.reduce((s, f) => s + f.body.length, 0);
  /** @type {typeof files} */
  let next = [];
  /** @type {typeof files} */
  const settle = [];
  if (o.steady) {
    // Each node's next runs, five minutes apart: same policy, about 2 % of components repaired.
    // The first `settling` rounds settle the programs (not measured); the `o.rounds` after them are measured.
    const settling = Math.max(1, (o.rounds ?? 3) - 1);
    const rounds = (o.rounds ?? 3) + settling;
    for (let k = 1; k <= rounds; k++) {
      say(`signing ${o.nodes} next run logs (steady state, round ${k} of ${rounds}${k <= settling ? ', not measured' : ''})`);
      const more = await runInWorkers(
        SIGN_WORKER,
        identities.map((id) => ({ kind: 'run', id, startedAtMs: startedAtMs + k * 300_000, run: k, reports: o.reports, mix: STEADY_MIX })),
        availableParallelism(),
      );
      (k <= settling ? settle : next).push(...more.map((f, i) => ({ nodeId: identities[i].nodeId, name: f.name, body: Buffer.from(f.body) })));
    }
  }
  return { identities, files, settle, next, startedAtMs, avgCompressedBytes: Math.round(bytes / files.length) };
}
