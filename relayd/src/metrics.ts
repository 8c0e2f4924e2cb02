/**
 * What relayd exposes on GET /metrics (Prometheus text, prom-client). One Registry per relay so
 * that tests running several relays in one process do not mix their counts. Names follow RUDDER's
 * (R/src/metrics.rs) with a capstan_relayd_ prefix, by spool kind instead of one family per kind.
 */
import { collectDefaultMetrics, Counter, Gauge, Histogram, Registry } from 'prom-client';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';
import type { Spool } from '@capstan/toolkit/spool/spool';
import type { NodesList } from './data/nodes.js';
import type { UpstreamState } from './forward/forwarder.js';

export interface SpoolGauges {
  depth(): Promise<Record<SpoolKind, number>>;
  /** mtime (ms) of the oldest waiting file per kind, null when none waits. */
  oldest(): Promise<Record<SpoolKind, number | null>>;
}

export interface MetricsSources {
  spool: SpoolGauges;
  managedNodes(): number;
  subNodes(): number;
  upstreamUp(): boolean | null;
  agentConnections(): number;
  /** Bytes waiting in the spool against its quota, when one is set. */
  spoolUsage(): { bytes: number; quota: number } | null;
  /** Delivered files kept in free/ for reuse, and uploads that reused one since start. */
  recycling(): { files: number; bytes: number; reused: number };
}

/** The sources of a running relay, read at each scrape. */
export function relaySources(p: {
  spool: Spool;
  /** The node list routing uses now. */
  nodes: () => NodesList;
  hub: { readonly size: number };
  /** The upstream's state as the forwarder sees it; null before there is a forwarder. */
  upstream: () => UpstreamState | null;
}): MetricsSources {
  const { spool } = p;
  return {
    spool: {
      depth: () => spool.depth(),
      oldest: async () => Object.fromEntries(await Promise.all(SPOOL_KINDS.map(async (k) => [k, await spool.oldest(k)]))) as Record<SpoolKind, number | null>,
    },
    managedNodes: () => p.nodes().neighbours().length,
    subNodes: () => p.nodes().size,
    upstreamUp: () => {
      const state = p.upstream();
      return state === 'unknown' || state === null ? null : state === 'up';
    },
    agentConnections: () => p.hub.size,
    spoolUsage: () => spool.usage,
    recycling: () => spool.recycling,
  };
}

export class Metrics {
  readonly registry = new Registry();
  readonly received: Counter<'kind'>;
  readonly receivedBytes: Counter<'kind'>;
  readonly refused: Counter<'kind' | 'status'>;
  readonly forwarded: Counter<'kind'>;
  readonly failed: Counter<'kind' | 'code'>;
  readonly retried: Counter<'kind'>;
  readonly upstreamErrors: Counter<'kind' | 'code'>;
  readonly forwardSeconds: Histogram<'kind'>;
  readonly remoteRuns: Counter<'outcome'>;

