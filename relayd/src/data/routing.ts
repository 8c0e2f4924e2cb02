/**
 * Which node list the relay routes by: `nodes_list_file` when one is configured (an admin's
 * explicit choice, re-read on reload), else the list synced from the upstream, else none (every
 * file goes up and the upstream decides). The forwarder, remote-run and the token checks all ask
 * here, so a reload or a sync changes what each of them sees at its next question.
 */
import { join } from 'node:path';
import type { Logger } from '@capstan/shared/log';
import type { RelaydConfig } from '../config.js';
import type { Upstream } from '../forward/upstream.js';
import type { NodesList } from './nodes.js';
import { NODES_LIST_PATH, NodesSync } from './sync.js';

/** The node list synced from the upstream (see sync.ts), or null with nodes_sync.enabled off. */
export function upstreamNodesSync(config: RelaydConfig, upstream: Upstream, log: Logger, onChange: () => void): NodesSync | null {
  if (!config.nodes_sync.enabled) return null;
  return new NodesSync({
    myId: config.general.node_id,
    fetch: async (etag) => {
      const res = await upstream.request({
        method: 'GET', path: NODES_LIST_PATH, headers: etag ? { 'if-none-match': etag } : {}, timeoutMs: Math.min(config.upstream.timeout, 30_000),
      });
      const body = await res.body.text();
      const tag = res.headers.etag;
      return { status: res.statusCode, etag: typeof tag === 'string' ? tag : null, body };
    },
    cacheFile: config.nodes_sync.cache_file || join(config.spool.directory, 'nodes-list.json'),
    intervalMs: config.nodes_sync.interval,
    missRefreshMs: config.nodes_sync.miss_refresh,
    log,
    onChange,
  });
}

export class Routing {
  constructor(
    /** nodes_list_file as last read (not configured: an empty list that accepts every node). */
    private file: NodesList,
    readonly sync: NodesSync | null,
  ) {}

  /** What routing uses now: the file when configured, else the synced list, else none (forward all). */
  readonly current = (): NodesList => (this.file.configured || !this.sync?.current ? this.file : this.sync.current);

  get fileList(): NodesList {
    return this.file;
  }

  /** A reload read the file again. */
  swapFile(list: NodesList): void {
    this.file = list;
  }

  /** Whether the synced list is the one routing uses (no file configured, a list in hand). */
  readonly syncInUse = (): boolean => !this.file.configured && this.sync !== null && this.sync.current !== null;

  /**
   * Whether a node is routed here, asking the upstream once on a miss: a configured file is
   * authoritative, only a synced list can be behind.
   */
  async knows(id: string): Promise<boolean> {
    if (this.current().accepts(id)) return true;
    if (this.file.configured || !this.sync) return false;
    await this.sync.refreshOnMiss()?.catch(() => false);
    return this.current().accepts(id);
  }

  /** Its tokens issued before this (epoch seconds) are revoked by a forced renewal; 0: none. */
  tokensAfter(id: string): number {
    return this.sync?.current?.tokensAfter(id) ?? 0;
  }

  /** Whether the synced list still names `id` as a relay (no synced list: nothing says otherwise). */
  async relayListed(id: string): Promise<boolean> {
    const sync = this.sync;
    if (!sync?.current || sync.current.isRelay(id) !== false) return true;
    // Registered a moment ago? Ask the upstream once before refusing (rate limited).
    await sync.refreshOnMiss()?.catch(() => false);
    return sync.current.isRelay(id) !== false;
  }
}
