/**
 * Policy generation: a node's bundle is every directive of every rule whose groups contain it,
 * each tagged with its rule id (docs/policy.md). Bundles are stored per node with their config
 * id, and the node's expectations are set from them, so compliance is expected-vs-received.
 *
 * Incremental: a change to one directive, group or rule regenerates only the nodes in the groups
 * it touches, before and after the change (a node leaving a group must lose the rule too); a
 * node's inventory or acceptance change regenerates that node alone. A node whose effective
 * directives did not change keeps its bundle, generated_at and ETag untouched.
 */
import { bundleExpectations } from '@capstan/shared/compliance/compute';
import type { Logger } from '@capstan/shared/log';
import { computeConfigId } from '@capstan/shared/policy/bundle';
import { ChangeFeed } from '@capstan/toolkit/policy/changes';
import type { NodePropertyLevel, PolicyKind, PolicyNodeInput, PolicyWrite, Store } from '../store/store.js';
import {
  bundleJson, contentOf, directivesFor, expectationKey, groupsTouched, loadModel, rulesVia, type Content, type NodePreview, type PolicyModel, type RuleVia,
} from './content.js';
import { Listing } from './listing.js';
import { groupsOfNode, members, membership } from './membership.js';
import { periodically } from './periodic.js';
import { keepLastSeconds, type RuleDef } from './model.js';
import { NodeRendering, PendingNode, type NodeContent, type RenderedText, type RenderMemo } from './per-node.js';
import { RenderPool } from './render-pool.js';
import { KeptState, type KeptProblem } from './kept.js';
import type { PlanBounds } from './plan-memory.js';
import { previewNodes } from './preview.js';
import { RenderError, type NodeProblem } from './render.js';
import { SharedTemplates } from './shared-templates.js';
import { TouchBatcher } from './touches.js';
import { WriteQueue } from './write-queue.js';

export interface GenerationStats {
  nodes: number;
  changed: number;
  ms: number;
}

/**
 * Nodes whose bundles are read and written in one transaction: ~100 ms of write lock on SQLite
 * (the ingest waits for one batch at most), and few enough commits that a page is not rewritten
 * to the WAL once per small batch (500 wrote twice the bytes for 100,000 nodes).
 */
const BATCH = 2000;

export class PolicyGenerator {
  private readonly store: Store;
  private readonly log: Logger;
  private readonly clock: () => Date;
  /** Changes are applied one at a time: two saves racing could each regenerate with a stale model. */
  private queue: Promise<unknown> = Promise.resolve();
  /** Nodes whose bundle changed, for relays' push hints (GET /rudder/relay-api/1/policies/changes). */
  readonly changes = new ChangeFeed();
  /** Contents (config id and expected components) whose stored expectations were found current. */
  private readonly verified = new Set<string>();
  /** What each node's last rendering was made from (per-node.ts RenderMemo). */
  private readonly rendered: RenderMemo = new Map();
  /** Each node's sealed secrets and why its policy was not generated, kept in the store (kept.ts). */
  private readonly kept: KeptState;
  /** Told of nodes newly unable to get a policy (a property conflict, a template error). */
  private readonly onProblems?: (problems: Array<{ node_id: string; problem: NodeProblem }>, at: string) => void | Promise<void>;
  /** Told of the nodes whose bundle one generation changed (the event stream's policy.deployed). */
  private readonly onDeployed?: (nodeIds: string[], at: string) => void | Promise<void>;

  /** The shared-folder templates file_from_template directives name (`sharedFolder`: `[policy] shared_folder`). */
  readonly templates: SharedTemplates;
  /** Threads rendering nodes on their own while the event loop writes (`[policy] render_threads`). */
  private readonly pool: RenderPool;
  /** Node changes gathered into batches (`[policy] touch_window`). */
  private readonly touches: TouchBatcher;
  /** Batches written at once (`[policy] write_batches` on PostgreSQL; 1 on SQLite), of `batchSize` nodes. */
  private readonly writeBatches: number;
  private readonly batchSize: number;

