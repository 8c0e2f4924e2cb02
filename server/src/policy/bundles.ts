/**
 * Serving a node its signed bundle (GET /policies/<node-id>/rules): only accepted nodes get one,
 * a node accepted outside this process has its bundle generated on first request, and the
 * signature is made once per content and key, not on every fetch. The ETag carries the config id
 * and the signing key, so after a key rotation no cache answers 304 with a copy signed by the old
 * key.
 */
import { capstanError } from '@capstan/shared/errors';
import { signBundle, type PolicyBundle } from '@capstan/shared/policy/bundle';
import type { Store } from '../store/store.js';
import type { PolicyGenerator } from './generate.js';
import type { PolicyKeyring } from './key.js';

/** Signed bundles kept in memory, in bytes of their JSON text (a fleet's worth at ~10 kB each). */
export const DEFAULT_SIGNED_CACHE_BYTES = 64 * 1024 * 1024;

export interface SignedBundleAnswer {
  etag: string;
  /** The signed bundle's JSON text (signed once per node, content and key). */
  text: () => string;
}

/** A bundle's generation: the time its content was generated for the node, in ms since the epoch. */
export const bundleGeneration = (generatedAt: string): number => Math.max(0, Date.parse(generatedAt) || 0);

export class BundleServer {
  /** node id → its last signed bundle, in least-recently-used order (Map keeps insertion order). */
  private readonly cache = new Map<string, { key: string; text: string }>();
  private bytes = 0;

  constructor(private readonly deps: { store: Store; generator: PolicyGenerator; key: PolicyKeyring; maxCacheBytes?: number }) {}

  /** The node's bundle, or ERR_NOT_FOUND: unknown, pending and refused nodes cannot tell which they are. */
  async forNode(nodeId: string): Promise<SignedBundleAnswer> {
    const { store, generator } = this.deps;
    const node = await store.getNode(nodeId);
    if (!node || node.accepted !== 'accepted') throw capstanError('ERR_NOT_FOUND', `no policy for node ${nodeId}`);
    let rec = await store.getPolicyBundle(nodeId);
    // Accepted outside this process (CLI, another server): generate it now rather than 404.
    if (!rec) {
      await generator.nodeChanged(nodeId);
      rec = await store.getPolicyBundle(nodeId);
    }
    if (!rec) throw capstanError('ERR_NOT_FOUND', `no policy for node ${nodeId}`);
    const k = this.deps.key.current();
    const etag = `"${rec.config_id}.${k.keyId.slice(0, 8)}"`;
    const cacheKey = `${rec.config_id}\u0000${rec.generated_at}\u0000${k.keyId}`;
    const bundleText = rec.bundle;
    return {
      etag,
      text: () => {
        const hit = this.cache.get(nodeId);
        if (hit && hit.key === cacheKey) {
          this.cache.delete(nodeId);
          this.cache.set(nodeId, hit);
          return hit.text;
        }
        // The generation (docs/policy.md, Rollback): the node's generation time in ms, which only
        // grows for a node (its content changes, or it is generated for the first time).
        const bundle: PolicyBundle = { ...(JSON.parse(bundleText) as PolicyBundle), generation: bundleGeneration(rec.generated_at) };
        const text = JSON.stringify(signBundle(bundle, k.privateKeyPem, { includePublicKey: true, endorsements: k.endorsements }));
        this.remember(nodeId, cacheKey, text);
        return text;
      },
    };
  }

  private remember(nodeId: string, key: string, text: string): void {
    const max = this.deps.maxCacheBytes ?? DEFAULT_SIGNED_CACHE_BYTES;
    const old = this.cache.get(nodeId);
    if (old) {
      this.bytes -= old.text.length;
      this.cache.delete(nodeId);
    }
    if (text.length > max) return;
    this.cache.set(nodeId, { key, text });
    this.bytes += text.length;
    for (const [id, v] of this.cache) {
      if (this.bytes <= max) break;
      this.cache.delete(id);
      this.bytes -= v.text.length;
    }
  }
}
