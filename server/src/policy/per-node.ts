/**
 * One generation's rendering of node data into bundles (render.ts), with what it can share: a
 * content (a group set's directives) whose templates read no node of its own is rendered once for
 * every node of that content without properties of its own; expectations equal as text are one
 * list, so the store checks each once.
 */
import { createHash } from 'node:crypto';
import { directiveExpectations } from '@capstan/shared/compliance/compute';
import { canonicalJson, configIdOfCanonical, type BundleDirective } from '@capstan/shared/policy/bundle';
import type { SealedSecret } from '@capstan/shared/policy/secrets';
import { systemExpectations } from '@capstan/shared/policy/system';
import type { ExpectedComponent, PolicyNodeInput, PolicyNodeRead } from '../store/store.js';
import { expectationKey, frozen, propertyGroups, type Content, type PolicyModel } from './content.js';
import { jsonBytes, textBytes } from './plan-memory.js';
import type { Json } from './properties.js';
import {
  conflictProblem, mergeFor, publicProperties, renderDirectives, RenderError, secretValues, setNeeds, templateData, withNodeLevel,
  type Effective, type Needs, type NodeProblem, type SealCache,
} from './render.js';
import { NO_TEMPLATES, templatesDigest, type TemplateSet } from './shared-templates.js';

/** Does the node have properties of its own (plain or secret)? */
const hasOwn = (input: PolicyNodeInput | undefined) => input !== undefined && (Object.keys(input.properties).length > 0 || Object.keys(input.secrets ?? {}).length > 0);

/** A content's global and group levels merged (the same for all its nodes), or their conflicts. */
export interface Base {
  merged: Effective;
  /** The content, this merge and the techniques, digested once for all the content's nodes. */
  digest: string;
  problem?: NodeProblem;
}

/**
 * What a node's rendering was made from, as a digest, and the config id it gave: a later
 * generation finding the same digest and that config id stored skips the node (an unchanged
 * pass renders nothing). Kept per generator, across generations.
 */
export type RenderMemo = Map<string, { digest: string; configId: string }>;

/** A node's bundle content once rendered. */
export interface NodeContent {
  configId: string;
  expected: ExpectedComponent[];
  /** The JSON after `"directives":` in the stored bundle: directives, then properties and secrets. */
  tail: string;
}

/** A node's rendering for a plan (NodeRendering.preview). */
export interface RenderedPreview {
  directives: BundleDirective[];
  properties: Record<string, Json>;
  /** Secret names used, each with a digest of its value (compared, never shown). */
  secrets: Record<string, string>;
  problem?: NodeProblem;
  /** UTF-8 bytes of what this node holds of its own (its rendered directives and properties as JSON); 0 when it shares its content's. */
  bytes: number;
}

/** What a content shares among its nodes without properties of their own. */
interface Shared {
  merged: Effective;
  directives: BundleDirective[];
  secrets: string[];
  json: string;
  /** The directives' canonical JSON (the config id's input). */
  canonical: string;
  expected: ExpectedComponent[];
  /** What `expected` is made of (expectedOf's key): equal keys, equal lists. */
  expectedKey: string;
}

/**
 * A node's rendering as text, what finishing its bundle needs: made in the event loop or on a
 * render thread (render-pool.ts), which sends `expected` only the first time it sends a key.
 */
export interface RenderedText {
  /** What follows `"directives":` in its bundle but the sealed secrets: the directives, then its public properties when it has any. */
  json: string;
  /** The directives' canonical JSON, the config id's input: given when the node seals secrets (the config id counts their sealed values). */
  canonical?: string;
  /** The config id, when the node has no secret to seal: made where the text is. */
  configId?: string;
  expectedKey: string;
  expected?: ExpectedComponent[];
  /** What the node was rendered from (digestOf), made where it was rendered when its PendingNode had none. */
  digest?: string;
  /** The secrets the rendered directives use, by name, with their plaintext (sealed by finish). */
  secrets: Array<[string, string]>;
  /**
   * The node's public effective properties (in `json` already), given when it uses secrets:
   * its config id, made where they are sealed, counts both.
   */
  properties?: Record<string, Json>;
}

/** A node to be rendered on its own (begin → a RenderedText → finish). */
export class PendingNode {
  constructor(
    readonly nodeId: string, readonly content: Content, readonly input: PolicyNodeInput | undefined, readonly base: Base,
    /** What it is made from (digestOf), when known before it is rendered; otherwise renderText makes it. */
    readonly digest: string | undefined,
    /** Already rendered: a content shared by nodes without data of their own, rendered once. */
    readonly text?: RenderedText,
  ) {}
}

