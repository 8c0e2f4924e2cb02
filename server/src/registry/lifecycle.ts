/**
 * The periodic lifecycle sweep (node-manager style, as Chef Automate's ingest jobs do it):
 * - status reachable → unreachable after `missed_runs` run intervals without contact;
 * - state running/unknown → missing after `missing_after` of silence (a contact brings it back);
 * - missing and terminated nodes purged `purge_after` their last state change (no pile-up);
 * - runs older than their retention deleted (Postgres: whole day partitions), old history,
 *   changes, events (and the deliveries of them that are done) and closed findings older than theirs.
 *
 * Every step works in batches of a bounded size, each its own short transaction, and yields to
 * the event loop between batches, so ingestion in the same process keeps flowing; a step stops
 * after MAX_BATCHES and continues at the next sweep. Sweeps never overlap (the next is scheduled
 * when one ends), and several servers sweeping one PostgreSQL database share the work (the store
 * skips rows another transaction holds).
 */
import { EventEmitter } from 'node:events';
import { setImmediate as yieldToLoop } from 'node:timers/promises';
import type { Logger } from '@capstan/shared/log';
import type { Store } from '../store/store.js';
import { systemActor } from '../audit/actor.js';
import type { NodeRegistry } from './nodes.js';

export interface LifecyclePolicy {
  runIntervalMs: number;
  missedRuns: number;
  missingAfterMs: number;
  purgeAfterMs: number;
  runsRetentionMs: number;
  historyRetentionMs: number;
  changesRetentionMs: number;
  /** Events, and the deliveries done with them, are deleted after this. */
  eventsRetentionMs: number;
  /** Closed findings are deleted this long after they closed (open ones are kept). */
  findingsRetentionMs: number;
  /** Audit records older than this are deleted (absent: kept). */
  auditRetentionMs?: number;
  /** At most this many audit records are kept (absent: no cap). */
  auditMaxRows?: number;
  /** Rows (runs, history, nodes marked) per transaction. */
  batchSize: number;
  /** Nodes purged per transaction (each takes its runs with it, hence smaller). */
  purgeBatchSize: number;
}

export interface LifecycleConfig {
  lifecycle: { run_interval: number; missed_runs: number; missing_after: number; purge_after: number; purge_batch_size: number };
  retention: { runs: number; history: number; changes: number; events: number; findings: number; audit?: number; audit_max_rows?: number; batch_size: number };
}

export function lifecyclePolicy(c: LifecycleConfig): LifecyclePolicy {
  return {
    runIntervalMs: c.lifecycle.run_interval,
    missedRuns: c.lifecycle.missed_runs,
    missingAfterMs: c.lifecycle.missing_after,
    purgeAfterMs: c.lifecycle.purge_after,
    runsRetentionMs: c.retention.runs,
    historyRetentionMs: c.retention.history,
    changesRetentionMs: c.retention.changes,
    eventsRetentionMs: c.retention.events,
    findingsRetentionMs: c.retention.findings,
    ...(c.retention.audit !== undefined && { auditRetentionMs: c.retention.audit }),
    ...(c.retention.audit_max_rows !== undefined && { auditMaxRows: c.retention.audit_max_rows }),
    batchSize: c.retention.batch_size,
    purgeBatchSize: c.lifecycle.purge_batch_size,
  };
}

export interface SweepResult {
  started_at: string;
  ms: number;
  unreachable: number;
  missing: number;
  purged: number;
  runs_deleted: number;
  history_pruned: number;
  changes_deleted: number;
  /** Events past retention.events, and deliveries done with before then. */
  events_deleted: number;
  /** Findings closed before retention.findings. */
  findings_deleted: number;
  /** Audit records deleted by age or beyond the row cap. */
  audit_deleted: number;
  /** Expectation lists no node names any more, deleted. */
  expectation_lists_deleted: number;
  /** Policy texts no bundle uses any more, deleted. */
  policy_texts_deleted: number;
  /** The cut-off of run retention: runs that started before it are gone. */
  runs_before: string;
}

/** Per step and sweep; what is left waits for the next sweep. */
export const MAX_BATCHES = 1000;
const DAY_MS = 86_400_000;

/** Run retention keeps whole UTC days, so both stores (and Postgres partitions) cut at midnight. */
export function runsCutoff(now: Date, retentionMs: number): Date {
  return new Date(Math.floor((now.getTime() - retentionMs) / DAY_MS) * DAY_MS);
}

/** Set `stopped` to end a sweep after the batch in flight (shutdown). */
export interface SweepSignal {
  stopped: boolean;
}

/** The sweep acts as the server itself: its node changes are recorded as `sweep`'s. */
const SWEEP = systemActor('sweep');

/**
 * One sweep at `now`. Node changes go through the registry (`nodes`), so each moved node is
 * audited and its policy follows; retention deletes rows in bulk.
 */
