/**
 * Templates kept in the policy shared folder (`[policy] shared_folder`) that a
 * `file_from_template` directive names by `source` (docs/policy.md, file_from_template). The
 * server reads them when it generates policies and renders them for each node like an inline
 * template (render.ts): the rendered text goes into the node's signed bundle as `content`, never
 * into the shared folder, so relays and their caches never hold per-node data.
 *
 * A file is read again only when its identity, size or times changed (one stat per template per
 * generation otherwise), at most TEMPLATE_LIMITS.maxTemplateBytes, UTF-8. A template that cannot
 * be used (no shared folder, missing, too large, not UTF-8, a path leaving the folder) is kept as
 * its error: the directives naming it fail for the nodes they reach, which keep their bundles.
 * `changed()` says which templates in use changed on disk since they were last seen
 * (template-watch.ts regenerates the nodes using them).
 */
import { createHash } from 'node:crypto';
import { constants } from 'node:fs';
import { open, stat } from 'node:fs/promises';
import { isCapstanError, type ErrorCode } from '@capstan/shared/errors';
import { TEMPLATE_LIMITS } from '@capstan/shared/policy/template';
import { resolveSharedFile } from '@capstan/toolkit/http/shared-folder';
import { TECHNIQUE_METHOD, type BundleDirective, type Directive } from '@capstan/shared/policy/bundle';
import type { Technique, TechniqueCallDef } from '@capstan/shared/policy/technique';
import type { PolicyModel } from './content.js';

/** A template's text and the sha256 of its bytes, or why it cannot be used. */
export type SharedTemplate = { text: string; sha256: string } | { error: { code: ErrorCode; message: string } };

/** The templates one generation renders with, by `source`. */
export type TemplateSet = ReadonlyMap<string, SharedTemplate>;

export const NO_TEMPLATES: TemplateSet = new Map();

/** The shared-folder template a directive renders, if it is a file_from_template naming one. */
export function templateSource(d: Directive | BundleDirective): string | undefined {
  return d.method === 'file_from_template' && typeof d.params.source === 'string' ? d.params.source : undefined;
}

/** The shared-folder template a technique's call renders: a file_from_template call's `source` (a plain path). */
export function callSource(c: Pick<TechniqueCallDef, 'method' | 'params'>): string | undefined {
  return c.method === 'file_from_template' && typeof c.params.source === 'string' ? c.params.source : undefined;
}

/** The technique a directive instantiates, as the model holds it. */
const techniqueOf = (d: Directive | BundleDirective, model: PolicyModel): Technique | undefined =>
  d.method === TECHNIQUE_METHOD ? model.techniques.get((d as { technique?: { id: string } }).technique?.id ?? '') : undefined;

/** The shared-folder templates a directive renders: its own `source`, or its technique's calls'. */
export function directiveSources(d: Directive | BundleDirective, model: PolicyModel): string[] {
  const own = templateSource(d);
  if (own !== undefined) return [own];
  const out: string[] = [];
  for (const c of techniqueOf(d, model)?.calls ?? []) {
    const s = callSource(c);
    if (s !== undefined) out.push(s);
  }
  return out;
}

/** Every source the model's directives and techniques name. */
export function modelSources(model: PolicyModel): Set<string> {
  const out = new Set<string>();
  for (const d of model.directives.values()) if (templateSource(d) !== undefined) out.add(templateSource(d)!);
  for (const t of model.techniques.values()) for (const c of t.calls) if (callSource(c) !== undefined) out.add(callSource(c)!);
  return out;
}

/** What a set of directives' templates are, as text for a digest: a changed file changes it. */
export function templatesDigest(directives: readonly BundleDirective[], templates: TemplateSet, model: PolicyModel): string {
  const parts: string[] = [];
  for (const d of directives) {
    for (const s of directiveSources(d, model)) {
      const t = templates.get(s);
      parts.push(`${s}\u0000${t === undefined ? '-' : 'text' in t ? t.sha256 : `${t.error.code}:${t.error.message}`}`);
    }
  }
  return parts.join('\n');
}

const failed = (code: ErrorCode, message: string): SharedTemplate => ({ error: { code, message } });

export class SharedTemplates {
  /** What was read of each source, and the file's stamp then. */
  private readonly cache = new Map<string, { stamp: string; template: SharedTemplate }>();
  /** The stamp each source in use had when last seen (read or checked by changed()). */
  private readonly seen = new Map<string, string>();
  private readonly maxBytes: number;

