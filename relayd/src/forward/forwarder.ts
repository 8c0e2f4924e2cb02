/**
 * Spool → upstream: one SpoolProcessor per kind (inotify + catch-up + start-up pass, per-file
 * backoff), node routing by the nodes list, and an upstream health gate.
 *
 * The gate: when a forward cannot even connect, the upstream is marked down, the processors are
 * paused and the upstream alone is probed every `probe_interval`. Without it an outage of hours
 * would spend a connection attempt per waiting file per backoff step, and files would sit at the
 * longest backoff (minutes) after the upstream came back; with it they all go as soon as the
 * probe answers.
 */
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { SPOOL_KINDS, type SpoolKind } from '@capstan/shared/protocol';
import { ocsPairReady, uploadNameOf } from '@capstan/toolkit/spool/ocs-pair';
import { SpoolProcessor, type ProcessedEvent } from '@capstan/toolkit/spool/processor';
import { RecentBodies } from '@capstan/toolkit/spool/recent';
import type { Spool } from '@capstan/toolkit/spool/spool';
import { checkUploadName, isUploadName } from '@capstan/toolkit/spool/upload';
import { stat } from 'node:fs/promises';
import type { NodesList } from '../data/nodes.js';
import type { NodesSync } from '../data/sync.js';
import type { Metrics } from '../metrics.js';

import type { Upstream } from './upstream.js';
import { BatchSender } from './batch.js';

export interface ForwarderOptions {
  spool: Spool;
  upstream: Upstream;
  nodes: () => NodesList;
  /**
   * The list synced from the upstream, and whether routing uses it now (no nodes_list_file, a
   * list in hand). A file from a node it does not know goes up (the upstream decides) unless
   * `refuseUnknown`: then a run log is refused for good only once a list asked for after the
   * file arrived says so, and inventories still go up (a new node registers through them).
   */
  sync?: { list: NodesSync; inUse: () => boolean; refuseUnknown: boolean };
  log: Logger;
  metrics: Metrics;
  concurrency: number;
  catchupIntervalMs: number;
  retryMinMs: number;
  retryMaxMs: number;
  probeIntervalMs: number;
  /** How long one half of an OCS pair waits for the other (processing.ocs_pair_wait). */
  ocsPairWaitMs?: number;
  /** Run logs sent up in batches ([upstream] batch_files, batch_size, batch_wait); absent or one file: a PUT each. */
  batch?: { files: number; bytes: number; waitMs: number };
}

export type UpstreamState = 'unknown' | 'up' | 'down';

/** Memory for just-spooled bodies awaiting their first forward (see recent.ts). */
const RECENT_BYTES = 8 * 1024 * 1024;

export class Forwarder {
  readonly processors: Record<SpoolKind, SpoolProcessor>;
  private readonly recent = new RecentBodies(RECENT_BYTES);
  private state: UpstreamState = 'unknown';
  private lastError: string | null = null;
  private lastContact: number | null = null;
  private probeTimer: NodeJS.Timeout | null = null;
  private stopped = false;
  private readonly batches: BatchSender | null;

  constructor(private readonly o: ForwarderOptions) {
    this.processors = {} as Record<SpoolKind, SpoolProcessor>;
    this.batches = o.batch && o.batch.files > 1
      ? new BatchSender({ upstream: o.upstream, maxFiles: o.batch.files, maxBytes: o.batch.bytes, waitMs: o.batch.waitMs, slots: o.concurrency, log: o.log })
      : null;
    // The concurrency bound is for the upstream as a whole (the Pool's connections), shared by kinds.
    for (const kind of SPOOL_KINDS) {
      const p = new SpoolProcessor({
        kind,
        spool: o.spool,
        log: o.log,
        // Batched run logs: enough forwards in flight to fill a batch on every connection.
        concurrency: kind === 'reports' && this.batches ? this.batches.capacity : o.concurrency,
        catchupIntervalMs: o.catchupIntervalMs,
        retryMinMs: o.retryMinMs,
        retryMaxMs: o.retryMaxMs,
        handle: (path, name, signal) => this.handle(kind, path, name, signal),
        // Files someone dropped into incoming/ whose name is no run log or inventory stay where
        // they are, as with RUDDER's relayd: only what an upload could have put there is judged.
        accepts: (name) => isUploadName(kind, uploadNameOf(name)),
      });
      p.on('processed', (e: ProcessedEvent) => this.account(e));
      this.processors[kind] = p;
    }
  }

  private async handle(kind: SpoolKind, path: string, name: string, signal: AbortSignal): Promise<void> {
    // An OCS half kept as a candidate (`<name>~<8 hex>`, ocs-pair.ts) goes up under its upload's name.
    const upName = uploadNameOf(name);
    const { nodeId } = checkUploadName(kind, upName);
    if (!this.o.nodes().accepts(nodeId)) {
      if (this.o.sync?.inUse()) {
        if (this.o.sync.refuseUnknown) await this.unknownToSyncedList(kind, nodeId, path);
      } else throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is not in this relay's nodes list`);
    }
    // A RUDDER agent's inventory goes up with its signature, the inventory first (as the agent
    // sent them): the upstream verifies the two together.
    const dir = this.o.spool.incomingDir(kind);
    // A lone `.sign` goes up alone: its inventory went up already (perhaps with junk raced ahead
    // under the `.sign`'s name), and the root pairs what it holds.
    const pair = kind === 'inventories'
      ? await ocsPairReady(dir, name, this.o.ocsPairWaitMs ?? 600_000, (data) => this.processors.inventories.prompt(data), Date.now(), 'alone')
      : null;
    const cached = this.recent.take(`${kind}/${name}`);
    try {
      if (kind === 'reports' && this.batches) {
        const size = cached?.length ?? (await stat(path)).size;
        if (this.batches.takes(name, size)) await this.batches.send(name, path, size, cached, signal);
        else await this.o.upstream.forward(kind, name, path, signal, cached);
      } else {
        await this.o.upstream.forward(kind, upName, path, signal, cached);
      }
      if (pair && pair !== 'alone') {
        // Every signature candidate goes up with it: the relay cannot tell junk from the real one.
        for (const sign of pair.signs) {
          await this.o.upstream.forward(kind, uploadNameOf(sign), `${dir}/${sign}`, signal, this.recent.take(`${kind}/${sign}`));
        }
        // Kept while another inventory candidate still needs them.
        if (!pair.otherData) for (const sign of pair.signs) await this.o.spool.remove(kind, sign);
      }
    } catch (err) {
      if (isCapstanError(err) && err.details?.unreachable) this.markDown(err.message);
      else if (isCapstanError(err) && err.code.startsWith('ERR_UPSTREAM')) this.markUp(); // it answered
      throw err;
    }
    this.markUp();
  }

