/**
 * A generation's batch writes, at most `width` of them in flight (`[policy] write_batches`). On
 * PostgreSQL each batch is a transaction on a connection of its own, and the database works on
 * two batches at once where the event loop would wait for one; the batches' nodes are disjoint
 * and each locks its own in id order, so they cannot wait on each other in a cycle. Width 1
 * writes one batch after the other, as SQLite's one writer does anyway.
 *
 * A failed write is thrown to the next `add` or to `drain`, once no other write is in flight:
 * a generation that stops leaves nothing of its own running behind it.
 */
export class WriteQueue {
  private readonly running = new Set<Promise<void>>();
  private failure: { err: unknown } | null = null;

  constructor(private readonly width: number) {
    if (!Number.isInteger(width) || width < 1) throw new RangeError(`write queue width must be a positive integer, not ${width}`);
  }

  /** Start `write` once fewer than `width` writes are in flight. */
  async add(write: () => Promise<void>): Promise<void> {
    while (this.running.size >= this.width && !this.failure) await Promise.race(this.running);
    if (this.failure) await this.drain();
    const p: Promise<void> = write().then(
      () => { this.running.delete(p); },
      (err: unknown) => {
        this.running.delete(p);
        this.failure ??= { err };
      },
    );
    this.running.add(p);
  }

  /** Wait for every write in flight; throws the first failure, if any. */
  async drain(): Promise<void> {
    while (this.running.size > 0) await Promise.race(this.running);
    const f = this.failure;
    this.failure = null;
    if (f) throw f.err;
  }
}