  /** `root`: the shared folder ('' when none is configured). */
  constructor(private readonly root: string, opts: { maxBytes?: number } = {}) {
    this.maxBytes = opts.maxBytes ?? TEMPLATE_LIMITS.maxTemplateBytes;
  }

  /** The templates the models' directives name, read now (unchanged files from memory). */
  async read(...models: PolicyModel[]): Promise<TemplateSet> {
    const sources = new Set<string>();
    for (const m of models) modelSources(m).forEach((s) => sources.add(s));
    const out = new Map<string, SharedTemplate>();
    for (const s of [...sources].sort()) out.set(s, await this.one(s));
    // Sources no longer named are forgotten: changed() watches the ones in use.
    for (const s of [...this.cache.keys()]) if (!sources.has(s)) this.cache.delete(s);
    for (const s of [...this.seen.keys()]) if (!sources.has(s)) this.seen.delete(s);
    return out;
  }

  /** Sources in use whose file changed (content, appeared, vanished) since they were last seen. */
  async changed(): Promise<string[]> {
    const out: string[] = [];
    for (const [s, was] of this.seen) {
      const now = (await this.locate(s)).stamp;
      if (now !== was) {
        out.push(s);
        this.seen.set(s, now);
      }
    }
    return out;
  }

  /** Where a source is and its stamp (`missing`, or the error that keeps it from being found). */
  private async locate(source: string): Promise<{ file: string | null; stamp: string; error?: SharedTemplate }> {
    if (this.root === '') return { file: null, stamp: 'no-folder', error: failed('ERR_NOT_FOUND', `shared-folder template ${source}: no shared folder is configured ([policy] shared_folder)`) };
    try {
      const file = await resolveSharedFile(this.root, source.split('/'));
      if (file === null) return { file: null, stamp: 'missing', error: failed('ERR_NOT_FOUND', `shared-folder template ${source} is not a file in the shared folder`) };
      // `file` is the real path: a link retargeted inside the folder changes the stamp too.
      const st = await stat(file, { bigint: true });
      return { file, stamp: `${file}:${st.dev}:${st.ino}:${st.size}:${st.mtimeNs}:${st.ctimeNs}` };
    } catch (err) {
      if (isCapstanError(err)) return { file: null, stamp: `error:${err.code}`, error: failed(err.code as ErrorCode, `shared-folder template ${source}: ${err.message}`) };
      const code = (err as NodeJS.ErrnoException).code ?? 'EIO';
      return { file: null, stamp: `error:${code}`, error: failed('ERR_NOT_FOUND', `shared-folder template ${source} cannot be read (${code})`) };
    }
  }

  private async one(source: string): Promise<SharedTemplate> {
    const at = await this.locate(source);
    this.seen.set(source, at.stamp);
    const kept = this.cache.get(source);
    if (kept && kept.stamp === at.stamp) return kept.template;
    const template = at.error ?? await this.load(source, at.file!);
    this.cache.set(source, { stamp: at.stamp, template });
    return template;
  }

  /** The file's bytes, at most maxBytes (read one past it to know), as UTF-8 text. */
  private async load(source: string, file: string): Promise<SharedTemplate> {
    let bytes: Buffer;
    try {
      // Not through a link put in the file's place since it was resolved.
      const handle = await open(file, constants.O_RDONLY | constants.O_NOFOLLOW);
      try {
        const buf = Buffer.alloc(this.maxBytes + 1);
        let n = 0;
        for (;;) {
          const { bytesRead } = await handle.read(buf, n, buf.length - n, null);
          if (bytesRead === 0) break;
          n += bytesRead;
          if (n === buf.length) break;
        }
        bytes = buf.subarray(0, n);
      } finally {
        await handle.close();
      }
    } catch (err) {
      return failed('ERR_NOT_FOUND', `shared-folder template ${source} cannot be read (${(err as NodeJS.ErrnoException).code ?? 'EIO'})`);
    }
    if (bytes.length > this.maxBytes) return failed('ERR_TEMPLATE_LIMIT', `shared-folder template ${source} is larger than ${this.maxBytes} bytes`);
    let text: string;
    try {
      text = new TextDecoder('utf-8', { fatal: true, ignoreBOM: true }).decode(bytes);
    } catch {
      return failed('ERR_TEMPLATE', `shared-folder template ${source} is not UTF-8 text`);
    }
    return { text, sha256: createHash('sha256').update(bytes).digest('hex') };
  }
}