/** One directive's texts: made once for a directive many nodes share, per node for one rendered for it. */
interface DirectiveText {
  json: string;
  canonical: string;
  expected: ExpectedComponent[];
  /** expectationKey of `expected`. */
  key: string;
}

/** Each NodeRendering's number: a render thread knows by it when a generation's model is new. */
let renderings = 0;

export class NodeRendering {
  readonly id = ++renderings;
  /** The contents rendered per node, numbered for render threads (sent to each once). */
  private readonly contentIds = new Map<Content, number>();
  private readonly needsOf = new Map<string, Needs>();
  private readonly propertyGroups: Set<string>;
  private readonly shared = new Map<Content, RenderedText | RenderError>();
  private readonly needs = new Map<Content, Needs>();
  private readonly expectations = new Map<string, ExpectedComponent[]>();
  private readonly bases = new Map<Content, Base>();
  /** The texts of directives shared by nodes (not rendered per node), by directive object. */
  private readonly texts = new WeakMap<BundleDirective, DirectiveText>();
  /** digestOf for a node's input (wantsInventory asks before render does). */
  private readonly digests = new WeakMap<PolicyNodeInput, string>();
  /** The techniques as text: a changed technique changes every digest. */
  private readonly modelDigest: string;

  /** `templates`: the shared-folder templates the model's directives name, read for this generation. */
  constructor(
    readonly model: PolicyModel, private readonly seals: SealCache | null, private readonly memo: RenderMemo = new Map(),
    readonly templates: TemplateSet = NO_TEMPLATES,
  ) {
    this.propertyGroups = propertyGroups(model);
    this.modelDigest = createHash('sha256').update(JSON.stringify([...model.techniques.values()])).digest('hex');
  }

  private baseFor(content: Content, groups: ReadonlySet<string>): Base {
    let b = this.bases.get(content);
    if (!b) {
      const m = mergeFor(this.model, groups, {});
      const merged = { effective: m.effective, secrets: m.secrets };
      // A shared-folder template's file counts for the contents that name it, and only for them.
      const digest = createHash('sha256').update(this.modelDigest).update('\u0000').update(content.json).update('\u0000').update(JSON.stringify(merged))
        .update('\u0000').update(templatesDigest(content.directives, this.templates, this.model)).digest('hex');
      b = { merged, digest, ...(m.conflicts.length > 0 && { problem: conflictProblem(m.conflicts) }) };
      this.bases.set(content, b);
    }
    return b;
  }

  private needsFor(content: Content): Needs {
    let n = this.needs.get(content);
    if (!n) this.needs.set(content, (n = setNeeds(content.directives, this.needsOf, this.model, this.templates)));
    return n;
  }

  /**
   * What a batch of nodes with these contents needs read: the nodes' host names and relays when a
   * template or a global or group property is in play, their certificates when a secret may be
   * used, their inventories when a template reads facts. Otherwise only their own properties.
   */
  reads(contents: Iterable<Content>): PolicyNodeRead {
    let templated = false;
    let facts = false;
    for (const c of contents) {
      const n = this.needsFor(c);
      templated ||= n.templated;
      facts ||= n.facts;
    }
    const node = templated || this.model.properties.size > 0 || this.propertyGroups.size > 0;
    const secret = [...this.model.properties.values()].some((p) => p.secret === true)
      || [...this.propertyGroups].some((g) => Object.values(this.model.groups.get(g)!.properties!).some((p) => p.secret === true));
    return { node, certificate: node && secret, inventory: facts };
  }

  /**
   * Null: the content is the node's bundle as it is (no template, no property in play: the fast
   * path). Otherwise the node's own rendering; RenderError when it cannot be generated.
   */
  render(nodeId: string, groups: ReadonlySet<string>, content: Content, input: PolicyNodeInput | undefined, had?: string): NodeContent | 'unchanged' | null {
    const b = this.begin(nodeId, groups, content, input, had);
    return b instanceof PendingNode ? this.finish(b, b.text ?? this.renderText(b)) : b;
  }

