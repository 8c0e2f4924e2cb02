/**
 * Templates: mustache (mustache.js, logic-less, no code runs) made strict and bounded, plus
 * RUDDER's `${node.properties[owner]}` / `${node.hostname}` variables. Node data names are the
 * ones of data.ts (docs/policy.md, "Node data").
 *
 * mustache.js parses; its Writer renders, with the methods that read values overridden here so
 * that: a name that resolves to nothing is ERR_TEMPLATE naming it and its line (mustache would
 * print an empty string); only own properties are read (`{{constructor}}` is undefined, never
 * Object.prototype's); partials are refused; and the output, section iterations, tokens rendered
 * and nesting are counted as rendering goes, ERR_TEMPLATE_LIMIT the moment one passes its limit.
 *
 * Two escaping modes: `file` follows the mustache spec (`{{x}}` HTML-escaped, `{{{x}}}` and
 * `{{& x}}` raw), for file templates written for RUDDER/CFEngine; `text` (directive parameters)
 * never escapes. A secret in the data (a SecretRef) renders as its marker (secrets.ts), never as
 * a value: the agent puts the value in.
 */
import Mustache from 'mustache';
import { capstanError } from '../errors.js';
import { child } from './data.js';
import { escapeHtml, MARKER_CLOSE, MARKER_OPEN, secretMarker } from './secrets.js';

export type TemplateMode = 'file' | 'text';

export interface TemplateLimits {
  /** Template text, UTF-8 bytes. */
  maxTemplateBytes: number;
  /** Rendered output, UTF-8 bytes (for renderParams: all the strings of one params object). */
  maxOutputBytes: number;
  /** Sections inside sections. */
  maxDepth: number;
  /** Section bodies rendered: one per list item, one per non-list section. */
  maxIterations: number;
  /** Tokens rendered, all iterations counted: bounds the work of a template that writes nothing. */
  maxSteps: number;
}

export const TEMPLATE_LIMITS: Readonly<TemplateLimits> = Object.freeze({
  maxTemplateBytes: 256 * 1024, maxOutputBytes: 1024 * 1024, maxDepth: 16, maxIterations: 10_000, maxSteps: 1_000_000,
});

export interface RenderOptions {
  mode?: TemplateMode;
  limits?: Partial<TemplateLimits>;
  /** Where in a params object the template is (`template`), named by its errors. */
  field?: string;
}

/** A secret in template data: renders as the marker of secret `name`, which the agent fills in. */
export class SecretRef {
  constructor(readonly name: string) {}
  toJSON(): never {
    throw capstanError('ERR_TEMPLATE', `secret ${this.name} cannot be written as part of a larger value: name the secret itself`);
  }
}

/** What rendering read: root-based paths of every name resolved, and the secrets among them. */
export interface RenderTrace {
  reads: Set<string>;
  secrets: Set<string>;
}

interface State extends RenderTrace {
  mode: TemplateMode;
  limits: TemplateLimits;
  root: unknown;
  template: string;
  out: number;
  iterations: number;
  steps: number;
  /** Where in the params object the template is (`content`, `args.0`), for messages. */
  field?: string;
  token?: Token;
}

type Token = [string, string, number, number, ...unknown[]];

const lineAt = (text: string, pos: number) => text.slice(0, Math.max(0, pos)).split('\n').length;

function fail(st: State, code: 'ERR_TEMPLATE' | 'ERR_TEMPLATE_LIMIT', what: string, pos = st.token?.[2], details: Record<string, unknown> = {}): never {
  const line = pos === undefined ? undefined : lineAt(st.template, pos);
  const where = [st.field === undefined ? '' : `params.${st.field}`, line === undefined ? '' : `line ${line}`].filter(Boolean).join(', ');
  throw capstanError(code, `template${where ? ` (${where})` : ''}: ${what}`, { details: { ...details, ...(line !== undefined && { line }), ...(st.field !== undefined && { field: st.field }) } });
}

/** The context stack, strict: only own data, and a name that resolves to nothing is an error. */
class StrictContext extends Mustache.Context {
  constructor(view: unknown, parent: StrictContext | undefined, readonly path: string, private readonly st: State) {
    super(view, parent);
  }

  override push(view: unknown): StrictContext {
    return this.pushAt(view, this.path);
  }

  pushAt(view: unknown, path: string): StrictContext {
    return new StrictContext(view, this, path, this.st);
  }

