/**
 * A spool writer thread (see writer.ts). It takes what has queued up since its last pass, and for
 * each body: create the temp file, write it whole, fdatasync, close, hash, rename into place;
 * then one fsync per directory renamed into, and only then the answers. Synchronous calls are
 * right here: this thread exists to block on the disk so that the event loop does not.
 */
import { createHash } from 'node:crypto';
import {
  closeSync, constants as fsc, fdatasyncSync, fstatSync, fsyncSync, ftruncateSync, openSync, renameSync, rmSync, statSync, writeSync,
} from 'node:fs';
import { dirname } from 'node:path';
import { parentPort } from 'node:worker_threads';
import { placeFileSync } from './place.js';

/**
 * `reusedSize`: `tmp` is a file from spool/free/ of that size, overwritten in place (recycle.ts).
 * `alt`: where to keep the body when `dest` holds different bytes (place.ts); none: a conflict.
 */
export type WriterRequest = { op: 'write'; id: number; tmp: string; dest: string; data: Uint8Array; reusedSize?: number; alt?: string };

export type WriterReply =
  | { id: number; ok: true; sha256?: string; replaced?: number; path?: string }
  | { id: number; ok: false; code: string; message: string };

const port = parentPort!;
const queue: WriterRequest[] = [];
let scheduled = false;
/** Directory descriptors kept open for their fsyncs (one per spool kind, a handful at most). */
const dirFds = new Map<string, number>();

function dirFd(dir: string): number {
  let fd = dirFds.get(dir);
  if (fd === undefined) {
    fd = openSync(dir, fsc.O_RDONLY);
    dirFds.set(dir, fd);
  }
  return fd;
}

function writeBody(req: Extract<WriterRequest, { op: 'write' }>): { sha256: string; replaced: number; path: string } {
  const fd = openTarget(req);
  let ok = false;
  try {
    let off = 0;
    while (off < req.data.length) off += writeSync(fd, req.data, off, req.data.length - off);
    // A reused file longer than the body is cut to it; its size is read here, not trusted.
    if (req.reusedSize !== undefined && fstatSync(fd).size > req.data.length) ftruncateSync(fd, req.data.length);
    fdatasyncSync(fd);
    ok = true;
  } finally {
    closeSync(fd);
    if (!ok) rmSync(req.tmp, { force: true });
  }
  const sha256 = createHash('sha256').update(req.data).digest('hex');
  // Never over a file already there (place.ts); the same bytes again are a re-send, whose bytes
  // the caller's quota already counts.
  const { placed, path } = placeFileSync(req.tmp, req.dest, sha256, req.alt);
  return { sha256, replaced: placed === 'same' ? req.data.length : 0, path };
}

/** The file to write: the reused one when it is still there, else a new one at that path. */
function openTarget(req: WriterRequest): number {
  if (req.reusedSize !== undefined) {
    try {
      return openSync(req.tmp, fsc.O_WRONLY | fsc.O_NOFOLLOW);
    } catch (err) {
      // Gone, or replaced by a link (ELOOP: not followed): a new file at that path instead.
      const code = (err as NodeJS.ErrnoException).code;
      if (code !== 'ENOENT' && code !== 'ELOOP') throw err;
      if (code === 'ELOOP') rmSync(req.tmp, { force: true });
      req.reusedSize = undefined;
    }
  }
  return openSync(req.tmp, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL, 0o640);
}

function failure(id: number, err: unknown): WriterReply {
  const e = err as NodeJS.ErrnoException;
  return { id, ok: false, code: e.code ?? 'EIO', message: e.message ?? String(err) };
}

function drain(): void {
  scheduled = false;
  const items = queue.splice(0, queue.length);
  const replies: WriterReply[] = [];
  const renamedInto = new Set<string>();
  const waiting: Array<{ reply: WriterReply; dir: string; dest: string; replaced: number }> = [];
  for (const req of items) {
    try {
      const { sha256, replaced, path } = writeBody(req);
      const dir = dirname(path);
      renamedInto.add(dir);
      waiting.push({ reply: { id: req.id, ok: true, sha256, replaced, path }, dir, dest: path, replaced });
    } catch (err) {
      replies.push(failure(req.id, err));
    }
  }
  // The new names are durable once their directory is: one fsync covers every rename above.
  const dirErrors = new Map<string, unknown>();
  for (const dir of renamedInto) {
    try {
      fsyncSync(dirFd(dir));
    } catch (err) {
      dirErrors.set(dir, err);
    }
  }
  for (const w of waiting) {
    const err = dirErrors.get(w.dir);
    if (err === undefined) {
      replies.push(w.reply);
      continue;
    }
    // Refused, so not left behind (the client hears an error and sends again) — unless the same
    // bytes were there already, acknowledged before: that name must stay.
    if (w.replaced === 0) rmSync(w.dest, { force: true });
    replies.push(failure(w.reply.id, err));
  }
  port.postMessage(replies);
}

port.on('message', (req: WriterRequest) => {
  queue.push(req);
  // Let every message already posted arrive first, so that one pass (and one directory fsync)
  // serves all of them.
  if (!scheduled) {
    scheduled = true;
    setImmediate(drain);
  }
});
