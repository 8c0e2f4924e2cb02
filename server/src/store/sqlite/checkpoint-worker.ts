/**
 * The background checkpointer's thread (checkpointer.ts): its own connection to the registry's
 * file, copying the WAL's committed pages into the database on each nudge, so that the writer's
 * commits only append to the WAL. A PASSIVE checkpoint takes no lock a writer or a reader waits
 * for: it copies what no reader still needs, and the writer starts the WAL over once all of it
 * was copied.
 */
import { parentPort, workerData } from 'node:worker_threads';
import Database from 'better-sqlite3';

export interface CheckpointWorkerData {
  path: string;
  busyTimeoutMs: number;
  /** Int32Array over it: [0] set to 1 and notified once the connection is closed. */
  closed: SharedArrayBuffer;
}

/** From the event loop: copy now, or close the connection (the thread is then terminated). */
export type CheckpointRequest = 'checkpoint' | 'close';
/** To the event loop: a checkpoint's outcome (frames in the WAL and copied), or why it failed. */
export type CheckpointReply = { checkpointed: number; wal: number } | { error: string };

const data = workerData as CheckpointWorkerData;
const closed = new Int32Array(data.closed);
const db = new Database(data.path);
db.pragma(`busy_timeout = ${data.busyTimeoutMs}`);
// The database file is synced before the WAL may start over: what the checkpoint copied is durable.
db.pragma('synchronous = FULL');

function close(): void {
  try {
    db.close();
  } finally {
    Atomics.store(closed, 0, 1);
    Atomics.notify(closed, 0);
  }
}

parentPort!.on('message', (req: CheckpointRequest) => {
  if (req === 'close') {
    // The event loop ends this thread once it has seen the connection closed.
    close();
    return;
  }
  let reply: CheckpointReply;
  try {
    const [r] = db.pragma('wal_checkpoint(PASSIVE)') as Array<{ busy: number; log: number; checkpointed: number }>;
    reply = { checkpointed: r!.checkpointed, wal: r!.log };
  } catch (err) {
    reply = { error: err instanceof Error ? err.message : String(err) };
  }
  parentPort!.postMessage(reply);
});
