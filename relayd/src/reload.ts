/**
 * A reload (SIGHUP, `POST system/reload`): the nodes list file, the listener's and the upstream's
 * certificates, the admin token and the log level are read again and swapped in without a
 * restart or a dropped connection. Everything is read first, then swapped: a reload that fails
 * (a file missing, a bad certificate) changes nothing and says why.
 */
import type { Server as HttpsServer } from 'node:https';
import type { Logger } from '@capstan/shared/log';
import type { RelaydConfig } from './config.js';
import { NodesList } from './data/nodes.js';
import type { Routing } from './data/routing.js';
import type { Upstream } from './forward/upstream.js';
import { loadAdminToken, loadListenerTls, loadUpstreamTls } from './tls.js';

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
const RESTART_KEYS = ['general.listen', 'spool.directory', 'upstream.url'] as const;

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