  /** The mustache spec's rule: the first name up the stack, the rest down from what it found. */
  override lookup(name: string): unknown {
    const st = this.st;
    if (name === '.') {
      st.reads.add(this.path || '.');
      return this.view;
    }
    const [first, ...rest] = name.split('.');
    let ctx: StrictContext | undefined = this;
    let value: unknown;
    while (ctx && (value = child(ctx.view, first!)) === undefined) ctx = ctx.parent as StrictContext | undefined;
    if (!ctx) fail(st, 'ERR_TEMPLATE', `${name} is not defined`, undefined, { name });
    for (const seg of rest) {
      if (value instanceof SecretRef) fail(st, 'ERR_TEMPLATE', `${name}: ${value.name} is a secret, it has no fields`, undefined, { name });
      value = child(value, seg);
      if (value === undefined) fail(st, 'ERR_TEMPLATE', `${name} is not defined`, undefined, { name });
    }
    const path = ctx.path ? `${ctx.path}.${name}` : name;
    st.reads.add(path);
    if (value instanceof SecretRef) st.secrets.add(value.name);
    return value;
  }
}

/** `${node.properties[dc][dns]}`, `${node.properties.owner}`, `${node.hostname}`: RUDDER's form. */
const RUDDER_VAR = /\$\{node((?:\.[A-Za-z0-9_-]+|\[[^[\]\r\n]{1,255}\])+)\}/g;

class StrictWriter extends Mustache.Writer {
  constructor(private readonly st: State) {
    super();
    // Rendering keeps no cache: a long-running server renders many templates once each.
    (this as unknown as { templateCache: unknown }).templateCache = undefined;
  }

  private emit(text: string): string {
    const st = this.st;
    st.out += Buffer.byteLength(text);
    if (st.out > st.limits.maxOutputBytes) fail(st, 'ERR_TEMPLATE_LIMIT', `output larger than ${st.limits.maxOutputBytes} bytes`, undefined, { limit: 'maxOutputBytes' });
    return text;
  }

  /** A value as text: strings as they are, other JSON compact, a secret as its marker. */
  private valueText(v: unknown, name: string, escape: boolean): string {
    if (v instanceof SecretRef) return this.emit(secretMarker(v.name, escape ? 'html' : 'raw'));
    if (v === null) return '';
    const text = typeof v === 'string' ? v : JSON.stringify(v);
    if (text.includes(MARKER_OPEN) || text.includes(MARKER_CLOSE)) {
      fail(this.st, 'ERR_TEMPLATE', `the value of ${name} holds U+FFF9 or U+FFFB, which only secret markers may hold`, undefined, { name });
    }
    return this.emit(escape ? escapeHtml(text) : text);
  }

  override renderTokens(tokens: string[][], context: Mustache.Context, partials?: Mustache.PartialsOrLookupFn, original?: string, config?: Mustache.RenderOptions): string {
    const st = this.st;
    st.steps += tokens.length;
    if (st.steps > st.limits.maxSteps) fail(st, 'ERR_TEMPLATE_LIMIT', `more than ${st.limits.maxSteps} tokens rendered`, undefined, { limit: 'maxSteps' });
    return super.renderTokens(tokens, context, partials, original, config);
  }

  private iterate(token: Token): void {
    const st = this.st;
    st.token = token;
    if (++st.iterations > st.limits.maxIterations) fail(st, 'ERR_TEMPLATE_LIMIT', `more than ${st.limits.maxIterations} section iterations`, undefined, { limit: 'maxIterations' });
  }

  override renderSection(token: string[], context: Mustache.Context, partials?: Mustache.PartialsOrLookupFn, original?: string, config?: Mustache.RenderOptions): string {
    const t = token as unknown as Token;
    const ctx = context as StrictContext;
    const body = t[4] as string[][];
    this.st.token = t;
    const value = ctx.lookup(t[1]);
    if (value instanceof SecretRef) fail(this.st, 'ERR_TEMPLATE', `${t[1]} is a secret: it cannot open a section`, undefined, { name: t[1] });
    if (!value || (Array.isArray(value) && value.length === 0)) return '';
    const base = t[1] === '.' ? ctx.path : ctx.path ? `${ctx.path}.${t[1]}` : t[1];
    if (Array.isArray(value)) {
      let out = '';
      value.forEach((item, i) => {
        this.iterate(t);
        out += this.renderTokens(body, ctx.pushAt(item, `${base}.${i}`), partials, original, config);
      });
      return out;
    }
    this.iterate(t);
    // `true` opens the section in the same context; an object, a string or a number is pushed.
    return this.renderTokens(body, value === true ? ctx : ctx.pushAt(value, base), partials, original, config);
  }

