/**
 * What RUDDER's `system/*` endpoints do at a relay. `GET system/status`: the relay's health
 * (configuration, spool, upstream, nodes list, remote-run), read when asked from the live parts,
 * and the one line systemd shows. `POST system/reload` (and SIGHUP): the nodes list file, the
 * listener's and the upstream's certificates, the admin token and the log level read again and
 * swapped in without a restart or a dropped connection. A reload reads everything first, then
 * swaps: one that fails (a file missing, a bad certificate) changes nothing and says why; the
 * status's configuration check reads the same files to say whether a reload would work.
 */
import { statfs } from 'node:fs/promises';
import type { Server as HttpsServer } from 'node:https';
import { isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { Spool } from '@capstan/toolkit/spool/spool';
import type { RelayStatus } from './api/context.js';
import type { RelaydConfig } from './config.js';
import { NodesList } from './data/nodes.js';
import type { Routing } from './data/routing.js';
import type { Forwarder } from './forward/forwarder.js';
import type { Upstream } from './forward/upstream.js';
import type { Hub } from './remote-run/listeners.js';
import { loadAdminToken, loadListenerTls, loadUpstreamTls } from './tls.js';

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
        url: up.url,
        ...(up.urls.length > 1 ? { urls: up.urls } : {}),
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

export interface ReloadParts {
  /** The configuration the relay started with. */
  config: RelaydConfig;
  /** Re-read the configuration file (absent: the one started with). */
  reloadConfig?: () => RelaydConfig;
  setLogLevel?: (level: string) => void;
  routing: Routing;
  upstream: Upstream;
  /** The listener speaks TLS: its certificate is read again and set on `server`. */
  listenerTls: boolean;
  server: () => HttpsServer | null;
  log: Logger;
}

/** Keys a running relay cannot change: a new value waits for the next restart. */
const RESTART_KEYS = ['general.listen', 'spool.directory', 'upstream.url', 'upstream.fallback_urls'] as const;

export class Reloader {
  private token: string | null;

  constructor(private readonly p: ReloadParts, adminToken: string | null) {
    this.token = adminToken;
  }

  /** The admin bearer token as last read, or null when none is configured. */
  readonly adminToken = (): string | null => this.token;

  readonly reload = async (): Promise<void> => {
    const { config, routing, log } = this.p;
    const fresh = this.p.reloadConfig ? this.p.reloadConfig() : config;
    const restartNeeded = RESTART_KEYS.filter((k) => {
      const [s, f] = k.split('.') as [keyof RelaydConfig, string];
      return (fresh[s] as Record<string, unknown>)[f] !== (config[s] as Record<string, unknown>)[f];
    });
    if (restartNeeded.length > 0) log.warn({ keys: restartNeeded }, 'these changes take effect at the next restart');
    const newNodes = await NodesList.load(config.general.node_id, fresh.general.nodes_list_file);
    const newToken = await loadAdminToken(fresh);
    const newTls = this.p.listenerTls ? await loadListenerTls(fresh) : null;
    const newUpstreamTls = await loadUpstreamTls(fresh);
    routing.swapFile(newNodes);
    this.token = newToken;
    const server = this.p.server();
    if (newTls && server) server.setSecureContext(newTls);
    this.p.upstream.reconfigure(newUpstreamTls);
    // Ask the upstream for its current list too (a failure keeps the one in hand).
    await routing.sync?.refresh();
    this.p.setLogLevel?.(fresh.log.level);
    log.info({ nodes: routing.fileList.size, log_level: fresh.log.level }, 'configuration reloaded');
  };
}
