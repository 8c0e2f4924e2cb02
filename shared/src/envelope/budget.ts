/**
 * One byte budget for all decompression in flight in a process, its worker threads included.
 * Each file is refused alone past `max_decompressed_size`, but without a common bound a flood of
 * small bombs (a few kB each, inflating to that limit) costs that size times the files in flight:
 * the server went from ~100 MB to several GB. Here a decompression reserves its bytes first and
 * holds them until its caller is done with the output (verified, parsed); when the budget is
 * spent it waits, for a bounded time, then gives up with a transient ERR_BUSY (the file is
 * retried later from the spool: nothing is lost, and memory stays bounded whatever arrives).
 *
 * It does not reserve `max_decompressed_size` up front, which would let four run logs in at once
 * where hundreds fit: it starts from a guess (a few times the compressed size) and, when the
 * output is larger, grows the reservation fourfold and expands again (at most ~1.33× the work).
 * A decompression that cannot grow at once lets go of what it holds before it waits, so that no
 * two wait on each other.
 * The counter lives in a SharedArrayBuffer (KiB, Atomics), so that worker threads share it.
 */
import { capstanError } from '../errors.js';
import { decompress, type EnvelopeCompression } from './codec.js';

/** What a worker thread needs to share a budget made elsewhere (pass it in workerData). */
export interface BudgetShare {
  sab: SharedArrayBuffer;
  limitBytes: number;
}

/** Atomics.waitAsync (Node 16+; typed from ES2024 on, beyond this project's `lib`). */
const waitAsync = (Atomics as unknown as {
  waitAsync(a: Int32Array, i: number, v: number, ms: number): { async: false; value: string } | { async: true; value: Promise<string> };
}).waitAsync;

const KIB = 1024;
const kib = (bytes: number) => Math.ceil(bytes / KIB);

/** The smallest first reservation, whatever the compressed size. */
const FIRST_MIN = 256 * KIB;

export class DecompressBudget {
  /** [0]: KiB reserved; [1]: bumped on every release, for waiters. */
  private readonly cells: Int32Array;
  private readonly limitKiB: number;
  readonly limitBytes: number;

  constructor(limitBytes: number, share?: BudgetShare) {
    if (!Number.isSafeInteger(limitBytes) || limitBytes < KIB) throw new RangeError('the decompression budget must be at least 1 KiB');
    if (kib(limitBytes) > 0x7fffffff) throw new RangeError('the decompression budget must be below 2 TiB');
    this.limitBytes = limitBytes;
    this.limitKiB = kib(limitBytes);
    this.cells = new Int32Array(share?.sab ?? new SharedArrayBuffer(8));
  }

  get share(): BudgetShare {
    return { sab: this.cells.buffer as SharedArrayBuffer, limitBytes: this.limitBytes };
  }

  /** Bytes reserved now, by every thread sharing the budget. */
  get inUse(): number {
    return Atomics.load(this.cells, 0) * KIB;
  }

  /** Reserve `bytes` if they fit now. */
  tryReserve(bytes: number): boolean {
    const want = kib(bytes);
    for (;;) {
      const cur = Atomics.load(this.cells, 0);
      if (cur + want > this.limitKiB) return false;
      if (Atomics.compareExchange(this.cells, 0, cur, cur + want) === cur) return true;
    }
  }

  release(bytes: number): void {
    Atomics.sub(this.cells, 0, kib(bytes));
    Atomics.add(this.cells, 1, 1);
    Atomics.notify(this.cells, 1);
  }

  /** Reserve `bytes`, waiting up to `waitMs` for other decompressions to release theirs; ERR_BUSY past it. */
  async reserve(bytes: number, waitMs: number): Promise<void> {
    if (kib(bytes) > this.limitKiB) throw capstanError('ERR_BUSY', `a decompression of ${bytes} bytes exceeds the whole decompression budget (${this.limitBytes})`);
    const until = Date.now() + waitMs;
    for (;;) {
      const gen = Atomics.load(this.cells, 1);
      if (this.tryReserve(bytes)) return;
      const left = until - Date.now();
      if (left <= 0) {
        throw capstanError('ERR_BUSY', `the decompression budget (${this.limitBytes} bytes) stayed spent for ${waitMs} ms: retried later`);
      }
      // Woken by a release (any thread), or every 50 ms at worst.
      const w = waitAsync(this.cells, 1, gen, Math.min(left, 50));
      if (w.async) await w.value;
    }
  }
}

/**
 * Decompress within the budget (none: plain decompress). The output's reservation is held until
 * `release()` is called: call it once the output (and what is made from it) is no longer needed.
 */
export async function decompressBudgeted(
  data: Buffer, c: EnvelopeCompression, maxBytes: number, budget: DecompressBudget | undefined, waitMs: number,
): Promise<{ out: Buffer; release: () => void }> {
  if (!budget) return { out: await decompress(data, c, { maxBytes }), release: () => {} };
  // A decompressor holds its output twice at its peak (the pieces, then the whole), so an attempt
  // at `step` output bytes reserves twice that.
  let step = Math.min(maxBytes, Math.floor(budget.limitBytes / 2), Math.max(FIRST_MIN, data.length * 4));
  let held = 2 * step;
  await budget.reserve(held, waitMs);
  let released = false;
  const release = () => {
    if (!released) budget.release(held);
    released = true;
  };
  try {
    for (;;) {
      try {
        const out = await decompress(data, c, { maxBytes: step });
        // Twice the output stays reserved until release(): what verifying and parsing it copy
        // (the S/MIME content, the text) comes close to one more output's worth.
        const keep = Math.min(held, 2 * out.length + KIB);
        budget.release(held - keep);
        held = keep;
        return { out, release };
      } catch (err) {
        const code = (err as { code?: string }).code;
        if (code !== 'ERR_DECOMPRESSED_TOO_LARGE' || step >= maxBytes) throw err;
      }
      step = Math.min(maxBytes, step * 4);
      // Grown in place when the room is there; else let go first and wait for the whole of it:
      // a decompression that waits holds nothing, so waiters never hold each other up.
      if (!budget.tryReserve(2 * step - held)) {
        budget.release(held);
        held = 0;
        await budget.reserve(2 * step, waitMs);
      }
      held = 2 * step;
    }
  } catch (err) {
    release();
    // The limit that counts is the configured one, not the step that met it.
    if ((err as { code?: string }).code === 'ERR_DECOMPRESSED_TOO_LARGE') throw capstanError('ERR_DECOMPRESSED_TOO_LARGE', `decompressed data exceeds ${maxBytes} bytes`, { details: { maxBytes } });
    throw err;
  }
}