  override renderInverted(token: string[], context: Mustache.Context, partials?: Mustache.PartialsOrLookupFn, original?: string, config?: Mustache.RenderOptions): string {
    const t = token as unknown as Token;
    this.st.token = t;
    const value = context.lookup(t[1]);
    if (value && !(Array.isArray(value) && value.length === 0)) return '';
    this.iterate(t);
    return this.renderTokens(t[4] as string[][], context, partials, original, config);
  }

  override renderPartial(token: string[]): string {
    fail(this.st, 'ERR_TEMPLATE', `partials are not available ({{> ${token[1]}}})`, Number(token[2]));
  }

  override unescapedValue(token: string[], context: Mustache.Context): string {
    this.st.token = token as unknown as Token;
    return this.valueText(context.lookup(token[1]!), token[1]!, false);
  }

  override escapedValue(token: string[], context: Mustache.Context): string {
    this.st.token = token as unknown as Token;
    return this.valueText(context.lookup(token[1]!), token[1]!, this.st.mode === 'file');
  }

  override rawValue(token: string[]): string {
    const st = this.st;
    const text = token[1]!;
    const start = Number(token[2]);
    if (text.includes(MARKER_OPEN) || text.includes(MARKER_CLOSE)) {
      fail(st, 'ERR_TEMPLATE', 'the template holds U+FFF9 or U+FFFB, which only secret markers may hold', start + Math.max(text.indexOf(MARKER_OPEN), text.indexOf(MARKER_CLOSE)));
    }
    if (!text.includes('${node')) return this.emit(text);
    let out = '';
    let last = 0;
    for (const m of text.matchAll(RUDDER_VAR)) {
      out += this.emit(text.slice(last, m.index));
      last = m.index + m[0].length;
      const segs = [...m[1]!.matchAll(/\.([A-Za-z0-9_-]+)|\[([^[\]]+)\]/g)].map((s) => (s[1] ?? s[2])!);
      const name = ['node', ...segs].join('.');
      let value: unknown = child(st.root, 'node');
      for (const s of segs) value = value instanceof SecretRef ? undefined : child(value, s);
      if (value === undefined) fail(st, 'ERR_TEMPLATE', `${m[0]} is not defined`, start + m.index, { name });
      st.reads.add(name);
      if (value instanceof SecretRef) st.secrets.add(value.name);
      out += this.valueText(value, name, false);
    }
    return out + this.emit(text.slice(last));
  }
}

/** A template parsed once: its tokens, its UTF-8 size, how deep its sections nest, whether it holds a partial. */
interface Parsed {
  tokens: Token[];
  bytes: number;
  depth: number;
  partial: boolean;
}

/**
 * Parsed templates by text, most recently used last, bounded by count and by the size of the
 * texts held: a server renders the same few templates for every node, and one edited often or
 * only previewed is dropped in time (mustache.js's own cache, which keeps all, is switched off).
 */
export const PARSE_CACHE_LIMITS = Object.freeze({ maxEntries: 512, maxBytes: 16 * 1024 * 1024 });
let cacheLimits: typeof PARSE_CACHE_LIMITS = PARSE_CACHE_LIMITS;
/** Bounds the parse cache otherwise (a process with less memory to spare); returns the bounds before. */
export function setParseCacheLimits(limits: typeof PARSE_CACHE_LIMITS): typeof PARSE_CACHE_LIMITS {
  [limits, cacheLimits] = [cacheLimits, Object.freeze({ ...limits })];
  trimCache();
  return limits;
}
(Mustache as unknown as { templateCache: unknown }).templateCache = undefined;
const parsedCache = new Map<string, Parsed>();
let parsedBytes = 0;

function remember(text: string, p: Parsed): void {
  if (p.bytes > cacheLimits.maxBytes) return;
  parsedCache.set(text, p);
  parsedBytes += p.bytes;
  trimCache();
}
function trimCache(): void {
  for (const [k, v] of parsedCache) {
    if (parsedCache.size <= cacheLimits.maxEntries && parsedBytes <= cacheLimits.maxBytes) break;
    parsedCache.delete(k);
    parsedBytes -= v.bytes;
  }
}

