/**
 * What the HTTP routes need from the running relay. daemon.ts builds it from live parts; tests
 * may build one from plain objects. Getters (nodes, adminToken) return the current value, so a
 * reload swaps them without rebuilding the app or dropping a connection.
 */
import type { Logger } from '@capstan/shared/log';
import type { SpoolKind } from '@capstan/shared/protocol';
import type { Spool } from '@capstan/toolkit/spool/spool';
import type { RelaydConfig } from '../config.js';
import type { NodesList } from '../data/nodes.js';
import type { Upstream } from '../forward/upstream.js';
import type { Metrics } from '../metrics.js';
import type { RemoteRun } from '../remote-run/dispatch.js';
import type { RelayIdentity } from '../identity/routes.js';

export interface ComponentStatus {
  status: 'success' | 'error';
  details?: string;
}

export interface RelayStatus {
  configuration: ComponentStatus;
  spool: ComponentStatus & {
    incoming: Record<SpoolKind, number>;
    pending: Record<SpoolKind, number>;
    bytes?: number;
    quota?: number;
    free_bytes?: number;
    /** Delivered files kept in free/ to be overwritten by the next uploads, and uploads that reused one since start. */
    recycled: { files: number; bytes: number; reused: number };
  };
  upstream: ComponentStatus & { url: string; state: 'unknown' | 'up' | 'down'; last_contact?: string };
  nodes_list: ComponentStatus & {
    configured: boolean; nodes: number; file?: string;
    /** The list synced from the upstream (nodes_sync). */
    synced?: { synced: boolean; nodes?: number; confirmed_at?: string; error?: string };
  };
  remote_run: { connections: number };
}

export interface RelayContext {
  config: RelaydConfig;
  log: Logger;
  spool: Spool;
  metrics: Metrics;
  upstream: Upstream;
  nodes(): NodesList;
  /**
   * Whether a node is routed here, asking the upstream for a fresher synced list on a miss (rate
   * limited by nodes_sync.miss_refresh): an agent accepted a moment ago must not wait for the next
   * periodic sync to hold its remote-run connection. Absent: the current list only.
   */
  knowsNode?(id: string): Promise<boolean>;
  /** Admin bearer token, or null when none is configured. */
  adminToken(): string | null;
  /** A file was just spooled by the API. */
  spooled(kind: SpoolKind, name: string): void;
  /** A body is durable and about to appear in incoming/: the forwarder may keep it in memory. */
  written(kind: SpoolKind, name: string, data: Buffer): void;
  /** An upload was refused because the spool is full (507): system/status reports it a while. */
  spoolFull(): void;
  status(): Promise<RelayStatus>;
  /** Reload nodes list, certificates, admin token and log level; throws with the reason. */
  reload(): Promise<void>;
  remoteRun: RemoteRun;
  /** Node identity: renewal passthrough, JWKS, token checks (absent: none of them). */
  identity?: RelayIdentity;
  /** Treat loopback clients as admins (true in production; tests turn it off to check tokens). */
  loopbackIsAdmin?: boolean;
  /**
   * The relay's own Authorization header for the upstream, when it has an identity (a remote-run
   * link or providers need one): shared-folder downloads present it rather than the token of the
   * agent that happened to ask. Absent or empty: the agent's is passed on.
   */
  ownAuthorization?: () => Promise<Record<string, string>>;
}
