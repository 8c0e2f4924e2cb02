/**
 * One step of a campaign, given the time: the whole state machine of patch campaigns, on top of
 * jobs. Each wave runs as `upgrade` jobs: one per window opening it runs in, and per window its
 * nodes take (a group's, spec.windows, or the campaign's own), so that nodes in web-eu start in
 * Paris's night and nodes in web-us in New York's. The engine reads each job once it ended and
 * decides its nodes' fates:
 *
 *   task done                                   → node done (from→to read from its output)
 *   task failed offline/no_answer/relay_lost,
 *     or aborted at the window's end (timeout)  → node retry, in the next window (up to max_attempts)
 *   any other failure                           → node failed
 *
 * A wave whose failed nodes pass failure_threshold stops the campaign (its other jobs and the
 * waves after it are cancelled); a node to retry waits for the next opening of its own window; a
 * wave whose nodes are all final lets the next start (now if their windows are still open). Campaign states:
 *
 *   scheduled ─▶ running ⇄ waiting_window ─▶ finished
 *                   └───────────┴──────────▶ stopped (threshold) │ cancelled (admin)
 *
 * Jobs are reached through a port (CampaignJobs) and time through `now`: tests drive it with
 * a fake clock and fake jobs.
 */
import { findUpgradeResult } from '@capstan/shared/upgrade';
import type { CampaignNodeResult, CampaignRecord, CampaignWave, MaintenanceWindow, TaskRecord } from '../store/store.js';
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

/** The window a node of `key` runs in: its group's, or the campaign's own (key null). */
export function windowOf(c: CampaignRecord, key: string | null): MaintenanceWindow | null {
  return key === null ? c.spec.window : c.spec.windows?.find((w) => w.group === key)?.window ?? c.spec.window;
}

const keyOf = (n: CampaignNodeResult): string | null => n.window ?? null;

/** The order windows are served in: the campaign's groups as given, the default window, then any other key its nodes hold. */
function keyOrder(c: CampaignRecord, nodes: readonly CampaignNodeResult[]): Array<string | null> {
  const keys: Array<string | null> = [...(c.spec.windows ?? []).map((w) => w.group), null];
  for (const n of nodes) if (!keys.includes(keyOf(n))) keys.push(keyOf(n));
  return keys;
}

/** When a node to retry may start again (0 for a node never tried). */
function retryAt(n: CampaignNodeResult, wave: CampaignWave): number {
  if (n.state !== 'retry') return 0;
  const at = n.retry_after ?? wave.retry_after;
  return at ? Date.parse(at) : 0;
}

/** Read the ended job into the results of `nodes` (those of the wave it ran on). */
function settleJob(c: CampaignRecord, nodes: CampaignNodeResult[], job: Awaited<ReturnType<CampaignJobs['get']>>, now: number, s: EngineSettings): void {
  const tasks = new Map((job?.tasks ?? []).map((t) => [t.node_id, t]));
  for (const n of nodes) {
    const t = tasks.get(n.node_id);
    const result = findUpgradeResult(t?.output ?? null);
    Object.assign(n, {
      reason: t?.reason ?? 'timeout', message: t?.message ?? 'the job is gone', exit_code: t?.exit_code ?? null, updated_at: iso(now),
      ...(result && { upgraded: result.upgraded, unmet: result.unmet, reboot_required: result.reboot_required }),
    });
    if (t?.state === 'done') n.state = 'done';
    else if (t?.reason === 'cancelled') n.state = 'cancelled';
    else if (!t || RETRY_REASONS.has(t.reason)) n.state = n.attempts < c.spec.max_attempts ? 'retry' : 'failed';
    else n.state = 'failed';
    if (n.state === 'retry') {
      // Not again in the window it just ran in: in its next one (or after retry_delay without a window).
      const w = windowOf(c, keyOf(n));
      n.retry_after = iso(w ? Math.max(now, windowState(w, now).closes_at ?? now) : now + s.retryDelayMs);
    }
  }
}