  constructor(deps: {
    store: Store; log: Logger; clock?: () => Date; sharedFolder?: string;
    /** Render threads (render-pool.ts); 0, the default: nodes are rendered in the event loop. */
    renderThreads?: number;
    /** How long touched nodes are gathered before a batch starts (`[policy] touch_window`); 0, the default: a turn of the event loop. */
    touchWindowMs?: number;
    /** Batches of a generation written at once (write-queue.ts); 1, the default: one after the other. */
    writeBatches?: number;
    /** Nodes per batch (BATCH by default; tests make many small ones). */
    batchSize?: number;
    onDeployed?: (nodeIds: string[], at: string) => void | Promise<void>;
    onProblems?: (problems: Array<{ node_id: string; problem: NodeProblem }>, at: string) => void | Promise<void>;
  }) {
    this.store = deps.store;
    this.kept = new KeptState(deps.store);
    this.log = deps.log;
    this.clock = deps.clock ?? (() => new Date());
    this.templates = new SharedTemplates(deps.sharedFolder ?? '');
    this.pool = new RenderPool(deps.renderThreads ?? 0, deps.log);
    this.writeBatches = deps.writeBatches ?? 1;
    this.batchSize = deps.batchSize ?? BATCH;
    const regenerate = (batch: Set<string>) => this.serial(async () => {
      await this.generate(await loadModel(this.store), batch, new Listing(this.store));
    }).catch((err: unknown) => this.log.warn({ err, nodes: batch.size }, 'policy regeneration failed'));
    this.touches = new TouchBatcher(regenerate, deps.touchWindowMs ?? 0);
    if (deps.onDeployed) this.onDeployed = deps.onDeployed;
    if (deps.onProblems) this.onProblems = deps.onProblems;
  }

  /** Why the node's policy was last not generated (its previous bundle stays), or null. */
  async problemOf(nodeId: string): Promise<KeptProblem | null> {
    await this.kept.readProblems();
    return this.kept.problem(nodeId) ?? null;
  }

  private serial<T>(fn: () => Promise<T>): Promise<T> {
    const next = this.queue.then(fn, fn);
    this.queue = next.catch(() => undefined);
    return next;
  }

  /**
   * Save one object (through `save`) and regenerate the nodes it affects. `save` runs inside the
   * generator's queue, so the model read before it is the one it replaces.
   */
  change<T>(kind: PolicyKind, id: string, save: () => Promise<T>): Promise<{ result: T; stats: GenerationStats }> {
    return this.serial(async () => {
      const t0 = performance.now();
      const before = await loadModel(this.store);
      // A group's members are regenerated even when no rule uses it: their memberships are kept
      // for compliance by group (their bundles stay as they are).
      const touched = (model: PolicyModel) => {
        const out = groupsTouched(model, kind, id);
        if (kind === 'group') out.add(id);
        return out;
      };
      const nodesBefore = await members(this.store, before, touched(before), new Listing(this.store));
      const result = await save();
      const after = await loadModel(this.store);
      // Listed after the save, and shared with the generation below.
      const listing = new Listing(this.store);
      const nodesAfter = await members(this.store, after, touched(after), listing);
      for (const n of nodesBefore) nodesAfter.add(n);
      const changed = await this.generate(after, nodesAfter, listing);
      const stats = { nodes: nodesAfter.size, changed, ms: performance.now() - t0 };
      this.log.info({ kind, id, ...stats }, 'policy regenerated');
      return { result, stats };
    });
  }

  /** A node's inventory, acceptance or registry fields changed: its dynamic groups may have. */
  nodeChanged(nodeId: string): Promise<GenerationStats> {
    return this.serial(async () => {
      const t0 = performance.now();
      const changed = await this.generate(await loadModel(this.store), new Set([nodeId]), new Listing(this.store));
      return { nodes: 1, changed, ms: performance.now() - t0 };
    });
  }

  /**
   * Note a node change without waiting (the ingest): gathered with the others of its window, or
   * of the generation running, into one batch (touches.ts). `settled()` waits for them.
   */
  touch(nodeId: string): void {
    this.touches.touch(nodeId);
  }

  /** Resolves when every touched node has been regenerated (tests, shutdown), without waiting out the touch window. */
  settled(): Promise<void> {
    return this.touches.settled();
  }

  /** Nodes this generator has had rendered on its render threads. */
  get renderedInThreads(): number {
    return this.pool.threaded;
  }

  /** Stop the render threads, once what was touched is regenerated (shutdown). */
  async close(): Promise<void> {
    await this.settled();
    await this.pool.close();
  }

  /**
   * regenerateAll every `intervalMs`, the next one `intervalMs` after the previous one ended.
   * Membership can change without an event this process sees: the lifecycle sweep's status and
   * state, a provider's tags and regions, a CLI or another server on the same database.
   */
  every(intervalMs: number): { stop(): Promise<void> } {
    return periodically(() => this.regenerateAll(), this.log, intervalMs);
  }

