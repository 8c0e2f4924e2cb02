/**
 * A plan's preview (POST /api/1/policy/plan): what the nodes a set of changes can reach would get
 * under the current model and under the desired one, by the generator's own membership and
 * rendering, writing nothing. Node by node, in id order: each node's preview is handed on and
 * dropped, so a plan holds one batch of node data and one node's rendering at a time, not the
 * fleet's, and a few inventories at a time; what it holds is charged to its bounds as it goes
 * (plan-memory.ts).
 */
import type { NodePropertyLevel, PolicyKind, PolicyNodeInput, Store } from '../store/store.js';
import { shownLeaves, type ShownLeaf } from './plan-nodes.js';
import { mergeFor } from './render.js';
import { contentOf, groupsTouched, type Content, type NodePreview, type PolicyModel } from './content.js';
import { Listing } from './listing.js';
import type { RuleDef } from './model.js';
import { NodeRendering, type RenderedPreview } from './per-node.js';
import { jsonBytes, textBytes, UNBOUNDED, type PlanBounds } from './plan-memory.js';
import { NO_TEMPLATES, type TemplateSet } from './shared-templates.js';

/**
 * Nodes whose data (host name, relay, certificate, properties) is read at once: small, since no
 * write is batched here.
 */
export const PREVIEW_BATCH = 250;
/** Nodes whose inventories are read at once (each up to the inventory size limit). */
export const INVENTORY_BATCH = 25;

/** What a preview needs of the generator: its membership code. */
export interface MembershipSource {
  store: Store;
  /** Accepted members of any of `groupIds`. */
  members(model: PolicyModel, groupIds: Set<string>, listing: Listing): Promise<Set<string>>;
  /** For each node of `nodes`, the ids of the groups that contain it. */
  membership(model: PolicyModel, nodes: Set<string>, listing: Listing): Promise<Map<string, Set<string>>>;
}

/** A node's input with its own properties as a plan would set them. */
function withLevel(input: PolicyNodeInput | undefined, level: NodePropertyLevel): PolicyNodeInput {
  const base = input ?? { hostname: '', relay: '', certificate: null, properties: {} };
  const { secrets: _was, ...rest } = base;
  return { ...rest, properties: level.properties, ...(Object.keys(level.secrets).length > 0 && { secrets: level.secrets }) };
}

/**
 * A node's effective leaves under a model, with their origins, a secret's without its value: made
 * once per group set for the nodes without properties of their own (one list, shared).
 */
function leavesFor(model: PolicyModel): (groups: ReadonlySet<string>, input: PolicyNodeInput | undefined) => ShownLeaf[] {
  const shared = new Map<string, ShownLeaf[]>();
  return (groups, input) => {
    const own = input !== undefined && (Object.keys(input.properties).length > 0 || input.secrets !== undefined);
    const key = own ? '' : [...groups].sort().join('\u0000');
    let out = own ? undefined : shared.get(key);
    if (!out) {
      const m = mergeFor(model, groups, input?.properties ?? {}, input?.secrets);
      out = shownLeaves(m.origins, m.secrets);
      if (!own) shared.set(key, out);
    }
    return out;
  };
}

const byId = (a: RuleDef, b: RuleDef) => (a.id < b.id ? -1 : a.id > b.id ? 1 : 0);

