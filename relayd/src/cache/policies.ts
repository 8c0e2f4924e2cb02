/**
 * The relay's policy cache: one file per node, `<dir>/<node-id>.json` holding the upstream's
 * signed answer exactly as received, its ETag and when it was last confirmed. The relay cannot
 * forge or alter what it caches (the agent verifies the server's signature), so serving a stale
 * copy while the upstream is unreachable is safe: at worst the node runs a policy that was valid.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';

export interface CachedPolicy {
  etag: string;
  body: string;
  /** When the upstream last gave or confirmed it (ms since epoch). */
  confirmed_at: number;
}

/** Node ids are UUIDs (or RUDDER's `root`): anything else never becomes a file name. */
export const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,255}$/;

export class PolicyCache {
  private ready: Promise<unknown> | null = null;

  constructor(private readonly dir: string) {}

  private file(nodeId: string): string {
    if (!NODE_ID.test(nodeId)) throw new Error(`not a node id: ${nodeId}`);
    return join(this.dir, `${nodeId}.json`);
  }

  async get(nodeId: string): Promise<CachedPolicy | null> {
    try {
      const c = JSON.parse(await readFile(this.file(nodeId), 'utf8')) as CachedPolicy;
      return typeof c.etag === 'string' && typeof c.body === 'string' && typeof c.confirmed_at === 'number' ? c : null;
    } catch {
      // Missing or torn (a crash between write and rename leaves only the temporary): refetch.
      return null;
    }
  }

  /** Write atomically (temporary file, then rename), so a reader never sees half a bundle. */
  async put(nodeId: string, c: CachedPolicy): Promise<void> {
    this.ready ??= mkdir(this.dir, { recursive: true, mode: 0o750 });
    await this.ready;
    const tmp = join(this.dir, `.${nodeId}.${randomUUID()}.tmp`);
    await writeFile(tmp, JSON.stringify(c), { mode: 0o640 });
    await rename(tmp, this.file(nodeId)).catch(async (err: unknown) => {
      await rm(tmp, { force: true });
      throw err;
    });
  }

  async delete(nodeId: string): Promise<void> {
    await rm(this.file(nodeId), { force: true });
  }
}