  /** Every accepted node (start-up, benchmark, the periodic check). */
  regenerateAll(): Promise<GenerationStats> {
    return this.serial(async () => {
      const t0 = performance.now();
      const model = await loadModel(this.store);
      const listing = new Listing(this.store);
      const all = new Set(await listing.accepted());
      const changed = await this.generate(model, all, listing);
      return { nodes: all.size, changed, ms: performance.now() - t0 };
    });
  }

  /** The accepted members of one group (built-in or defined); null when there is no such group. */
  async groupMembers(groupId: string): Promise<string[] | null> {
    const model = await loadModel(this.store);
    if (!model.groups.has(groupId)) return null;
    return [...await members(this.store, model, new Set([groupId]), new Listing(this.store))].sort();
  }

  /**
   * What applies to one node and why: the groups it is in, and each rule reaching it through
   * which of them, with the rule's directives. A node that is not accepted is in no group.
   */
  async explain(nodeId: string): Promise<{ groups: string[]; rules: RuleVia[] }> {
    const model = await loadModel(this.store);
    const groups = await groupsOfNode(this.store, model, nodeId, new Listing(this.store));
    return { groups, rules: rulesVia(model, groups) };
  }

  /**
   * What the nodes a set of changes can reach would get under `before` and under `after`, by the same membership and bundle code as
   * generation, writing nothing (`POST /api/1/policy/plan`, under its bounds), node by node (preview.ts).
   */
  async preview(
    before: PolicyModel, after: PolicyModel, changed: ReadonlyArray<{ kind: PolicyKind; id: string }>, each: (p: NodePreview) => void | Promise<void>, bounds?: PlanBounds,
    levels?: ReadonlyMap<string, NodePropertyLevel>,
  ): Promise<void> {
    const store = this.store;
    const src: Parameters<typeof previewNodes>[0] = {
      store, members: (m, g, l) => members(store, m, g, l), membership: (m, n, l) => membership(store, m, n, l),
    };
    return previewNodes(src, before, after, changed, each, bounds, await this.templates.read(before, after), levels);
  }