export async function sweep(store: Store, nodes: NodeRegistry, p: LifecyclePolicy, now: Date, signal: SweepSignal = { stopped: false }): Promise<SweepResult> {
  const batches = async (limit: number, step: () => Promise<number>): Promise<number> => {
    let total = 0;
    for (let i = 0; i < MAX_BATCHES && !signal.stopped; i++) {
      const n = await step();
      total += n;
      if (n < limit) break;
      await yieldToLoop();
    }
    return total;
  };
  const t0 = Date.now();
  const at = now.toISOString();
  const ago = (ms: number) => new Date(now.getTime() - ms).toISOString();
  const cutoff = runsCutoff(now, p.runsRetentionMs).toISOString();
  await store.prepareRunStorage(now);
  const unreachable = await batches(p.batchSize, () => nodes.sweepStep('unreachable', () => store.markUnreachable(ago(p.runIntervalMs * p.missedRuns), at, p.batchSize), at, SWEEP));
  const missing = await batches(p.batchSize, () => nodes.sweepStep('missing', () => store.markMissing(ago(p.missingAfterMs), at, p.batchSize), at, SWEEP));
  const purged = await batches(p.purgeBatchSize, () => nodes.sweepStep('purge', () => store.purgeNodes(ago(p.purgeAfterMs), p.purgeBatchSize), at, SWEEP));
  const runsDeleted = await batches(p.batchSize, () => store.deleteRunsBefore(cutoff, p.batchSize));
  const historyPruned = await batches(p.batchSize, () => store.pruneHistory(ago(p.historyRetentionMs), p.batchSize));
  const changesDeleted = await batches(p.batchSize, () => store.deleteChangesBefore(ago(p.changesRetentionMs), p.batchSize));
  const eventsDeleted = await batches(p.batchSize, () => store.deleteEventsBefore(ago(p.eventsRetentionMs), p.batchSize))
    + await batches(p.batchSize, () => store.notify.deleteDeliveriesBefore(ago(p.eventsRetentionMs), p.batchSize));
  const findingsDeleted = await batches(p.batchSize, () => store.deleteClosedFindingsBefore(ago(p.findingsRetentionMs), p.batchSize));
  const listsDeleted = await batches(p.batchSize, () => store.deleteUnusedExpectationLists(p.batchSize));
  const textsDeleted = await batches(p.batchSize, () => store.deleteUnusedPolicyTexts(p.batchSize));
  const auditRetention = p.auditRetentionMs;
  const auditCap = p.auditMaxRows;
  const auditDeleted = (auditRetention === undefined ? 0 : await batches(p.batchSize, () => store.admins.deleteAuditBefore(ago(auditRetention), p.batchSize)))
    + (auditCap === undefined ? 0 : await batches(p.batchSize, () => store.admins.trimAudit(auditCap, p.batchSize)));
  return {
    started_at: at, ms: Date.now() - t0, unreachable, missing, purged, runs_deleted: runsDeleted,
    history_pruned: historyPruned, changes_deleted: changesDeleted, events_deleted: eventsDeleted, findings_deleted: findingsDeleted,
    audit_deleted: auditDeleted, expectation_lists_deleted: listsDeleted, policy_texts_deleted: textsDeleted, runs_before: cutoff,
  };
}

export interface SweeperOptions {
  store: Store;
  /** The node registry the sweep's node changes go through. */
  nodes: NodeRegistry;
  policy: LifecyclePolicy;
  intervalMs: number;
  log: Logger;
  now?: () => Date;
}

/** Runs `sweep` every interval (the first one interval after start); emits 'sweep' with each result. */
export class Sweeper extends EventEmitter {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<SweepResult | null> | null = null;
  private readonly signal: SweepSignal = { stopped: false };
  last: SweepResult | null = null;

  constructor(private readonly o: SweeperOptions) {
    super();
  }

  start(): void {
    this.schedule();
  }

  private schedule(): void {
    if (this.signal.stopped) return;
    this.timer = setTimeout(() => void this.runOnce().finally(() => this.schedule()), this.o.intervalMs);
    this.timer.unref();
  }

  /** Sweep now (or join the sweep in progress). A failed sweep is logged and retried next time. */
  runOnce(): Promise<SweepResult | null> {
    if (this.running) return this.running;
    this.running = (async () => {
      try {
        const r = await sweep(this.o.store, this.o.nodes, this.o.policy, (this.o.now ?? (() => new Date()))(), this.signal);
        this.last = r;
        const changed = r.unreachable + r.missing + r.purged + r.runs_deleted + r.history_pruned + r.changes_deleted + r.events_deleted
          + r.findings_deleted + r.audit_deleted + r.expectation_lists_deleted + r.policy_texts_deleted;
        if (changed > 0) this.o.log.info({ sweep: r }, 'lifecycle sweep');
        else this.o.log.debug({ sweep: r }, 'lifecycle sweep');
        this.emit('sweep', r);
        return r;
      } catch (err) {
        this.o.log.warn({ err }, 'lifecycle sweep failed, will retry');
        return null;
      } finally {
        this.running = null;
      }
    })();
    return this.running;
  }

  /** Stop scheduling and wait for the sweep in flight, if any, to finish its batch. */
  async stop(): Promise<void> {
    this.signal.stopped = true;
    if (this.timer) clearTimeout(this.timer);
    await this.running;
  }
}