/** How many parsed templates are held, and their texts' bytes (for tests and metrics). */
export function parseCacheSize(): { entries: number; bytes: number } {
  return { entries: parsedCache.size, bytes: parsedBytes };
}

/** How deep a parse looks: a template nested deeper is checked against the caller's limit at each use (refuse). */
const DEPTH_WALKED = 1024;

function parseOnce(st: State): Parsed {
  const hit = parsedCache.get(st.template);
  if (hit) {
    parsedCache.delete(st.template);
    parsedCache.set(st.template, hit);
    return hit;
  }
  const bytes = Buffer.byteLength(st.template);
  if (bytes > st.limits.maxTemplateBytes) return { tokens: [], bytes, depth: 0, partial: false };
  let tokens: Token[];
  try {
    tokens = Mustache.parse(st.template) as unknown as Token[];
  } catch (err) {
    // mustache.js says where: "Unclosed tag at 12".
    const at = /at (\d+)/.exec((err as Error).message);
    fail(st, 'ERR_TEMPLATE', (err as Error).message.replace(/ at \d+$/, ''), at ? Number(at[1]) : undefined);
  }
  const p: Parsed = { tokens, bytes, depth: 0, partial: false };
  // Past DEPTH_WALKED the nesting counts as infinite: no template walks the stack out here.
  const walk = (list: Token[], depth: number) => {
    for (const tok of list) {
      if (tok[0] === '>') p.partial = true;
      if (tok[0] === '#' || tok[0] === '^') {
        if (depth + 1 > DEPTH_WALKED) {
          p.depth = Infinity;
          continue;
        }
        p.depth = Math.max(p.depth, depth + 1);
        walk(tok[4] as Token[], depth + 1);
      }
    }
  };
  walk(tokens, 0);
  remember(st.template, p);
  return p;
}

function parseStrict(st: State): string[][] {
  const p = parseOnce(st);
  if (p.bytes > st.limits.maxTemplateBytes) {
    fail(st, 'ERR_TEMPLATE_LIMIT', `template larger than ${st.limits.maxTemplateBytes} bytes`, undefined, { limit: 'maxTemplateBytes' });
  }
  if (p.partial || p.depth > st.limits.maxDepth) refuse(st, p.tokens, 0);
  return p.tokens as unknown as string[][];
}

/** The first partial, or section nested deeper than the limit, in the template's order: refused. */
function refuse(st: State, list: Token[], depth: number): void {
  for (const tok of list) {
    if (tok[0] === '>') fail(st, 'ERR_TEMPLATE', `partials are not available ({{> ${tok[1]}}})`, tok[2]);
    if (tok[0] === '#' || tok[0] === '^') {
      if (depth + 1 > st.limits.maxDepth) fail(st, 'ERR_TEMPLATE_LIMIT', `sections nested deeper than ${st.limits.maxDepth}`, tok[2], { limit: 'maxDepth' });
      refuse(st, tok[4] as Token[], depth + 1);
    }
  }
}

function newState(template: string, data: unknown, opts: RenderOptions, trace?: RenderTrace): State {
  return {
    mode: opts.mode ?? 'text', limits: { ...TEMPLATE_LIMITS, ...opts.limits }, root: data, template,
    out: 0, iterations: 0, steps: 0, reads: trace?.reads ?? new Set(), secrets: trace?.secrets ?? new Set(),
    ...(opts.field !== undefined && { field: opts.field }),
  };
}

function run(st: State): string {
  const tokens = parseStrict(st);
  const writer = new StrictWriter(st);
  return writer.renderTokens(tokens, new StrictContext(st.root, undefined, '', st), undefined, st.template);
}

/** Render `text` with `data`; ERR_TEMPLATE or ERR_TEMPLATE_LIMIT (module comment) on anything else. */
export function renderTemplate(text: string, data: unknown, opts: RenderOptions = {}): string {
  if (typeof text !== 'string') throw capstanError('ERR_TEMPLATE', 'a template must be a string');
  return run(newState(text, data, opts));
}

