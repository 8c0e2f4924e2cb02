/**
 * GET /metrics for the server (prom-client, one registry per server, so tests that build several
 * apps never share counters): ingest rate (counter; Prometheus derives the rate) and latency
 * (histogram), failed files by reason (the error code), queue depth (files waiting in the spool),
 * nodes by status and state, and what the lifecycle sweep removed.
 *
 * Node counts come from the store at scrape time, cached for COUNTS_TTL_MS so a scraper polling
 * hard cannot turn into a stream of aggregate queries over 100,000 nodes.
 */
import { Counter, Gauge, Histogram, Registry, collectDefaultMetrics } from 'prom-client';
import { isCapstanError } from '@capstan/shared/errors';
import type { ProcessedEvent } from '@capstan/toolkit/spool/processor';
import type { SweepResult } from './registry/lifecycle.js';
import type { RegistryCounts } from './store/store.js';

export const COUNTS_TTL_MS = 5000;
const STATUSES = ['unknown', 'reachable', 'unreachable'];

export interface MetricsSources {
  depth: () => Promise<Record<string, number>>;
  counts: () => Promise<RegistryCounts>;
  /** What failed/ holds and how many files its bounds removed (absent: no such gauges). */
  failed?: () => { files: number; bytes: number; evicted: number };
}

export class ServerMetrics {
  readonly registry = new Registry();
  private readonly ingested: Counter<'kind' | 'outcome'>;
  private readonly latency: Histogram<'kind'>;
  private readonly failed: Counter<'kind' | 'reason'>;
  private readonly swept: Counter<'what'>;
  private readonly refused: Counter<'kind' | 'code'>;
  private cached: { at: number; counts: Promise<RegistryCounts> } | null = null;

  constructor(private readonly sources: MetricsSources) {
    const registers = [this.registry];
    collectDefaultMetrics({ register: this.registry, prefix: 'capstan_server_' });
    this.ingested = new Counter({
      name: 'capstan_server_ingested_files_total', help: 'Spooled files processed, by kind and outcome (done, failed, retry)',
      labelNames: ['kind', 'outcome'], registers,
    });
    this.latency = new Histogram({
      name: 'capstan_server_ingest_duration_seconds', help: 'Time to verify, parse and store one spooled file',
      labelNames: ['kind'], buckets: [0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10], registers,
    });
    this.failed = new Counter({
      name: 'capstan_server_failed_files_total', help: 'Files moved to failed/, by kind and reason (error code)',
      labelNames: ['kind', 'reason'], registers,
    });
    this.swept = new Counter({
      name: 'capstan_server_lifecycle_total', help: 'What the lifecycle sweeps of this process changed',
      labelNames: ['what'], registers,
    });
    this.refused = new Counter({
      name: 'capstan_server_refused_uploads_total', help: 'Uploads refused before they were spooled, by kind and error code',
      labelNames: ['kind', 'code'], registers,
    });
    const self = this;
    if (sources.failed) {
      const failed = sources.failed;
      new Gauge({
        name: 'capstan_server_spool_failed_files', help: 'Files kept in failed/ (spool.failed_max_files bounds them)', registers,
        collect() {
          this.set(failed().files);
        },
      });
      new Gauge({
        name: 'capstan_server_spool_failed_bytes', help: 'Bytes kept in failed/ (spool.failed_max_size bounds them)', registers,
        collect() {
          this.set(failed().bytes);
        },
      });
      new Counter({
        name: 'capstan_server_spool_failed_evicted_total', help: 'Failed files removed early to keep failed/ within its bounds', registers,
        collect() {
          this.reset();
          this.inc(failed().evicted);
        },
      });
    }
    new Gauge({
      name: 'capstan_server_queue_depth', help: 'Files waiting in the spool, by kind', labelNames: ['kind'], registers,
      async collect() {
        const depth = await self.sources.depth();
        for (const [kind, n] of Object.entries(depth)) this.set({ kind }, n);
      },
    });
    new Gauge({
      name: 'capstan_server_nodes', help: 'Nodes in the registry by status', labelNames: ['status'], registers,
      async collect() {
        const c = await self.counts();
        for (const s of STATUSES) this.set({ status: s }, c.by_status[s] ?? 0);
      },
    });
    new Gauge({
      name: 'capstan_server_nodes_by_state', help: 'Nodes in the registry by state', labelNames: ['state'], registers,
      async collect() {
        const c = await self.counts();
        this.reset();
        for (const [state, n] of Object.entries(c.by_state)) this.set({ state }, n);
      },
    });
    new Gauge({
      name: 'capstan_server_nodes_by_acceptance', help: 'Nodes in the registry by acceptance', labelNames: ['accepted'], registers,
      async collect() {
        const c = await self.counts();
        for (const a of ['pending', 'accepted', 'refused']) this.set({ accepted: a }, c.by_acceptance[a] ?? 0);
      },
    });
  }

  private counts(): Promise<RegistryCounts> {
    const now = Date.now();
    if (!this.cached || now - this.cached.at > COUNTS_TTL_MS) {
      const counts = this.sources.counts();
      // A failed query is not cached: the next scrape asks again.
      counts.catch(() => (this.cached = null));
      this.cached = { at: now, counts };
    }
    return this.cached.counts;
  }

  onProcessed(e: ProcessedEvent): void {
    this.ingested.inc({ kind: e.kind, outcome: e.outcome });
    this.latency.observe({ kind: e.kind }, e.ms / 1000);
    if (e.outcome === 'failed') this.failed.inc({ kind: e.kind, reason: isCapstanError(e.error) ? e.error.code : 'ERR_INTERNAL' });
  }

  /** An upload refused with this code before anything was spooled (bad name, size, pace, full disk…). */
  onRefused(kind: string, code: string): void {
    this.refused.inc({ kind, code });
  }

  onSweep(r: SweepResult): void {
    for (const what of ['unreachable', 'missing', 'purged', 'runs_deleted', 'history_pruned', 'changes_deleted', 'events_deleted', 'findings_deleted', 'audit_deleted',
      'expectation_lists_deleted', 'policy_texts_deleted'] as const) {
      if (r[what] > 0) this.swept.inc({ what }, r[what]);
    }
  }

  contentType(): string {
    return this.registry.contentType;
  }

  text(): Promise<string> {
    return this.registry.metrics();
  }
}