  /**
   * render()'s first half, which seals nothing and writes nothing: null or 'unchanged' as
   * render() says, or the node to render. A node rendered on its own is left to the caller
   * (renderText, here or on a render thread); a content whose nodes share one rendering comes
   * with its text. RenderError when it cannot be generated.
   */
  begin(nodeId: string, groups: ReadonlySet<string>, content: Content, input: PolicyNodeInput | undefined, had?: string): PendingNode | 'unchanged' | null {
    const needs = this.needsFor(content);
    const own = hasOwn(input);
    const inPlay = own || this.model.properties.size > 0 || [...groups].some((g) => this.propertyGroups.has(g));
    if (!needs.templated && !inPlay) return null;
    const perNode = own || needs.facts || needs.node;
    const base = this.baseFor(content, groups);
    if (base.problem) throw new RenderError(base.problem);
    // Made from the same content, merge, node and inventory as the stored bundle: nothing to do.
    if (this.unchanged(nodeId, base, input, had)) return 'unchanged';
    // Rendered on its own, its digest is made where it is rendered (on a render thread, mostly).
    if (perNode) return new PendingNode(nodeId, content, input, base, input && this.digests.get(input));
    let cached = this.shared.get(content);
    if (!cached) {
      try {
        cached = this.textOfShared(this.renderFor(nodeId, content, input, base));
      } catch (err) {
        if (!(err instanceof RenderError)) throw err;
        cached = err;
      }
      this.shared.set(content, cached);
    }
    if (cached instanceof RenderError) throw cached;
    return new PendingNode(nodeId, content, input, base, this.digestOf(base, input), cached);
  }

  /** A content's number in this generation, for render threads. */
  contentId(content: Content): number {
    let id = this.contentIds.get(content);
    if (id === undefined) this.contentIds.set(content, (id = this.contentIds.size + 1));
    return id;
  }

  /**
   * A pending node rendered, in this thread (a render thread calls this on its own NodeRendering),
   * with its digest when `digest` (the caller has none yet).
   */
  renderText(p: PendingNode, digest = p.digest === undefined): RenderedText {
    const t = this.textOfShared(this.renderFor(p.nodeId, p.content, p.input, p.base));
    if (digest) t.digest = this.digestOf(p.base, p.input);
    return t;
  }

  /**
   * render()'s second half: the node's secrets sealed to it, its config id and bundle text.
   * `t` from renderText, here or on a render thread (then its `expected` may be one this
   * rendering already holds, by key).
   */
  finish(p: PendingNode, t: RenderedText): NodeContent {
    const nodeId = p.nodeId;
    let expected = this.expectations.get(t.expectedKey);
    if (!expected) {
      if (!t.expected) throw new Error(`render thread sent expectations ${t.expectedKey} by key before sending them`);
      this.expectations.set(t.expectedKey, (expected = frozen(t.expected)));
    }
    const secrets: Record<string, SealedSecret> = {};
    if (t.secrets.length > 0) {
      if (!p.input?.certificate) {
        throw new RenderError({ code: 'ERR_SECRET', message: `secret ${t.secrets[0]![0]} is used, and node ${nodeId} has no pinned certificate to seal it to` });
      }
      for (const [name, plain] of t.secrets) {
        try {
          secrets[name] = this.seals!.seal(nodeId, name, plain, p.input.certificate);
        } catch (err) {
          throw new RenderError({ code: 'ERR_SECRET', message: `secret ${name} cannot be sealed for node ${nodeId}: ${(err as Error).message}`, name });
        }
      }
    }
    this.seals?.keepOnly(nodeId, new Set(t.secrets.map(([name]) => name)));
    let configId = t.configId;
    let tail = t.json;
    if (t.secrets.length > 0) {
      const properties = t.properties ?? {};
      configId = configIdOfCanonical(t.canonical!, { ...(Object.keys(properties).length > 0 && { properties }), secrets });
      tail += `,"secrets":${JSON.stringify(secrets)}`;
    }
    if (configId === undefined) throw new Error(`node ${nodeId} was rendered without its config id`);
    const digest = p.digest ?? t.digest;
    if (digest === undefined) throw new Error(`node ${nodeId} was rendered without the digest of what it was rendered from`);
    this.memo.set(nodeId, { digest, configId });
    return { configId, expected, tail };
  }

  private textOfShared(s: Shared): RenderedText {
    const secrets = [...secretValues(s.merged, s.secrets)];
    const properties = publicProperties(s.merged);
    const some = Object.keys(properties).length > 0;
    const base = { json: some ? `${s.json},"properties":${JSON.stringify(properties)}` : s.json, expectedKey: s.expectedKey, expected: s.expected, secrets };
    if (secrets.length > 0) return { ...base, canonical: s.canonical, properties };
    return { ...base, configId: configIdOfCanonical(s.canonical, some ? { properties } : {}) };
  }

  /** What a node's rendering is made from (RenderMemo): its inventory by when it was received. */
  private digestOf(base: Base, input: PolicyNodeInput | undefined): string {
    const kept = input && this.digests.get(input);
    if (kept !== undefined) return kept;
    const digest = createHash('sha256').update(base.digest)
      .update(JSON.stringify([input?.properties ?? {}, input?.secrets ?? {}, input?.hostname, input?.relay, input?.certificate, input?.inventory_at ?? null])).digest('hex');
    if (input) this.digests.set(input, digest);
    return digest;
  }