  constructor(sources: MetricsSources, opts: { processMetrics?: boolean } = {}) {
    const registers = [this.registry];
    this.received = new Counter({ name: 'capstan_relayd_received_files_total', help: 'Files accepted into the spool (2xx sent).', labelNames: ['kind'], registers });
    this.receivedBytes = new Counter({ name: 'capstan_relayd_received_bytes_total', help: 'Bytes accepted into the spool.', labelNames: ['kind'], registers });
    this.refused = new Counter({ name: 'capstan_relayd_refused_uploads_total', help: 'Uploads answered with an error, by HTTP status.', labelNames: ['kind', 'status'], registers });
    this.forwarded = new Counter({ name: 'capstan_relayd_forwarded_files_total', help: 'Files the upstream acknowledged (then deleted here).', labelNames: ['kind'], registers });
    this.failed = new Counter({ name: 'capstan_relayd_failed_files_total', help: 'Files moved to failed/ for good, by code.', labelNames: ['kind', 'code'], registers });
    this.retried = new Counter({ name: 'capstan_relayd_retried_files_total', help: 'Forward attempts that failed transiently and will be retried.', labelNames: ['kind'], registers });
    this.upstreamErrors = new Counter({ name: 'capstan_relayd_upstream_errors_total', help: 'Failed forward attempts, by error code.', labelNames: ['kind', 'code'], registers });
    this.forwardSeconds = new Histogram({
      name: 'capstan_relayd_forward_duration_seconds',
      help: 'Time to forward one file upstream (successful forwards).',
      labelNames: ['kind'],
      buckets: [0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30],
      registers,
    });
    this.remoteRuns = new Counter({ name: 'capstan_relayd_remote_runs_total', help: 'Remote-run targets, by outcome.', labelNames: ['outcome'], registers });
    for (const kind of SPOOL_KINDS) {
      // Export zeros from the start, so rate() and alerts see the series before the first event.
      this.received.inc({ kind }, 0);
      this.forwarded.inc({ kind }, 0);
      this.retried.inc({ kind }, 0);
    }

    new Gauge({
      name: 'capstan_relayd_spool_files',
      help: 'Files waiting in incoming/.',
      labelNames: ['kind'],
      registers,
      async collect() {
        const d = await sources.spool.depth();
        for (const kind of SPOOL_KINDS) this.set({ kind }, d[kind]);
      },
    });
    new Gauge({
      name: 'capstan_relayd_spool_oldest_age_seconds',
      help: 'Age of the oldest file waiting in incoming/ (0 when empty).',
      labelNames: ['kind'],
      registers,
      async collect() {
        const o = await sources.spool.oldest();
        const now = Date.now();
        for (const kind of SPOOL_KINDS) this.set({ kind }, o[kind] === null ? 0 : Math.max(0, (now - o[kind]!) / 1000));
      },
    });
    new Gauge({
      name: 'capstan_relayd_spool_bytes',
      help: 'Bytes waiting in incoming/ (only with a spool quota).',
      registers,
      collect() {
        const u = sources.spoolUsage();
        if (u) this.set(u.bytes);
      },
    });
    let reusedSeen = 0;
    new Gauge({
      name: 'capstan_relayd_spool_free_files',
      help: 'Delivered files kept in free/ to be overwritten by the next uploads.',
      registers,
      collect() {
        this.set(sources.recycling().files);
      },
    });
    new Counter({
      name: 'capstan_relayd_spool_reused_files_total',
      help: 'Uploads written over a file from free/ instead of a new file (a low share under load: free/ ran dry, files are piling up).',
      registers,
      collect() {
        // The spool counts since start; the counter is brought up to it at each scrape.
        const { reused } = sources.recycling();
        if (reused > reusedSeen) this.inc(reused - reusedSeen);
        reusedSeen = reused;
      },
    });
    new Gauge({
      name: 'capstan_relayd_upstream_up',
      help: '1 when the last contact with the upstream worked, 0 when not, absent before any.',
      registers,
      collect() {
        const up = sources.upstreamUp();
        if (up !== null) this.set(up ? 1 : 0);
      },
    });
    new Gauge({ name: 'capstan_relayd_managed_nodes', help: 'Nodes whose policy server is this relay.', registers, collect() { this.set(sources.managedNodes()); } });
    new Gauge({ name: 'capstan_relayd_sub_nodes', help: 'Nodes in the nodes list.', registers, collect() { this.set(sources.subNodes()); } });
    new Gauge({ name: 'capstan_relayd_agent_connections', help: 'Agents and sub-relays holding a remote-run connection.', registers, collect() { this.set(sources.agentConnections()); } });
    if (opts.processMetrics !== false) collectDefaultMetrics({ register: this.registry });
  }

  async render(): Promise<{ contentType: string; body: string }> {
    return { contentType: this.registry.contentType, body: await this.registry.metrics() };
  }
}
