/**
 * A render thread: renders nodes' policies with their data (NodeRendering.renderText) for the
 * generator's event loop, which meanwhile writes the previous batch (render-pool.ts). One
 * message in, one out. A generation's model and shared-folder templates come with its first
 * message to this thread, each content (a group set's directives and the merge of its global
 * and group properties) with the first batch that renders it.
 */
import { parentPort } from 'node:worker_threads';
import type { BundleDirective } from '@capstan/shared/policy/bundle';
import type { PolicyNodeInput } from '../store/store.js';
import type { Content, PolicyModel } from './content.js';
import { NodeRendering, PendingNode, type Base, type RenderedText } from './per-node.js';
import { RenderError, type NodeProblem } from './render.js';
import type { TemplateSet } from './shared-templates.js';

export interface RenderRequest {
  id: number;
  /** The generation (NodeRendering.id): a new one comes with its model and templates. */
  generation: number;
  model?: PolicyModel;
  templates?: TemplateSet;
  /** Contents not sent to this thread before in this generation. */
  contents: Array<{ id: number; directives: BundleDirective[]; merged: Base['merged']; digest: string }>;
  /** Node id, content number, node data, and whether the event loop has the node's digest already. */
  jobs: Array<[string, number, PolicyNodeInput | undefined, boolean]>;
}

export type RenderResult = RenderedText | { problem: NodeProblem };

export type RenderReply = { id: number; results: RenderResult[] } | { id: number; error: string };

let generation = 0;
let rendering: NodeRendering | null = null;
const contents = new Map<number, { content: Content; base: Base }>();
/** Expectation lists sent in this generation: the event loop keeps them by key. */
const sent = new Set<string>();

function handle(req: RenderRequest): RenderResult[] {
  if (req.generation !== generation) {
    if (!req.model || !req.templates) throw new Error(`generation ${req.generation} came without its model`);
    generation = req.generation;
    rendering = new NodeRendering(req.model, null, undefined, req.templates);
    contents.clear();
    sent.clear();
  }
  const r = rendering!;
  for (const c of req.contents) {
    // Only the directives of a content are rendered; the rest stays with the event loop.
    const content = { directives: c.directives } as Content;
    r.reads([content]); // works out what each directive reads, once
    contents.set(c.id, { content, base: { merged: c.merged, digest: c.digest } });
  }
  return req.jobs.map(([nodeId, id, input, digested]) => {
    const c = contents.get(id);
    if (!c) throw new Error(`content ${id} was not sent`);
    try {
      // Its digest is made here, from the content's, unless the event loop made it (to find the node unchanged).
      const t = r.renderText(new PendingNode(nodeId, c.content, input, c.base, undefined), !digested);
      if (sent.has(t.expectedKey)) delete t.expected;
      else sent.add(t.expectedKey);
      return t;
    } catch (err) {
      if (err instanceof RenderError) return { problem: err.problem };
      throw err;
    }
  });
}

parentPort?.on('message', (req: RenderRequest) => {
  let reply: RenderReply;
  try {
    reply = { id: req.id, results: handle(req) };
  } catch (err) {
    // A fault of this code, not of a node's data: the event loop renders the batch itself.
    generation = 0;
    reply = { id: req.id, error: err instanceof Error ? err.stack ?? err.message : String(err) };
  }
  parentPort!.postMessage(reply);
});
