/**
 * Run logs go up in batches (`POST /batch/reports`, shared/src/batch.ts): each forward of the
 * spool processor hands its file here and waits for that file's own result, so the processor's
 * fate mapping, retries and upstream gate work as they do for a PUT. A batch leaves when it is
 * full (files or bytes), when nothing else is on its way up (an idle relay adds no delay), or
 * `waitMs` after its first file. At most `slots` batches are in flight, one per connection.
 *
 * An upstream that does not take a batch (404 or 405 from an older relay or server, 501 from a
 * plain HTTP or WebDAV server, another 4xx
 * from one with smaller limits, an answer that is no batch answer) gets the files of that batch
 * one PUT each, and PUTs only for the next ten minutes; then batches are tried again (it may have
 * been upgraded or reconfigured).
 */
import { readFile } from 'node:fs/promises';
import { BATCH_MAX_NAME, encodeBatch } from '@capstan/shared/batch';
import { type Logger } from '@capstan/shared/log';
import { BatchesUnsupported, fateOf, type Upstream } from './upstream.js';

export interface BatchSenderOptions {
  upstream: Upstream;
  /** Most files in one batch ([upstream] batch_files). */
  maxFiles: number;
  /** Most bytes of files in one batch ([upstream] batch_size). */
  maxBytes: number;
  /** Longest a batch that is not full waits for more files ([upstream] batch_wait). */
  waitMs: number;
  /** Batches in flight at once (the upstream connections). */
  slots: number;
  log: Logger;
}

interface Item {
  name: string;
  path: string;
  /** The body when in memory (just received); read from `path` when the batch leaves otherwise. */
  data: Buffer | null;
  size: number;
  signal: AbortSignal | undefined;
  resolve: () => void;
  reject: (err: unknown) => void;
}

/** After a 404, 405 or 501, PUTs only for this long. */
const UNSUPPORTED_MS = 10 * 60_000;

export class BatchSender {
  private queue: Item[] = [];
  private queuedBytes = 0;
  /** Bytes of bodies held in the queue; past two batches' worth, later ones are read when they leave. */
  private heldBytes = 0;
  private inFlight = 0;
  private timer: NodeJS.Timeout | null = null;
  private unsupportedUntil = 0;

  constructor(private readonly o: BatchSenderOptions) {}

  /** Whether a file of `size` bytes named `name` goes in a batch now (else the caller PUTs it). */
  takes(name: string, size: number): boolean {
    return this.o.maxFiles > 1 && size <= this.o.maxBytes && Date.now() >= this.unsupportedUntil
      && Buffer.byteLength(name) <= BATCH_MAX_NAME;
  }

  /** Files the processor may hand over at once to keep every slot's batch full. */
  get capacity(): number {
    return this.o.slots * this.o.maxFiles;
  }

  /** Send one spooled run log up within a batch; settles with that file's own result. */
  send(name: string, path: string, size: number, data: Buffer | undefined, signal?: AbortSignal): Promise<void> {
    return new Promise<void>((resolve, reject) => {
      const hold = data !== undefined && this.heldBytes + size <= 2 * this.o.maxBytes;
      if (hold) this.heldBytes += size;
      this.queue.push({ name, path, data: hold ? data! : null, size, signal, resolve, reject });
      this.queuedBytes += size;
      this.schedule();
    });
  }

  private schedule(): void {
    while (this.queue.length > 0 && this.inFlight < this.o.slots) {
      const full = this.queue.length >= this.o.maxFiles || this.queuedBytes >= this.o.maxBytes;
      if (!full && this.inFlight > 0 && this.o.waitMs > 0) {
        this.timer ??= setTimeout(() => {
          this.timer = null;
          this.flush();
          this.schedule();
        }, this.o.waitMs);
        return;
      }
      this.flush();
    }
  }

  /** Send what the queue holds, up to a full batch, in a free slot. */
  private flush(): void {
    if (this.timer) {
      clearTimeout(this.timer);
      this.timer = null;
    }
    if (this.queue.length === 0 || this.inFlight >= this.o.slots) return;
    const items: Item[] = [];
    let bytes = 0;
    while (this.queue.length > 0 && items.length < this.o.maxFiles && (items.length === 0 || bytes + this.queue[0]!.size <= this.o.maxBytes)) {
      const it = this.queue.shift()!;
      bytes += it.size;
      items.push(it);
    }
    this.queuedBytes -= bytes;
    this.inFlight++;
    void this.sendItems(items).finally(() => {
      this.inFlight--;
      this.schedule();
    });
  }

  private async sendItems(items: Item[]): Promise<void> {
    for (const it of items) if (it.data) this.heldBytes -= it.size;
    // Bodies not held in memory are read now; a file gone meanwhile fails alone (ENOENT: the
    // processor takes it as handled elsewhere).
    const ready: Array<Item & { body: Buffer }> = [];
    await Promise.all(items.map(async (it) => {
      try {
        ready.push({ ...it, body: it.data ?? await readFile(it.path) });
      } catch (err) {
        it.reject(err);
      }
    }));
    if (ready.length === 0) return;
    const names = ready.map((r) => r.name);
    try {
      const results = await this.o.upstream.sendBatch('reports', encodeBatch(ready.map((r) => ({ name: r.name, body: r.body }))), names, ready[0]!.signal);
      results.forEach((r, i) => {
        const it = ready[i]!;
        if (r.status >= 200 && r.status < 300) it.resolve();
        else it.reject(fateOf(r.status, r.error ? ` ${r.error.code}: ${r.error.message}` : ''));
      });
    } catch (err) {
      if (!(err instanceof BatchesUnsupported)) {
        for (const it of ready) it.reject(err);
        return;
      }
      this.unsupportedUntil = Date.now() + UNSUPPORTED_MS;
      this.o.log.warn({ upstream: this.o.upstream.url, status: err.status, reason: err.why }, 'upstream takes no batches: one PUT per file for ten minutes');
      for (const it of ready) {
        await this.o.upstream.forward('reports', it.name, it.path, it.signal, it.body).then(it.resolve, it.reject);
      }
    }
  }

  /** Fail what waits (shutdown): the files stay spooled for the next start. */
  close(): void {
    if (this.timer) clearTimeout(this.timer);
    this.timer = null;
    const left = this.queue.splice(0);
    this.queuedBytes = 0;
    this.heldBytes = 0;
    for (const it of left) it.reject(Object.assign(new Error('relay stopping'), { name: 'AbortError' }));
  }
}
