/**
 * The outbox: every signed, compressed file is written here first and deleted only after the
 * relay's 2xx. Files the relay could not take (down, 5xx) stay and are back-filled on later runs,
 * oldest first; the queue is capped by count and age, with a warning for whatever it drops.
 */
import { readdir, rename, stat, unlink } from 'node:fs/promises';
import { join } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { isTransient } from '@capstan/shared/errors';
import { type Logger } from '@capstan/shared/log';
import { type SpoolKind } from '@capstan/shared/protocol';
import { writeAtomic } from '../identity/state.js';
import type { RelayClient } from './upload.js';

export interface OutboxEntry {
  kind: SpoolKind;
  name: string;
  path: string;
  mtimeMs: number;
}

export interface FlushResult {
  sent: number;
  rejected: number;
  remaining: number;
  error?: unknown;
}

/** Inventories before reports, so a new node is known before its first run log arrives. */
const ORDER: SpoolKind[] = ['inventories', 'reports'];

export class Outbox {
  constructor(
    private readonly dir: string,
    private readonly log: Logger,
  ) {}

  async init(): Promise<void> {
    for (const kind of ORDER) await makeDir(join(this.dir, kind), 0o700);
    await makeDir(join(this.dir, 'rejected'), 0o700);
  }

  async add(kind: SpoolKind, name: string, data: Buffer): Promise<void> {
    await writeAtomic(join(this.dir, kind, name), data, 0o600);
  }

  async list(): Promise<OutboxEntry[]> {
    const out: OutboxEntry[] = [];
    for (const kind of ORDER) {
      const dir = join(this.dir, kind);
      for (const name of await readdir(dir)) {
        if (name.endsWith('.tmp')) continue;
        const s = await stat(join(dir, name)).catch(() => null);
        if (s) out.push({ kind, name, path: join(dir, name), mtimeMs: s.mtimeMs });
      }
    }
    return out.sort((a, b) => ORDER.indexOf(a.kind) - ORDER.indexOf(b.kind) || a.mtimeMs - b.mtimeMs || a.name.localeCompare(b.name));
  }

  /** Drop what is over the caps: the oldest files beyond maxFiles, and anything older than maxAgeMs. */
  async enforceCaps(maxFiles: number, maxAgeMs: number, now = Date.now()): Promise<number> {
    const entries = (await this.list()).sort((a, b) => a.mtimeMs - b.mtimeMs);
    let dropped = 0;
    for (const [i, e] of entries.entries()) {
      const tooMany = entries.length - i > maxFiles;
      if (tooMany || now - e.mtimeMs > maxAgeMs) {
        await unlink(e.path).catch(() => {});
        dropped++;
        this.log.warn({ file: e.name, kind: e.kind, reason: tooMany ? 'queue full' : 'too old' }, 'outbox file dropped');
      }
    }
    return dropped;
  }

  /**
   * Send everything, oldest first. A transient failure stops the flush (the relay is down: the
   * rest would fail too, and order is kept); a permanent refusal moves that file to rejected/.
   */
  async flush(client: RelayClient): Promise<FlushResult> {
    const entries = await this.list();
    let sent = 0;
    let rejected = 0;
    for (const [i, e] of entries.entries()) {
      try {
        await client.upload(e.kind, e.name, e.path);
        await unlink(e.path);
        sent++;
      } catch (err) {
        if (isTransient(err)) return { sent, rejected, remaining: entries.length - i, error: err };
        this.log.error({ err, file: e.name }, 'relay refused file, kept in outbox/rejected');
        await rename(e.path, join(this.dir, 'rejected', e.name)).catch(() => {});
        rejected++;
      }
    }
    return { sent, rejected, remaining: 0 };
  }
}