  /** Generate, store and set expectations for `nodes`; returns how many bundles changed. */
  private async generate(model: PolicyModel, nodes: Set<string>, listing: Listing): Promise<number> {
    const every = new Map<string, Set<string>>();
    const of = await membership(this.store, model, nodes, listing, every);
    const rules = [...model.rules.values()].sort((a, b) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    // Nodes with the same groups get the same directives: build each distinct set once.
    const cache = new Map<string, Content>();
    let changed = 0;
    let refreshed = 0;
    const deployed: string[] = [];
    // In id order: every table written here is keyed by node id, so a batch fills neighbouring
    // pages instead of dirtying pages all over each index (and the WAL rewriting them per batch).
    const all = [...nodes].sort();
    // Each node's content key (its groups), and the last node of each content in the order
    // written: a probe for stale expectations below.
    const keys = new Map<string, string>();
    const lastOf = new Map<string, string>();
    for (const n of all) {
      const groups = of.get(n);
      if (!groups) continue;
      const key = [...groups].sort().join('\u0000');
      keys.set(n, key);
      lastOf.set(key, n);
    }
    // Batches: one read of the current config ids and one write transaction per BATCH nodes
    // (one transaction per node made 100,000 nodes a matter of minutes, fsync-bound).
    await this.kept.readProblems();
    const rendering = new NodeRendering(model, this.kept.seals, this.rendered, await this.templates.read(model));
    const problems: Array<{ node_id: string; problem: NodeProblem }> = [];

    /**
     * A batch read and its nodes' rendering begun: what needs rendering on its own goes to the
     * render threads (render-pool.ts), which work on it while the previous batch is written.
     * Nothing here writes, seals or records a problem: that is commit's, in batch order.
     */
    const prepare = async (batch: string[]) => {
      const current = await this.store.policyConfigIds(batch);
      // The batch's contents first: their templates say what of the nodes is read.
      for (const n of batch) if (of.get(n) && !cache.has(keys.get(n)!)) cache.set(keys.get(n)!, contentOf(model, rules, of.get(n)!));
      const reads = rendering.reads(new Set(batch.map((n) => cache.get(keys.get(n) ?? '')).filter((c): c is Content => c !== undefined)));
      // A batch of nodes this generator never rendered (its first generation) has every inventory
      // read with the nodes: none of them can be found unchanged without it.
      const together = reads.inventory === true && !batch.some((n) => rendering.remembers(n));
      const inputs = await this.store.policyNodeInputs(batch, { ...reads, documents: together });
      if (reads.certificate) await this.kept.readSeals(batch);
      else if (reads.node) await this.ownSecrets(batch, inputs);
      // Inventories are read for the nodes rendered with their facts only (an unchanged one needs none).
      const want = batch.filter((n) => of.get(n) && rendering.wantsInventory(n, of.get(n)!, cache.get(keys.get(n)!)!, inputs.get(n), current.get(n)));
      if (together) {
        const wanted = new Set(want);
        for (const [n, input] of inputs) if (!wanted.has(n)) delete input.inventory;
      } else if (want.length) for (const [n, doc] of await this.store.policyInventories(want)) inputs.get(n)!.inventory = doc;
      const begun = new Map<string, PendingNode | 'unchanged' | null | RenderError>();
      const pending: PendingNode[] = [];
      for (const nodeId of batch) {
        const groups = of.get(nodeId);
        if (!groups) continue;
        try {
          const b = rendering.begin(nodeId, groups, cache.get(keys.get(nodeId)!)!, inputs.get(nodeId), current.get(nodeId));
          if (b instanceof PendingNode) pending.push(b);
          begun.set(nodeId, b);
        } catch (err) {
          if (!(err instanceof RenderError)) throw err;
          begun.set(nodeId, err);
        }
      }
      const texts = this.pool.render(rendering, pending);
      // Awaited by commit; a failure while the previous batch commits is not left unhandled.
      texts.catch(() => undefined);
      return { batch, current, begun, pending, texts };
    };

    /** A prepared batch's writes decided and its seals flushed, in batch order; answers the write itself (the write queue's). */
    const commit = async ({ batch, current, begun, pending, texts }: Awaited<ReturnType<typeof prepare>>) => {
      const rendered = new Map<PendingNode, RenderedText | RenderError>();
      (await texts).forEach((t, i) => rendered.set(pending[i]!, t));
      const writes: PolicyWrite[] = [];
      // Nodes by how long their groups keep a silent node's compliance (set after the writes,
      // which create the compliance rows of new nodes; unchanged nodes cost one statement).
      const keeps = new Map<number, string[]>();
      const at = this.clock().toISOString();
      for (const nodeId of batch) {
        const groups = of.get(nodeId);
        const had = current.get(nodeId);
        if (!groups) {
          this.kept.clearProblem(nodeId);
          // No longer accepted (or gone): it gets no policy at all.
          if (had !== undefined && (await this.store.deletePolicyBundle(nodeId))) {
            changed++;
            this.changes.publish([nodeId]);
            deployed.push(nodeId);
          }
          continue;
        }
        const key = keys.get(nodeId)!;
        const content = cache.get(key)!;
        const noteKeep = () => {
          const list = keeps.get(content.keepLast) ?? [];
          list.push(nodeId);
          keeps.set(content.keepLast, list);
        };
        let result: NodeContent | 'unchanged' | null;
        try {
          const b = begun.get(nodeId)!;
          if (b instanceof RenderError) throw b;
          if (b instanceof PendingNode) {
            const t = rendered.get(b)!;
            if (t instanceof RenderError) throw t;
            result = rendering.finish(b, t);
          } else result = b;
        } catch (err) {
          if (!(err instanceof RenderError)) throw err;
          // Not generated: its previous bundle stays, and the problem is kept on the node.
          if (this.kept.setProblem(nodeId, err.problem, at)) problems.push({ node_id: nodeId, problem: err.problem });
          continue;
        }
        this.kept.clearProblem(nodeId);
        if (result === 'unchanged') {
          noteKeep();
          continue;
        }
        // A node that never had a policy and has none still has nothing to fetch (404); one that
        // had a policy gets an empty bundle, or it would keep applying its cached one forever.
        if (content.directives.length === 0 && had === undefined) continue;
        noteKeep();
        const [configId, tail, expected] = result ? [result.configId, result.tail, result.expected] : [content.configId, content.json, content.expected];
        const bundle = () => ({ node_id: nodeId, config_id: configId, generated_at: at, bundle: bundleJson(nodeId, configId, at, tail) });
        if (had === configId) {
          // Rendered per node, a content has as many config ids as nodes: only shared ones are probed.
          if (!result) {
            content.stale ??= await this.staleExpectations(content, [nodeId, lastOf.get(key)!]);
            if (content.stale) writes.push({ bundle: bundle(), expected, expectationsOnly: true });
          }
          continue;
        }
        writes.push({ bundle: bundle(), expected });
      }
      // The seals first: a stored bundle's sealed values are always the kept ones. Every
      // batch's seals are flushed in batch order, before its own write starts.
      await this.kept.flush();
      return async () => {
        if (writes.length) {
          const moved = writes.filter((w) => !w.expectationsOnly);
          await this.store.putPolicies(writes);
          changed += moved.length;
          refreshed += writes.length - moved.length;
          this.changes.publish(moved.map((w) => w.bundle.node_id));
          for (const w of moved) deployed.push(w.bundle.node_id);
        }
        for (const [seconds, ids] of keeps) await this.store.setKeepLast(ids, seconds);
        // Each node's groups as generated, for compliance by group (a node not accepted is in none).
        const groupsOf = new Map(batch.filter((n) => every.has(n)).map((n) => [n, [...every.get(n)!]]));
        if ((await this.store.putGroupMembers(batch, groupsOf)) < 0) this.log.warn({ nodes: batch.length }, 'policy group memberships not written: the compliance counters were busy; next generation');
      };
    };

    // Batch k + 1 is read and handed to the render threads before batch k is written, and up to
    // `writeBatches` batches are written at once (write-queue.ts).
    const batches: string[][] = [];
    for (let i = 0; i < all.length; i += this.batchSize) batches.push(all.slice(i, i + this.batchSize));
    const writing = new WriteQueue(this.writeBatches);
    let next = batches.length > 0 ? prepare(batches[0]!) : null;
    try {
      for (let k = 0; k < batches.length; k++) {
        const prepared = await next!;
        next = k + 1 < batches.length ? prepare(batches[k + 1]!) : null;
        // Should this commit fail, the read ahead is dropped without an unhandled rejection.
        next?.catch(() => undefined);
        await writing.add(await commit(prepared));
      }
    } finally {
      // A batch that failed to settle leaves no write of the others running: they end first.
      await writing.drain();
    }
    if (problems.length) {
      this.log.warn({ nodes: problems.length, first: problems[0]!.node_id, code: problems[0]!.problem.code }, 'policy not generated for some nodes');
      await this.onProblems?.(problems, this.clock().toISOString());
    }
    if (refreshed) this.log.info({ nodes: refreshed }, 'expectations of unchanged policies brought up to date');
    if (deployed.length) await this.onDeployed?.(deployed, this.clock().toISOString());
    return changed;
  }

  /**
   * Nodes with secrets of their own are sealed to their certificates, which a batch reads only
   * when the model holds a secret: read theirs, and their kept seals, when it does not.
   */
  private async ownSecrets(batch: string[], inputs: Map<string, PolicyNodeInput>): Promise<void> {
    const own = batch.filter((n) => inputs.get(n)?.secrets !== undefined);
    if (own.length === 0) return;
    const certs = await this.store.policyNodeInputs(own, { node: true, certificate: true });
    for (const n of own) inputs.get(n)!.certificate = certs.get(n)?.certificate ?? null;
    await this.kept.readSeals(own);
  }

  /**
   * Are the stored expectations of this content out of date? The config id follows the
   * directives only, but what a node is expected to report may change with the server's version
   * (the agent's self-checks, a method's components): nodes whose policy did not change would keep
   * the old expectations forever. Probed on the first node met with this content and on the last
   * one (a regeneration cut short fixes a prefix of the nodes in id order); once found current, a
   * content is not probed again by this process.
   */
  private async staleExpectations(content: Content, probes: string[]): Promise<boolean> {
    const want = expectationKey(content.expected);
    const memo = `${content.configId}\u0000${want}`;
    if (this.verified.has(memo)) return false;
    for (const [i, nodeId] of [...new Set(probes)].entries()) {
      const stored = await this.store.getExpectations(nodeId, content.configId);
      // The first probe holds this config (its bundle says so): none stored is stale too. The
      // last may not hold it yet (it is written in this pass): then it tells nothing.
      if (stored === null ? i === 0 : expectationKey(stored) !== want) return true;
    }
    this.verified.add(memo);
    return false;
  }
}
