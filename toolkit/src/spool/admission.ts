/**
 * What the spool lets in: the file size limit, the file system's free-space reserve, the quota on
 * bytes waiting in incoming/ and the bound on bodies held in memory. Every refusal is coded
 * (ERR_BODY_TOO_LARGE, ERR_SPOOL_FULL) and comes before a byte is written.
 */
import { statfs } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';
import { SPOOL_KINDS } from '@capstan/shared/protocol';
import { bytesIn, type SpoolDirs } from './layout.js';
import type { Recycler } from './recycle.js';

/**
 * A full file system (ENOSPC) or a reached disk quota (EDQUOT) as the spool's coded refusal, which
 * the client retries later; any other error as it is. Every write path throws through this.
 */
export function asSpoolFull(err: unknown): unknown {
  const code = (err as NodeJS.ErrnoException | null)?.code;
  if (code === 'ENOSPC' || code === 'EDQUOT') return capstanError('ERR_SPOOL_FULL', 'no space left in the spool', { cause: err });
  return err;
}

export interface AdmissionLimits {
  /** The file system checked by statfs. */
  root: string;
  maxFileBytes: number;
  /** 0: no reserve (and no statfs). */
  minFreeBytes: number;
  /** 0: no quota (and no extra stat calls). */
  maxIncomingBytes: number;
  maxKeptBytes: number;
}

export class Admission {
  readonly maxFileBytes: number;
  readonly maxIncomingBytes: number;
  private readonly root: string;
  private readonly minFreeBytes: number;
  private readonly maxKeptBytes: number;
  /** Bytes of bodies being kept by uploads in progress (see maxKeptBytes). */
  private keptInFlight = 0;
  /** Bytes in incoming/ plus bytes being written, tracked only when a quota is set. */
  private incomingBytes = 0;
  /** Free bytes at the last statfs, less what was written since, and when that statfs was. */
  private freeSeen = 0;
  private freeCheckedAt = 0;

  constructor(
    limits: AdmissionLimits,
    /** Files kept for reuse, released first when the reserve is near (null: recycling is off). */
    private readonly recycler: Recycler | null,
  ) {
    this.root = limits.root;
    this.maxFileBytes = limits.maxFileBytes;
    this.minFreeBytes = limits.minFreeBytes;
    this.maxIncomingBytes = limits.maxIncomingBytes;
    this.maxKeptBytes = limits.maxKeptBytes;
  }

  /** Count what incoming/ holds, for the quota (nothing to count without one). */
  async init(dirs: SpoolDirs): Promise<void> {
    if (this.maxIncomingBytes <= 0) return;
    this.incomingBytes = 0;
    for (const kind of SPOOL_KINDS) this.incomingBytes += await bytesIn(dirs.incoming[kind]);
  }

  /** Bytes waiting in incoming/ when a quota is set (null without one). */
  get usage(): { bytes: number; quota: number } | null {
    return this.maxIncomingBytes > 0 ? { bytes: this.incomingBytes, quota: this.maxIncomingBytes } : null;
  }

  /**
   * Let a body of `length` bytes in, or refuse it, and reserve its place in the quota before
   * writing, so concurrent uploads cannot overshoot it together (give it back with unreserve()
   * when nothing reached incoming/).
   *
   * The reserve: statfs is asked at most every 500 ms while far from it (one call per upload was
   * measurable at thousands a second); meanwhile what this spool writes is subtracted (written()),
   * and near the reserve every upload asks again. One async function on purpose: it is awaited
   * once per upload.
   */
  async admit(length: number): Promise<void> {
    if (length > this.maxFileBytes) {
      throw capstanError('ERR_BODY_TOO_LARGE', `body of ${length} bytes exceeds the limit of ${this.maxFileBytes}`);
    }
    if (this.minFreeBytes > 0) {
      if (this.freeStale(length)) await this.statFree();
      if (this.belowReserve(length) && (this.recycler?.pool.count ?? 0) > 0) {
        // The files kept for reuse go first: they are only there to save work.
        await this.recycler!.release();
        await this.statFree();
      }
      if (this.belowReserve(length)) throw this.reserveError();
    }
    if (this.maxIncomingBytes > 0) {
      if (this.incomingBytes + length > this.maxIncomingBytes) {
        throw capstanError('ERR_SPOOL_FULL', `spool quota of ${this.maxIncomingBytes} bytes reached`);
      }
      this.incomingBytes += length;
    }
  }

  /**
   * Refuse (ERR_SPOOL_FULL) `length` bytes that would leave less than the reserve free on the
   * spool's file system, as admit() does, for bytes that go elsewhere on that file system: a
   * batch's run log stored straight into a database kept in the same data directory.
   */
  async keepReserve(length: number): Promise<void> {
    if (this.minFreeBytes <= 0) return;
    if (this.freeStale(length)) await this.statFree();
    if (this.belowReserve(length)) throw this.reserveError();
    this.freeSeen -= length;
  }

  private freeStale(length: number): boolean {
    return Date.now() - this.freeCheckedAt > 500 || this.freeSeen - length < this.minFreeBytes * 2;
  }

  private belowReserve(length: number): boolean {
    return this.freeSeen - length < this.minFreeBytes;
  }

  private async statFree(): Promise<void> {
    const at = Date.now();
    const s = await statfs(this.root);
    this.freeSeen = Number(s.bavail) * Number(s.bsize);
    this.freeCheckedAt = at;
  }

  private reserveError(): Error {
    return capstanError('ERR_SPOOL_FULL', `spool file system has ${this.freeSeen} bytes free, keeping ${this.minFreeBytes} in reserve`);
  }

  /** An admitted upload left nothing in incoming/: its quota reservation goes back. */
  unreserve(length: number): void {
    if (this.maxIncomingBytes > 0) this.incomingBytes -= length;
  }

  /** Bytes that left incoming/ (removed, failed, or replaced by a file of the same name). */
  left(bytes: number): void {
    if (this.maxIncomingBytes > 0) this.incomingBytes -= bytes;
  }

  /** Bytes written since the last statfs. */
  written(bytes: number): void {
    this.freeSeen -= bytes;
  }

  /**
   * Hold a body of `length` bytes in memory if the bound across uploads allows (true), so that a
   * burst of thousands stays bounded; give it back with unhold().
   */
  hold(length: number): boolean {
    if (this.keptInFlight + length > this.maxKeptBytes) return false;
    this.keptInFlight += length;
    return true;
  }

  unhold(length: number): void {
    this.keptInFlight -= length;
  }
}