  /**
   * A file from a node the synced list does not know: it may have been accepted a moment ago.
   * Returns when the file may go up; throws ERR_NODE_UNKNOWN, permanent when a list confirmed
   * after the file arrived lacks the node, transient while no such list could be had yet.
   */
  private async unknownToSyncedList(kind: SpoolKind, nodeId: string, path: string): Promise<void> {
    if (kind === 'inventories') return;
    const sync = this.o.sync!.list;
    const arrived = (await stat(path)).mtimeMs;
    if (sync.confirmedAt <= arrived) {
      const refreshing = sync.refreshOnMiss();
      if (refreshing) await refreshing;
      if (this.o.nodes().accepts(nodeId)) return;
      if (sync.confirmedAt <= arrived) {
        throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is not in the nodes list yet; asking the upstream again`, { transient: true });
      }
    }
    throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is not in the nodes list synced from the upstream`);
  }

  /** The synced list changed: files waiting for it are due now. */
  nodesChanged(): void {
    for (const kind of SPOOL_KINDS) this.processors[kind].retryAll();
  }

  private account(e: ProcessedEvent): void {
    const m = this.o.metrics;
    const kind = e.kind;
    if (e.outcome === 'done') {
      m.forwarded.inc({ kind });
      m.forwardSeconds.observe({ kind }, e.ms / 1000);
      return;
    }
    const code = isCapstanError(e.error) ? e.error.code : ((e.error as { code?: string } | undefined)?.code ?? 'ERR_INTERNAL');
    if (e.outcome === 'failed') m.failed.inc({ kind, code });
    else m.retried.inc({ kind });
    if (code.startsWith('ERR_UPSTREAM')) m.upstreamErrors.inc({ kind, code: String((e.error as { details?: { cause?: string; status?: number } }).details?.cause ?? (e.error as { details?: { status?: number } }).details?.status ?? code) });
  }

  private markUp(): void {
    this.lastContact = Date.now();
    if (this.state === 'up') return;
    const wasDown = this.state === 'down';
    this.state = 'up';
    this.lastError = null;
    if (this.probeTimer) clearTimeout(this.probeTimer);
    this.probeTimer = null;
    if (wasDown) {
      this.o.log.info({ upstream: this.o.upstream.url }, 'upstream is back, resuming');
      for (const kind of SPOOL_KINDS) this.processors[kind].resume();
    }
  }

  private markDown(reason: string): void {
    this.lastError = reason;
    if (this.state === 'down' || this.stopped) return;
    this.state = 'down';
    this.o.log.warn({ upstream: this.o.upstream.url, reason }, 'upstream unreachable, holding files until it answers');
    for (const kind of SPOOL_KINDS) this.processors[kind].pause();
    this.scheduleProbe();
  }

  private scheduleProbe(): void {
    if (this.stopped) return;
    this.probeTimer = setTimeout(() => {
      void this.o.upstream.probe().then((ok) => {
        if (this.stopped || this.state !== 'down') return;
        if (ok) this.markUp();
        else this.scheduleProbe();
      });
    }, this.o.probeIntervalMs);
    this.probeTimer.unref();
  }

  /** A file the API just spooled: take it now rather than when inotify says so. */
  notify(kind: SpoolKind, name: string): void {
    this.processors[kind].notify(name);
  }

  /** Its bytes, given before the file appears, so the first forward needs no read. */
  remember(kind: SpoolKind, name: string, data: Buffer): void {
    // notify() follows once the file is in place: its inotify event needs no stat.
    this.processors[kind].expect(name);
    // While the upstream is down files wait: memory would only hold what the disk holds.
    if (!this.processors[kind].isPaused) this.recent.put(`${kind}/${name}`, data);
  }

  get upstream(): { state: UpstreamState; lastError: string | null; lastContact: number | null; url: string; urls: string[] } {
    return { state: this.state, lastError: this.lastError, lastContact: this.lastContact, url: this.o.upstream.url, urls: this.o.upstream.urls };
  }

  pending(): Record<SpoolKind, number> {
    return Object.fromEntries(SPOOL_KINDS.map((k) => [k, this.processors[k].pending])) as Record<SpoolKind, number>;
  }

  async start(): Promise<void> {
    for (const kind of SPOOL_KINDS) await this.processors[kind].start();
  }

  async stop(graceMs: number): Promise<void> {
    this.stopped = true;
    if (this.probeTimer) clearTimeout(this.probeTimer);
    await Promise.all(SPOOL_KINDS.map((k) => this.processors[k].stop(graceMs)));
    this.batches?.close();
  }
}
