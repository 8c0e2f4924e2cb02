/**
 * Render threads for policy generation (`[policy] render_threads`). A generation that renders
 * many nodes on their own (templates reading node data, properties of their own) spends about a
 * third of its time rendering and most of the rest writing to the store, in one event loop. With
 * threads, a batch's nodes are rendered there while the event loop writes the batch before it
 * (generate.ts), so the two overlap.
 *
 * Each batch's nodes are split in contiguous runs, one per thread, and come back in their
 * order. A batch of fewer than `minBatch` nodes is rendered in the event loop: a message each way
 * costs more than a few renders. A thread that fails or stops is replaced at the next batch, and
 * the batch it held is rendered in the event loop (logged): rendering never depends on a thread.
 */
import { availableParallelism } from 'node:os';
import { Worker } from 'node:worker_threads';
import type { Logger } from '@capstan/shared/log';
import type { NodeRendering, PendingNode, RenderedText } from './per-node.js';
import { RenderError } from './render.js';
import type { RenderReply, RenderRequest, RenderResult } from './render-worker.js';

const WORKER_URL = new URL('./render-worker.js', import.meta.url);

/** Below this many nodes to render, a batch is rendered in the event loop. */
export const MIN_THREADED_BATCH = 64;

/** `[policy] render_threads = -1`: one thread per core but the event loop's, at most four. */
export function defaultRenderThreads(): number {
  return Math.min(4, Math.max(0, availableParallelism() - 1));
}

interface Thread {
  worker: Worker;
  generation: number;
  contents: Set<number>;
  pending: Map<number, { resolve: (r: RenderResult[]) => void; reject: (err: Error) => void }>;
  dead: boolean;
}

export class RenderPool {
  private readonly threads: Thread[] = [];
  private nextId = 1;
  private closed = false;
  /** Nodes rendered on a thread so far (the rest were rendered in the event loop). */
  threaded = 0;

  constructor(readonly size: number, private readonly log: Logger, private readonly minBatch = MIN_THREADED_BATCH) {
    if (!Number.isInteger(size) || size < 0) throw new RangeError('render threads must be a whole number');
  }

  /**
   * Each pending node's rendering, in order: its text, or the RenderError that keeps its policy
   * from being generated. Nodes already rendered (a shared content's) are not sent anywhere.
   */
  async render(rendering: NodeRendering, nodes: readonly PendingNode[]): Promise<Array<RenderedText | RenderError>> {
    const out = new Array<RenderedText | RenderError | undefined>(nodes.length);
    const todo: number[] = [];
    nodes.forEach((p, i) => {
      if (p.text) out[i] = p.text;
      else todo.push(i);
    });
    const here = (indexes: readonly number[]) => {
      for (const i of indexes) {
        try {
          out[i] = rendering.renderText(nodes[i]!);
        } catch (err) {
          if (!(err instanceof RenderError)) throw err;
          out[i] = err;
        }
      }
    };
    if (this.size === 0 || this.closed || todo.length < this.minBatch) {
      here(todo);
      return out as Array<RenderedText | RenderError>;
    }
    const n = Math.min(this.size, Math.ceil(todo.length / this.minBatch));
    const per = Math.ceil(todo.length / n);
    await Promise.all(Array.from({ length: n }, async (_, k) => {
      const part = todo.slice(k * per, (k + 1) * per);
      if (part.length === 0) return;
      try {
        const results = await this.send(this.thread(k), rendering, part.map((i) => nodes[i]!));
        part.forEach((i, j) => {
          const r = results[j]!;
          out[i] = 'problem' in r ? new RenderError(r.problem) : r;
        });
        this.threaded += part.length;
      } catch (err) {
        this.log.warn({ err, nodes: part.length }, 'render thread failed: these nodes rendered in the event loop');
        here(part);
      }
    }));
    return out as Array<RenderedText | RenderError>;
  }

  private thread(k: number): Thread {
    const t = this.threads[k];
    if (t && !t.dead) return t;
    const worker = new Worker(WORKER_URL);
    const fresh: Thread = { worker, generation: 0, contents: new Set(), pending: new Map(), dead: false };
    worker.unref();
    worker.on('message', (reply: RenderReply) => {
      const p = fresh.pending.get(reply.id);
      if (!p) return;
      fresh.pending.delete(reply.id);
      if (fresh.pending.size === 0) worker.unref();
      if ('error' in reply) {
        // Its state may be wrong: the next batch sends the generation again.
        fresh.generation = 0;
        p.reject(new Error(reply.error));
      } else p.resolve(reply.results);
    });
    const died = (err: Error) => {
      if (fresh.dead) return;
      fresh.dead = true;
      for (const p of fresh.pending.values()) p.reject(err);
      fresh.pending.clear();
    };
    worker.on('error', died);
    worker.on('exit', (code) => died(new Error(`render thread exited with code ${code}`)));
    this.threads[k] = fresh;
    return fresh;
  }

  private send(t: Thread, rendering: NodeRendering, nodes: readonly PendingNode[]): Promise<RenderResult[]> {
    const req: RenderRequest = { id: this.nextId++, generation: rendering.id, contents: [], jobs: [] };
    if (t.generation !== rendering.id) {
      req.model = rendering.model;
      req.templates = rendering.templates;
      t.generation = rendering.id;
      t.contents.clear();
    }
    for (const p of nodes) {
      const id = rendering.contentId(p.content);
      if (!t.contents.has(id)) {
        t.contents.add(id);
        req.contents.push({ id, directives: p.content.directives, merged: p.base.merged, digest: p.base.digest });
      }
      req.jobs.push([p.nodeId, id, p.input, p.digest !== undefined]);
    }
    return new Promise((resolve, reject) => {
      t.pending.set(req.id, { resolve, reject });
      if (t.pending.size === 1) t.worker.ref();
      try {
        t.worker.postMessage(req);
      } catch (err) {
        // Data that cannot cross (it should all be JSON): this batch goes to the event loop.
        t.pending.delete(req.id);
        t.generation = 0;
        if (t.pending.size === 0) t.worker.unref();
        reject(err as Error);
      }
    });
  }

  /** Stop the threads (server shutdown); later batches are rendered in the event loop. */
  async close(): Promise<void> {
    this.closed = true;
    await Promise.all(this.threads.map((t) => t.worker.terminate()));
  }
}