  /** Has this generator rendered the node before (so it may find it unchanged)? */
  remembers(nodeId: string): boolean {
    return this.memo.has(nodeId);
  }

  /**
   * Will this node be rendered with its facts? Then its inventory document is read before
   * render() (the generator reads them for a batch at once); a node found unchanged needs none.
   */
  wantsInventory(nodeId: string, groups: ReadonlySet<string>, content: Content, input: PolicyNodeInput | undefined, had?: string): boolean {
    if (!input || !this.needsFor(content).facts) return false;
    const base = this.baseFor(content, groups);
    if (base.problem) return false;
    return !this.unchanged(nodeId, base, input, had);
  }

  /**
   * Made from the same content, merge, node and inventory as its stored bundle? The digest is
   * made only for a node this generator remembers with that bundle (none, the first time).
   */
  private unchanged(nodeId: string, base: Base, input: PolicyNodeInput | undefined, had: string | undefined): boolean {
    const memo = this.memo.get(nodeId);
    return had !== undefined && memo !== undefined && memo.configId === had && memo.digest === this.digestOf(base, input);
  }

  private renderFor(nodeId: string, content: Content, input: PolicyNodeInput | undefined, base: Base): Shared {
    const merged = withNodeLevel(base.merged, input?.properties ?? {}, input?.secrets);
    const data = templateData(nodeId, input ?? { hostname: '', relay: '' }, merged);
    const r = renderDirectives(content.directives, data, this.model, this.needsOf, this.templates);
    // JSON.stringify and canonicalJson of the list, made of each directive's text: a directive
    // left as the content has it is serialised once for all the nodes.
    const parts = r.directives.map((d, i) => this.textOf(d, d === content.directives[i]));
    const expectedKey = JSON.stringify(parts.map((p) => p.key));
    return {
      merged, directives: r.directives, secrets: r.secrets,
      json: `[${parts.map((p) => p.json).join(',')}]`, canonical: `[${parts.map((p) => p.canonical).join(',')}]`, expected: this.expectedOf(expectedKey, parts), expectedKey,
    };
  }

  private textOf(d: BundleDirective, shared: boolean): DirectiveText {
    let t = shared ? this.texts.get(d) : undefined;
    if (!t) {
      const expected = directiveExpectations(d);
      t = { json: JSON.stringify(d), canonical: canonicalJson(d), expected, key: expectationKey(expected) };
      if (shared) this.texts.set(d, t);
    }
    return t;
  }

  /**
   * What a plan shows of a node under this model: its rendered directives, bundle properties and a
   * digest per secret it uses (so a changed secret shows as changed, never its value), or the
   * problem that would keep its bundle from being generated. Nothing is sealed.
   */
  preview(nodeId: string, groups: ReadonlySet<string>, content: Content, input: PolicyNodeInput | undefined): RenderedPreview {
    const needs = this.needsFor(content);
    const own = hasOwn(input);
    const inPlay = own || this.model.properties.size > 0 || [...groups].some((g) => this.propertyGroups.has(g));
    if (!needs.templated && !inPlay) return { directives: content.directives, properties: {}, secrets: {}, bytes: 0 };
    try {
      const base = this.baseFor(content, groups);
      if (base.problem) throw new RenderError(base.problem);
      const s = this.renderFor(nodeId, content, input, base);
      const values = secretValues(s.merged, s.secrets);
      const secrets = Object.fromEntries([...values].map(([n, v]) => [n, createHash('sha256').update(`${n}\u0000${v}`).digest('hex')]));
      const properties = publicProperties(s.merged);
      return { directives: s.directives, properties, secrets, bytes: textBytes(s.json) + jsonBytes(properties) + jsonBytes(secrets) };
    } catch (err) {
      if (!(err instanceof RenderError)) throw err;
      return { directives: content.directives, properties: {}, secrets: {}, problem: err.problem, bytes: jsonBytes(err.problem) };
    }
  }

  /** bundleExpectations of the directives, one list per distinct text (keyed by the directives' keys). */
  private expectedOf(k: string, parts: readonly DirectiveText[]): ExpectedComponent[] {
    const known = this.expectations.get(k);
    if (known) return known;
    const e = frozen([...systemExpectations(), ...parts.flatMap((p) => p.expected)]);
    this.expectations.set(k, e);
    return e;
  }
}
