/**
 * Bodies just spooled, kept in memory so that forwarding (relayd) or ingesting (server) them
 * right away needs no re-read from disk (open, fstat, read, close: a third of the relay's
 * per-file work in the bench). The file on disk stays the truth: an entry is used once, and after
 * a restart or eviction the file is read. Bounded in bytes; the oldest entries go first.
 */
export class RecentBodies {
  private readonly map = new Map<string, Buffer>();
  private bytes = 0;

  constructor(private readonly maxBytes: number) {}

  put(key: string, data: Buffer): void {
    if (data.length > this.maxBytes) return;
    this.take(key);
    this.map.set(key, data);
    this.bytes += data.length;
    for (const [k, v] of this.map) {
      if (this.bytes <= this.maxBytes) break;
      this.map.delete(k);
      this.bytes -= v.length;
    }
  }

  /** The body, removed from the cache (a retry reads the file). */
  take(key: string): Buffer | undefined {
    const v = this.map.get(key);
    if (v) {
      this.map.delete(key);
      this.bytes -= v.length;
    }
    return v;
  }

  get size(): number {
    return this.bytes;
  }
}
