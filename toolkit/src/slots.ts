/**
 * Work taken in passes, run in a bounded number of slots: the loop the server's job runners and
 * the relay's bootstrap worker share. A pass asks for as much work as there are free slots (a
 * claim in the database, a call upstream) and starts each piece; a piece that ends frees its slot
 * and kicks a pass for more. Passes never overlap, so two passes never claim the same free slot.
 *
 * What a kick does while a pass runs is the owner's choice: `rerun` passes once more right after
 * (nothing that became pending meanwhile waits for the next poll), `skip` leaves it to the next
 * poll (each pass costs a call upstream, and the poll comes soon enough).
 */

export interface SlotsOptions {
  /** Most pieces of work running at once (Infinity: passes only, nothing to count). */
  slots: number;
  /** One pass: take up to `free` pieces of work and start each with `Slots.run`. */
  pass: (free: number) => Promise<void>;
  /** A pass threw: say so; the next kick or poll tries again. */
  passFailed: (err: unknown) => void;
  /** A kick while a pass runs: one more pass right after it, or none until the next kick. */
  whileBusy: 'rerun' | 'skip';
}

export class Slots {
  private running = 0;
  private passing: Promise<void> | null = null;
  private again = false;
  private halted = false;
  private timer: NodeJS.Timeout | null = null;
  private readonly inFlight = new Set<Promise<void>>();
  private readonly abort = new AbortController();

  constructor(private readonly o: SlotsOptions) {}

  /** Aborted when stopping: what a piece of work waits on (a connection, a download) ends at once. */
  get signal(): AbortSignal {
    return this.abort.signal;
  }

  get stopped(): boolean {
    return this.halted;
  }

  get free(): number {
    return this.o.slots - this.running;
  }

  /** Poll every `intervalMs` (each tick runs `tick`, by default a kick), and pass once now. */
  start(intervalMs: number, tick: () => void = () => this.kick()): void {
    this.timer = setInterval(tick, intervalMs);
    this.timer.unref();
    this.kick();
  }

  /** Pass now, unless one is running (then as `whileBusy` says) or every slot is taken. */
  kick(): void {
    if (this.halted) return;
    if (this.passing) {
      if (this.o.whileBusy === 'rerun') this.again = true;
      return;
    }
    if (this.free <= 0) return;
    this.passing = (async () => {
      do {
        this.again = false;
        try {
          await this.o.pass(this.free);
        } catch (err) {
          this.o.passFailed(err);
        }
      } while (this.again && !this.halted);
    })().finally(() => {
      this.passing = null;
    });
  }

  /** Start one piece of work in a slot; when it ends, however it ends, the slot is free again. */
  run(work: () => Promise<void>, failed: (err: unknown) => void): void {
    this.running++;
    const p = work()
      .catch(failed)
      .finally(() => {
        this.running--;
        this.inFlight.delete(p);
        this.kick();
      });
    this.inFlight.add(p);
  }

  /** Work that takes no slot but that stopping still waits for. */
  track(work: Promise<void>): void {
    const p = work.finally(() => this.inFlight.delete(p));
    this.inFlight.add(p);
  }

  /**
   * No more passes or polls; `signal` aborts what runs. Resolves once the pass in flight and
   * every piece of work have ended.
   */
  async stop(): Promise<void> {
    this.halted = true;
    if (this.timer) clearInterval(this.timer);
    this.abort.abort();
    await this.passing;
    await Promise.allSettled([...this.inFlight]);
  }
}
