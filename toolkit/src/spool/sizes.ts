/**
 * The size of each file this spool put in incoming/ ("kind/name"), for the pool of free files and
 * the quota at removal. Only sizes known for sure: none while an upload of that name is in
 * progress, nor after two overlapped (which of them is in place then depends on the order of their
 * renames). A reused file's size decides whether it is cut after the overwrite, so a wrong one
 * would leave old bytes at its end; unknown sizes are read from the file once it is in free/.
 */

/** Sizes remembered at most (beyond this, removal stats the file). */
const MAX_SIZES_KNOWN = 65_536;

export class KnownSizes {
  private readonly sizes = new Map<string, number>();
  /** Uploads in progress per "kind/name", and whether two of them overlapped. */
  private readonly writing = new Map<string, { n: number; overlapped: boolean }>();

  /** An upload of `key` starts: what was known of that name no longer holds. */
  begin(key: string): void {
    this.sizes.delete(key);
    const w = this.writing.get(key);
    if (w) {
      w.n++;
      w.overlapped = true;
    } else {
      this.writing.set(key, { n: 1, overlapped: false });
    }
  }

  /** The upload of `key` put `bytes` in incoming/ (call before end()). */
  written(key: string, bytes: number): void {
    const mine = this.writing.get(key)!;
    if (!mine.overlapped && (this.sizes.size < MAX_SIZES_KNOWN)) this.sizes.set(key, bytes);
  }

  /** The upload of `key` is over, written or not. */
  end(key: string): void {
    const mine = this.writing.get(key)!;
    if (--mine.n === 0) this.writing.delete(key);
  }

  /**
   * `key` leaves incoming/: its size if known for sure (while an upload of the same name is in
   * progress, the file renamed away may be either copy), forgotten either way.
   */
  take(key: string): number | undefined {
    const size = this.writing.has(key) ? undefined : this.sizes.get(key);
    this.sizes.delete(key);
    return size;
  }

  forget(key: string): void {
    this.sizes.delete(key);
  }
}
