/**
 * The relay's health as RUDDER's `GET system/status` reports it (configuration, spool, upstream,
 * nodes list, remote-run), and the one line systemd shows. Read when asked, from the live parts:
 * nothing here is kept up to date in the background.
 */
import { statfs } from 'node:fs/promises';
import { isCapstanError } from '@capstan/shared/errors';
import type { Spool } from '@capstan/toolkit';
import type { RelayStatus } from './api/context.js';
import type { RelaydConfig } from './config.js';
import { NodesList } from './data/nodes.js';
import type { Routing } from './data/routing.js';
import type { Forwarder } from './forward/forwarder.js';
import type { Hub } from './remote-run/listeners.js';
import { loadListenerTls, loadUpstreamTls } from './tls.js';

export interface StatusParts {
  config: RelaydConfig;
  /** Re-read the configuration file, to report whether a reload would work. */
  reloadConfig?: () => RelaydConfig;
  spool: Spool;
  forwarder: Forwarder;
  routing: Routing;
  hub: Hub;
}

/** How long an upload refused for lack of room keeps the spool reported in error. */
const FULL_SHOWN_MS = 60_000;

export class SystemStatus {
  /** When an upload was last refused for lack of room. */
  private lastFull = 0;

  constructor(private readonly p: StatusParts) {}

  /** An upload was refused because the spool is full (507). */
  spoolFull(): void {
    this.lastFull = Date.now();
  }

  async status(): Promise<RelayStatus> {
    const { config, spool, routing } = this.p;
    const configuration = await this.configuration();
    const incoming = await spool.depth();
    const usage = spool.usage;
    const free = await freeBytes(config.spool.directory);
    const problems: string[] = [];
    if (free !== undefined && free < config.spool.min_free_space) problems.push(`file system has ${free} bytes free, below spool.min_free_space`);
    if (usage && usage.bytes >= usage.quota) problems.push('spool.max_size reached');
    if (problems.length === 0 && Date.now() - this.lastFull < FULL_SHOWN_MS) {
      problems.push(usage ? `a file did not fit in spool.max_size (${usage.bytes} of ${usage.quota} bytes used)` : 'the spool file system was full');
    }
    const fwd = this.p.forwarder;
    const up = fwd.upstream;
    const nodes = routing.fileList;
    return {
      configuration,
      spool: {
        status: problems.length ? 'error' : 'success',
        ...(problems.length ? { details: `uploads refused with 507: ${problems.join('; ')}` } : {}),
        incoming,
        pending: fwd.pending(),
        ...(usage ? { bytes: usage.bytes, quota: usage.quota } : {}),
        ...(free !== undefined ? { free_bytes: free } : {}),
        recycled: spool.recycling,
      },
      upstream: {
        status: up.state === 'down' ? 'error' : 'success',
        ...(up.lastError ? { details: up.lastError } : {}),
        url: config.upstream.url,
        state: up.state,
        ...(up.lastContact ? { last_contact: new Date(up.lastContact).toISOString() } : {}),
      },
      nodes_list: {
        status: 'success', configured: routing.current().configured, nodes: routing.current().size, ...(nodes.source ? { file: nodes.source } : {}),
        // Only once there is a synced list: an upstream that serves none changes nothing here.
        ...(routing.sync?.current ? { synced: routing.sync.status() } : {}),
      },
      remote_run: { connections: this.p.hub.size },
    };
  }

  /** One line for sd_notify STATUS=. */
  async line(): Promise<string> {
    const d = await this.p.spool.depth();
    return `spool ${d.reports} reports, ${d.inventories} inventories; upstream ${this.p.forwarder.upstream.state}; ${this.p.hub.size} agents connected`;
  }

  /** Whether the configuration file, and every file it names, would load now. */
  private async configuration(): Promise<RelayStatus['configuration']> {
    try {
      if (this.p.reloadConfig) {
        const fresh = this.p.reloadConfig();
        await NodesList.load(this.p.config.general.node_id, fresh.general.nodes_list_file);
        await loadListenerTls(fresh);
        await loadUpstreamTls(fresh);
      }
    } catch (err) {
      return { status: 'error', details: isCapstanError(err) ? err.message : String(err) };
    }
    return { status: 'success' };
  }
}

async function freeBytes(dir: string): Promise<number | undefined> {
  try {
    const s = await statfs(dir);
    return Number(s.bavail) * Number(s.bsize);
  } catch {
    return undefined;
  }
}