/** A string that is one tag and nothing else: its value keeps its type (a list stays a list). */
const WHOLE_TAG = /^\{\{(?:\{\s*([^{}\s]+)\s*\}|&\s*([^{}\s]+)\s*|\s*([^{}\s!#^/>=&][^{}\s]*)\s*)\}\}$/;

export interface RenderedParams {
  params: Record<string, unknown>;
  /** Every name read, as a root-based path (`node.properties.owner`, `params.port`), sorted. */
  reads: string[];
  /** The secrets used, by name, sorted. */
  secrets: string[];
}

/**
 * Render every string inside a directive's params (deep; keys are not rendered), in `text` mode.
 * A string that is exactly one tag (`"{{params.args}}"`) takes its value's type, so a list
 * parameter can fill a list. The output limit counts all the strings together.
 */
export function renderParams(params: Record<string, unknown>, data: unknown, opts: Omit<RenderOptions, 'mode'> = {}): RenderedParams {
  const trace: RenderTrace = { reads: new Set(), secrets: new Set() };
  const shared = newState('', data, { ...opts, mode: 'text' }, trace);
  const walk = (v: unknown, field: string): unknown => {
    if (typeof v === 'string') {
      if (plainWithin(v, shared)) return v;
      const st: State = { ...shared, template: v, field, token: undefined };
      const whole = WHOLE_TAG.exec(v);
      let out: unknown;
      if (whole) {
        const name = (whole[1] ?? whole[2] ?? whole[3])!;
        const value = new StrictContext(data, undefined, '', st).lookup(name);
        out = value instanceof SecretRef || typeof value === 'string' ? run(st) : structuredCopy(value, st, name);
      } else out = run(st);
      shared.out = st.out;
      shared.iterations = st.iterations;
      shared.steps = st.steps;
      return out;
    }
    if (Array.isArray(v)) return v.map((x, i) => walk(x, field ? `${field}.${i}` : String(i)));
    if (v !== null && typeof v === 'object') return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, walk(x, field ? `${field}.${k}` : k)]));
    return v;
  };
  const out = walk(params, '') as Record<string, unknown>;
  return { params: out, reads: [...trace.reads].sort(), secrets: [...trace.secrets].sort() };
}

/**
 * A string with no tag renders as itself: mustache makes it one text token (none when empty),
 * counted as rendering would count it. True when it is such a string within every limit (its
 * counts are then added to `st`); anything else goes through the renderer, which says what is wrong.
 */
function plainWithin(v: string, st: State): boolean {
  if (v.includes('{{') || v.includes('${node') || v.includes(MARKER_OPEN) || v.includes(MARKER_CLOSE)) return false;
  const bytes = Buffer.byteLength(v);
  const steps = st.steps + (v.length > 0 ? 1 : 0);
  if (bytes > st.limits.maxTemplateBytes || steps > st.limits.maxSteps || st.out + bytes > st.limits.maxOutputBytes) return false;
  st.steps = steps;
  st.out += bytes;
  return true;
}

/** A typed value put in whole: a JSON copy, counted in the output, with no secret or marker inside. */
function structuredCopy(value: unknown, st: State, name: string): unknown {
  const text = JSON.stringify(value) ?? 'null'; // a SecretRef inside throws (toJSON)
  if (text.includes(MARKER_OPEN) || text.includes(MARKER_CLOSE)) {
    fail(st, 'ERR_TEMPLATE', `the value of ${name} holds U+FFF9 or U+FFFB, which only secret markers may hold`, 0, { name });
  }
  st.out += Buffer.byteLength(text);
  if (st.out > st.limits.maxOutputBytes) fail(st, 'ERR_TEMPLATE_LIMIT', `output larger than ${st.limits.maxOutputBytes} bytes`, 0, { limit: 'maxOutputBytes' });
  return JSON.parse(text) as unknown;
}

/**
 * The names a template refers to, as written (`params.port`, `item`, `node.properties.owner`),
 * with the `${node…}` variables as dotted paths: for checks at save time. Throws as rendering
 * would for a template that does not parse or is beyond the limits.
 */
export function templateNames(text: string, opts: Omit<RenderOptions, 'mode'> = {}): string[] {
  const st = newState(text, {}, opts);
  const names = new Set<string>();
  const walk = (list: Token[]) => {
    for (const tok of list) {
      if (tok[0] === 'name' || tok[0] === '&' || tok[0] === '#' || tok[0] === '^') names.add(tok[1]);
      if (tok[0] === '#' || tok[0] === '^') walk(tok[4] as Token[]);
      if (tok[0] === 'text') {
        for (const m of tok[1].matchAll(RUDDER_VAR)) {
          names.add(['node', ...[...m[1]!.matchAll(/\.([A-Za-z0-9_-]+)|\[([^[\]]+)\]/g)].map((s) => (s[1] ?? s[2])!)].join('.'));
        }
      }
    }
  };
  walk(parseStrict(st) as unknown as Token[]);
  return [...names];
}
