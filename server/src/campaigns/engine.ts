/**
 * One step of a campaign, given the time: the whole state machine of patch campaigns, on top of
 * jobs. Each wave runs as `upgrade` jobs (one per window it runs in); the engine reads a wave's
 * job once it ended and decides the nodes' fates:
 *
 *   task done                                   → node done (from→to read from its output)
 *   task failed offline/no_answer/relay_lost,
 *     or aborted at the window's end (timeout)  → node retry, in the next window (up to max_attempts)
 *   any other failure                           → node failed
 *
 * A wave whose failed nodes pass failure_threshold stops the campaign (the waves after it are
 * cancelled); a wave with nodes to retry waits for the next window; a wave done lets the next
 * start (now if the window is still open). Campaign states:
 *
 *   scheduled ─▶ running ⇄ waiting_window ─▶ finished
 *                   └───────────┴──────────▶ stopped (threshold) │ cancelled (admin)
 *
 * Jobs are reached through a port (CampaignJobs) and time through `now`: tests drive it with
 * a fake clock and fake jobs.
 */
import { findUpgradeResult } from '@capstan/shared/upgrade';
import type { CampaignNodeResult, CampaignRecord, CampaignWave, TaskRecord } from '../store/store.js';
import { overThreshold } from './plan.js';
import { windowState } from './window.js';

/** What the engine needs of jobs. */
export interface CampaignJobs {
  /** Start the wave's upgrade job on `nodes`, its deadline `timeoutMs` away; returns the job id. */
  start(c: CampaignRecord, wave: number, nodes: string[], timeoutMs: number): Promise<string>;
  /** A job's state and tasks; null when it is gone (retention). */
  get(id: string): Promise<{ state: 'running' | 'finished' | 'cancelled'; tasks: TaskRecord[] } | null>;
  cancel(id: string): Promise<void>;
}

export interface EngineSettings {
  /** How often a running wave's job is looked at. */
  pollMs: number;
  /** Without a window: how long a node to retry waits. */
  retryDelayMs: number;
  /** A wave's job timeout without a window (or the most a window's may be). */
  maxJobMs: number;
}

/** Task reasons that mean "the node was not reached": retried in the next window. */
export const RETRY_REASONS: ReadonlySet<string> = new Set(['offline', 'no_answer', 'relay_lost', 'timeout', 'busy']);

const iso = (ms: number) => new Date(ms).toISOString();
const MIN_JOB_MS = 1000;
const MAX_JOB_MS = 7 * 86_400_000;

function nodeMap(c: CampaignRecord): Map<string, CampaignNodeResult> {
  return new Map(c.nodes.map((n) => [n.node_id, n]));
}

/** Read the ended job of `wave` into its nodes' results. */
function settleWave(c: CampaignRecord, wave: CampaignWave, job: Awaited<ReturnType<CampaignJobs['get']>>, now: number): void {
  const nodes = nodeMap(c);
  const tasks = new Map((job?.tasks ?? []).map((t) => [t.node_id, t]));
  for (const id of wave.nodes) {
    const n = nodes.get(id)!;
    if (n.state !== 'running') continue;
    const t = tasks.get(id);
    const at = iso(now);
    const result = findUpgradeResult(t?.output ?? null);
    Object.assign(n, {
      reason: t?.reason ?? 'timeout', message: t?.message ?? 'the job is gone', exit_code: t?.exit_code ?? null, updated_at: at,
      ...(result && { upgraded: result.upgraded, unmet: result.unmet, reboot_required: result.reboot_required }),
    });
    if (t?.state === 'done') n.state = 'done';
    else if (t?.reason === 'cancelled') n.state = 'cancelled';
    else if (!t || RETRY_REASONS.has(t.reason)) n.state = n.attempts < c.spec.max_attempts ? 'retry' : 'failed';
    else n.state = 'failed';
  }
}

/** The campaign ends here: every wave and node not final yet is cancelled. */
function cancelRest(c: CampaignRecord, now: number): void {
  for (const w of c.waves) {
    if (w.state === 'pending' || w.state === 'waiting' || w.state === 'running') {
      w.state = 'cancelled';
      w.ended_at ??= iso(now);
    }
  }
  for (const n of c.nodes) {
    if (n.state === 'pending' || n.state === 'retry' || n.state === 'running') {
      n.state = 'cancelled';
      n.updated_at = iso(now);
    }
  }
}

