/**
 * Node changes noted without waiting (the ingest's inventories, acceptances, registry fields),
 * gathered into batches: the first change of a batch waits `windowMs` for others, and those
 * arriving while a batch is generated make the next one. A burst of inventories (an enrolment
 * wave) so costs a few generations, not one generation and one commit each.
 */
export class TouchBatcher {
  private touched = new Set<string>();
  private draining: Promise<void> | null = null;
  /** Ends the open window early (settled(): tests and shutdown do not wait it out). */
  private endWindow: (() => void) | null = null;

  /** `run` generates one batch; `windowMs` 0: the batch starts in the next turn of the event loop. */
  constructor(private readonly run: (batch: Set<string>) => Promise<void>, private readonly windowMs: number) {}

  touch(nodeId: string): void {
    this.touched.add(nodeId);
    this.start();
  }

  private start(): void {
    this.draining ??= (async () => {
      await this.window();
      while (this.touched.size > 0) {
        const batch = this.touched;
        this.touched = new Set();
        await this.run(batch);
      }
    })().finally(() => {
      this.draining = null;
      // A touch between the loop's last look and this callback found a drain still set: start
      // another, or that node would wait for the next touch.
      if (this.touched.size > 0) this.start();
    });
  }

  /** Resolves when every touched node's batch has run, without waiting out the window. */
  async settled(): Promise<void> {
    this.endWindow?.();
    while (this.draining) await this.draining;
  }

  private async window(): Promise<void> {
    await new Promise<void>((resolve) => {
      if (this.windowMs <= 0) {
        setImmediate(resolve);
        return;
      }
      const timer = setTimeout(resolve, this.windowMs);
      this.endWindow = () => {
        clearTimeout(timer);
        resolve();
      };
    });
    this.endWindow = null;
  }
}
