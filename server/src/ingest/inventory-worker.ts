/**
 * An inventory worker thread: reads one inventory at a time (inventory-read.ts) for the main
 * thread, one message in, one message out. Errors cross as plain data and are rebuilt there
 * (inventory-pool.ts).
 */
import { parentPort } from 'node:worker_threads';
import { isCapstanError } from '@capstan/shared/errors';
import type { InventoryDoc } from './inventory.js';
import { readInventory, type InventoryJob } from './inventory-read.js';

export interface InventoryRequest {
  id: number;
  job: InventoryJob;
}

export type InventoryReply =
  | { ready: true }
  | { id: number; ok: true; doc: InventoryDoc }
  | { id: number; ok: false; error: { capstan: boolean; code?: string; message: string; statusCode?: number; transient?: boolean } };

const port = parentPort;
if (port) {
  // Loaded: the pool's clock for an inventory starts when it is handed over, not while this loads.
  port.postMessage({ ready: true } satisfies InventoryReply);
  port.on('message', (req: InventoryRequest) => {
    readInventory(req.job).then(
      (doc) => port.postMessage({ id: req.id, ok: true, doc } satisfies InventoryReply),
      (err: unknown) => {
        const error = isCapstanError(err)
          ? { capstan: true, code: err.code, message: err.message, statusCode: err.statusCode, transient: err.transient }
          : { capstan: false, message: err instanceof Error ? err.message : String(err) };
        port.postMessage({ id: req.id, ok: false, error } satisfies InventoryReply);
      },
    );
  });
}