/** The accepted members of the groups the changes touch, each previewed and handed to `each`. */
export async function previewNodes(
  src: MembershipSource, before: PolicyModel, after: PolicyModel, changed: ReadonlyArray<{ kind: PolicyKind; id: string }>,
  each: (p: NodePreview) => void | Promise<void>, bounds: PlanBounds = UNBOUNDED, templates: TemplateSet = NO_TEMPLATES,
  levels: ReadonlyMap<string, NodePropertyLevel> = new Map(),
): Promise<void> {
  const listing = new Listing(src.store);
  const touched = (model: PolicyModel) => {
    const out = new Set<string>();
    for (const c of changed) groupsTouched(model, c.kind, c.id).forEach((g) => out.add(g));
    return out;
  };
  const nodes = await src.members(before, touched(before), listing);
  for (const n of await src.members(after, touched(after), listing)) nodes.add(n);
  // Nodes whose own properties change: those accepted (membership keeps only them).
  for (const n of levels.keys()) nodes.add(n);
  let ids = 0;
  for (const n of nodes) ids += textBytes(n);
  bounds.charge(ids, `the ${nodes.size} nodes reached`);
  bounds.checkNow();
  const sides = [[before, await src.membership(before, nodes, listing)], [after, await src.membership(after, nodes, listing)]] as const;
  for (const [, of] of sides) {
    let bytes = 0;
    for (const groups of of.values()) for (const g of groups) bytes += textBytes(g);
    bounds.charge(bytes, 'the groups of the nodes reached');
  }
  bounds.checkNow();
  // Each side rendered with the node's data as generation would, sealing nothing.
  const render = sides.map(([m]) => ({ rendering: new NodeRendering(m, null, undefined, templates), rules: [...m.rules.values()].sort(byId), contents: new Map<string, Content>() }));
  const sideContent = (side: number, nodeId: string) => {
    const groups = sides[side]![1].get(nodeId) ?? new Set<string>();
    const key = [...groups].sort().join('\u0000');
    const r = render[side]!;
    let c = r.contents.get(key);
    if (!c) {
      r.contents.set(key, (c = contentOf(sides[side]![0], r.rules, groups)));
      bounds.charge(textBytes(c.json) + textBytes(key), 'a distinct list of directives');
    }
    return { groups, c };
  };
  const sorted = [...nodes].filter((n) => sides[0][1].has(n) || sides[1][1].has(n)).sort();
  const leaves = sides.map(([m]) => leavesFor(m));
  for (let i = 0; i < sorted.length; i += PREVIEW_BATCH) {
    const batch = sorted.slice(i, i + PREVIEW_BATCH);
    const reads = [0, 1].map((side) => render[side]!.rendering.reads(batch.map((n) => sideContent(side, n).c)));
    const inputs = await src.store.policyNodeInputs(batch, { node: reads.some((r) => r.node), inventory: reads.some((r) => r.inventory) });
    let held = 0;
    for (const input of inputs.values()) held += textBytes(input.hostname) + textBytes(input.relay) + textBytes(input.certificate) + jsonBytes(input.properties);
    bounds.charge(held, 'a batch of node data');
    const facts = reads.some((r) => r.inventory);
    for (let j = 0; j < batch.length; j += INVENTORY_BATCH) {
      const chunk = batch.slice(j, j + INVENTORY_BATCH);
      // Inventories (the largest node data) a few at a time, dropped once their nodes are rendered.
      let docs = 0;
      if (facts) {
        for (const [n, doc] of await src.store.policyInventories(chunk)) {
          inputs.get(n)!.inventory = doc;
          docs += textBytes(doc);
          bounds.charge(textBytes(doc), `the inventory of node ${n}`);
        }
      }
      for (const nodeId of chunk) {
        bounds.check();
        const level = levels.get(nodeId);
        const input = (side: number) => (side === 1 && level ? withLevel(inputs.get(nodeId), level) : inputs.get(nodeId));
        const [b, a] = [0, 1].map((side) => {
          const { groups, c } = sideContent(side, nodeId);
          const p = render[side]!.rendering.preview(nodeId, groups, c, input(side));
          bounds.charge(p.bytes, `the rendered policy of node ${nodeId}`);
          return p;
        }) as [RenderedPreview, RenderedPreview];
        // Leaves with their origins, made only for a node the plan lists (`each` asks).
        const side = (p: RenderedPreview, i: number) => ({
          properties: p.properties, secrets: p.secrets, ...(p.problem && { problem: p.problem }),
          leaves: () => leaves[i]!(sideContent(i, nodeId).groups, input(i)),
        });
        await each({ node_id: nodeId, before: b.directives, after: a.directives, sides: { before: side(b, 0), after: side(a, 1) } });
        bounds.release(b.bytes + a.bytes);
        const held = inputs.get(nodeId);
        if (held) delete held.inventory;
      }
      bounds.release(docs);
    }
    bounds.release(held);
  }
}