/** The jobs of `wave` still holding nodes. */
function runningJobs(wave: CampaignWave, mine: CampaignNodeResult[]): string[] {
  const ids = new Set(mine.filter((n) => n.state === 'running' && n.job_id).map((n) => n.job_id!));
  return [...ids];
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
 * when it should be looked at again (null once final). A wave runs one job per window its nodes
 * are in (their groups' or the campaign's), each when that window is open; it ends when every
 * one of its nodes is final.
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
    const mine = c.nodes.filter((n) => n.wave === wave.index);
    const going: string[] = [];
    for (const id of runningJobs(wave, mine)) {
      const job = await jobs.get(id);
      if (job && job.state === 'running') going.push(id);
      else settleJob(c, mine.filter((n) => n.state === 'running' && n.job_id === id), job, t, s);
    }
    const failed = mine.filter((n) => n.state === 'failed').length;
    if (overThreshold(failed, mine.length, c.spec.failure_threshold)) {
      for (const id of going) await jobs.cancel(id);
      Object.assign(wave, { state: 'stopped', job_id: null, ended_at: iso(t) });
      cancelRest(c, t);
      c.state = 'stopped';
      c.message = `wave ${wave.index + 1}: ${failed} of ${mine.length} nodes failed, over the threshold of ${c.spec.failure_threshold}%`;
      c.next_at = null;
      return c;
    }
    const left = mine.filter((n) => n.state === 'pending' || n.state === 'retry');
    if (going.length === 0 && left.length === 0) {
      Object.assign(wave, { state: 'done', job_id: null, retry_after: null, ended_at: iso(t) });
      continue;
    }
    // Each window with nodes to start: a job now when it is open (and its last one ended), else when it opens.
    const waits: Array<{ at: number | null; key: string | null }> = [];
    let started = 0;
    for (const key of keyOrder(c, left)) {
      const group = left.filter((n) => keyOf(n) === key);
      if (group.length === 0 || mine.some((n) => n.state === 'running' && keyOf(n) === key)) continue;
      const w = windowOf(c, key);
      const ws = windowState(w, t);
      const ready = ws.open ? group.filter((n) => retryAt(n, wave) <= t) : [];
      if (ready.length > 0) {
        const timeout = Math.min(ws.closes_at === null ? s.maxJobMs : ws.closes_at - t, MAX_JOB_MS);
        const jobId = await jobs.start(c, wave.index, ready.map((n) => n.node_id), Math.max(MIN_JOB_MS, timeout));
        for (const n of ready) Object.assign(n, { state: 'running', attempts: n.attempts + 1, job_id: jobId, retry_after: null, updated_at: iso(t) });
        Object.assign(wave, { job_id: jobId, job_ids: [...wave.job_ids, jobId], started_at: wave.started_at ?? iso(t) });
        going.push(jobId);
        started += ready.length;
        continue;
      }
      // Closed, or only nodes waiting for a later opening: the soonest one they may start in.
      for (const from of new Set(group.map((n) => Math.max(t, retryAt(n, wave))))) {
        const at = windowState(w, from);
        waits.push({ at: at.open ? from : at.opens_at, key });
      }
    }
    const retries = mine.filter((n) => n.state === 'retry').map((n) => retryAt(n, wave));
    wave.retry_after = retries.length ? iso(Math.min(...retries)) : null;
    if (going.length > 0) {
      wave.state = 'running';
      c.state = 'running';
      const nodes = mine.filter((n) => n.state === 'running').length;
      c.message = `wave ${wave.index + 1} of ${c.waves.length} running (${started > 0 && started !== nodes ? `${started} started, ` : ''}${nodes} nodes)`;
      c.next_at = iso(t + s.pollMs);
      return c;
    }
    wave.state = wave.started_at ? 'waiting' : 'pending';
    wave.job_id = null;
    const next = waits.filter((x) => x.at !== null).sort((x, y) => x.at! - y.at!)[0];
    c.state = 'waiting_window';
    c.next_at = next ? iso(next.at!) : null;
    c.message = next
      ? `wave ${wave.index + 1} waits for the window${next.key === null ? '' : ` of group ${next.key}`} opening at ${iso(next.at!)}`
      : 'the window never opens';
    return c;
  }
}

/** Cancel `c` at `now`: its running job cancelled, everything not final with it. */
export async function cancelCampaign(input: CampaignRecord, now: Date, jobs: CampaignJobs): Promise<CampaignRecord> {
  const c = structuredClone(input);
  const ids = new Set([...c.waves.map((w) => w.job_id), ...c.nodes.filter((n) => n.state === 'running').map((n) => n.job_id)]);
  for (const id of ids) if (id) await jobs.cancel(id);
  cancelRest(c, now.getTime());
  Object.assign(c, { state: 'cancelled', message: 'cancelled by an admin', next_at: null, updated_at: now.toISOString() });
  return c;
}