/**
 * Advance `c` (a copy is changed and returned) as far as it goes at `now`. It sets `next_at`:
 * when it should be looked at again (null once final).
 */
export async function advance(input: CampaignRecord, now: Date, jobs: CampaignJobs, s: EngineSettings): Promise<CampaignRecord> {
  const c = structuredClone(input);
  const t = now.getTime();
  c.updated_at = iso(t);
  if (c.state === 'stopped' || c.state === 'cancelled' || c.state === 'finished') {
    c.next_at = null;
    return c;
  }
  for (;;) {
    const wave = c.waves.find((w) => w.state === 'pending' || w.state === 'running' || w.state === 'waiting');
    if (!wave) {
      c.state = 'finished';
      c.message = `${c.nodes.filter((n) => n.state === 'done').length} of ${c.nodes.length} nodes upgraded`;
      c.next_at = null;
      return c;
    }
    if (wave.state === 'running') {
      const job = await jobs.get(wave.job_id!);
      if (job && job.state === 'running') {
        c.next_at = iso(t + s.pollMs);
        return c;
      }
      settleWave(c, wave, job, t);
      wave.job_id = null;
      const mine = c.nodes.filter((n) => n.wave === wave.index);
      const failed = mine.filter((n) => n.state === 'failed').length;
      if (overThreshold(failed, mine.length, c.spec.failure_threshold)) {
        wave.state = 'stopped';
        wave.ended_at = iso(t);
        cancelRest(c, t);
        c.state = 'stopped';
        c.message = `wave ${wave.index + 1}: ${failed} of ${mine.length} nodes failed, over the threshold of ${c.spec.failure_threshold}%`;
        c.next_at = null;
        return c;
      }
      if (mine.some((n) => n.state === 'retry')) {
        wave.state = 'waiting';
        // Not again in the window it just ran in: in the next one (or after retry_delay without windows).
        const ws = windowState(c.spec.window, t);
        wave.retry_after = iso(c.spec.window ? Math.max(t, ws.closes_at ?? t) : t + s.retryDelayMs);
      } else {
        wave.state = 'done';
        wave.ended_at = iso(t);
      }
      continue;
    }
    // pending or waiting: start it if its time has come.
    const from = Math.max(t, wave.retry_after ? Date.parse(wave.retry_after) : t);
    const ws = windowState(c.spec.window, from);
    if (from > t || !ws.open) {
      const at = ws.open ? from : ws.opens_at;
      c.state = 'waiting_window';
      c.next_at = at === null ? null : iso(at);
      c.message = at === null ? 'the window never opens' : `wave ${wave.index + 1} waits for the window opening at ${iso(at)}`;
      return c;
    }
    const nodes = c.nodes.filter((n) => n.wave === wave.index && (n.state === 'pending' || n.state === 'retry'));
    if (nodes.length === 0) {
      wave.state = 'done';
      wave.ended_at = iso(t);
      continue;
    }
    const timeout = Math.min(ws.closes_at === null ? s.maxJobMs : ws.closes_at - t, MAX_JOB_MS);
    const jobId = await jobs.start(c, wave.index, nodes.map((n) => n.node_id), Math.max(MIN_JOB_MS, timeout));
    for (const n of nodes) Object.assign(n, { state: 'running', attempts: n.attempts + 1, job_id: jobId, updated_at: iso(t) });
    Object.assign(wave, { state: 'running', job_id: jobId, job_ids: [...wave.job_ids, jobId], retry_after: null, started_at: wave.started_at ?? iso(t) });
    c.state = 'running';
    c.message = `wave ${wave.index + 1} of ${c.waves.length} running (${nodes.length} nodes)`;
    c.next_at = iso(t + s.pollMs);
    return c;
  }
}

/** Cancel `c` at `now`: its running job cancelled, everything not final with it. */
export async function cancelCampaign(input: CampaignRecord, now: Date, jobs: CampaignJobs): Promise<CampaignRecord> {
  const c = structuredClone(input);
  for (const w of c.waves) if (w.job_id) await jobs.cancel(w.job_id);
  cancelRest(c, now.getTime());
  Object.assign(c, { state: 'cancelled', message: 'cancelled by an admin', next_at: null, updated_at: now.toISOString() });
  return c;
}
