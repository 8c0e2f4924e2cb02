/**
 * Parameter schemas of the file-writing methods (docs/policy.md, "File-writing methods"): a file
 * from a server-rendered template, managed blocks, key/value and INI settings, regex replacement
 * and symbolic links here; cron, SSH keys, sudoers, systemd units and the time zone in
 * ./system-files.ts; package repositories in ./repos.ts. The agent's side is in
 * agent/src/methods/ (write.ts, edit-methods.ts, links.ts, system-files.ts, repos.ts).
 *
 * Imported through `@capstan/shared/policy/methods` (see ./writer.ts).
 */
import { dFlag, dList, dMap, dNum, dStr, pathParam, SHOW_DIFF, WRITER_PARAMS } from '../params.js';
import { paramError, showDiff, str, type MethodSpec, type ShowDiffParam } from '../methods.js';
import { REPO_SPECS } from './repos.js';
import { SYSTEM_FILE_SPECS } from './system-files.js';
import { bool, line, named, one, oneOf, optLine, record, regex, sharedPath, text, writerParams, type WriterParams } from './writer.js';

export * from './writer.js';
export * from './system-files.js';
export * from './repos.js';

export interface FileFromTemplateParams extends WriterParams {
  path: string;
  /** The rendered text; absent in the directive as saved, set by the server in each node's bundle. */
  content?: string;
  /** Informational: the inline mustache template the content was rendered from. */
  template?: string;
  /** Informational: the shared-folder path of the template the content was rendered from. */
  source?: string;
  /** Informational, set by the server with `content`: the sha256 of the shared-folder template file it rendered. */
  source_sha256?: string;
}

/**
 * The admin saves `template` (inline mustache) or `source` (a shared-folder path) and no
 * `content`; the server renders it per node into `content` and keeps the other for display.
 */
export const fileFromTemplateSpec: MethodSpec<FileFromTemplateParams> = {
  name: 'file_from_template',
  params: [pathParam(), dStr('content', 'The rendered text: the server sets it in each node\'s bundle; an admin gives template or source.', { multiline: true, internal: true }), dStr('template', 'An inline mustache template, rendered on the server for each node (template or source).', { multiline: true, example: 'server {{node.hostname}}\n' }), dStr('source', 'A template in the shared folder, rendered on the server for each node.', { example: 'templates/app.conf.mustache' }), dStr('source_sha256', 'The sha256 of the shared-folder template the server rendered: it sets it in each node\'s bundle.', { internal: true }), ...WRITER_PARAMS],
  example: { path: '/etc/app.conf', template: 'server {{node.hostname}}\n' },
  validate: (p) => {
    const m = 'file_from_template';
    const out: FileFromTemplateParams = { path: str(m, p, 'path', { absolute: true }), ...writerParams(m, p) };
    if (p.content !== undefined) out.content = text(m, p, 'content');
    if (p.template !== undefined) out.template = text(m, p, 'template');
    const source = sharedPath(m, p, 'source');
    if (source !== undefined) out.source = source;
    if (p.source_sha256 !== undefined) {
      if (source === undefined) paramError(m, 'source_sha256', 'is only given with source');
      out.source_sha256 = named(m, p, 'source_sha256', /^[0-9a-f]{64}$/, 'a sha256 in lower-case hex');
    }
    if (out.template !== undefined && source !== undefined) paramError(m, 'source', 'and template cannot both be given');
    if (out.content === undefined && out.template === undefined && source === undefined) paramError(m, 'template', 'or source (or the rendered content) is required');
    return out;
  },
  components: (p) => one('File from template', p.path),
};

export interface FileBlockParams extends WriterParams {
  path: string;
  name: string;
  /** The block's lines (without markers). */
  lines: string[];
  state: 'present' | 'absent';
  marker_begin: string;
  marker_end: string;
  insert_after?: string;
  insert_before?: string;
}

const BLOCK_NAME = /^[A-Za-z0-9](?:[A-Za-z0-9 ._:@/+-]{0,126}[A-Za-z0-9._:@/+-])?$/;

/** The block's text as lines: one final newline is not an empty last line. */
export function blockLines(block: string): string[] {
  if (block === '' || block === '\n') return [];
  return block.replace(/\r?\n$/, '').split(/\r?\n/);
}

export const fileBlockPresentSpec: MethodSpec<FileBlockParams> = {
  name: 'file_block_present',
  params: [pathParam(), dStr('name', 'The block\'s name, in its marker lines.', { required: true, example: 'limits' }), dStr('block', 'The block\'s lines.', { multiline: true, example: 'a 1\nb 2\n' }), dStr('state', 'present: the block is in the file; absent: it is not.', { values: ['present', 'absent'], default: 'present' }), dStr('marker_begin', 'The line opening the block.', { example: '# BEGIN limits' }), dStr('marker_end', 'The line closing the block.', { example: '# END limits' }), dStr('insert_after', 'A regular expression: a new block goes after the last line matching it.', { example: '^# limits' }), dStr('insert_before', 'A regular expression: a new block goes before the first line matching it.'), ...WRITER_PARAMS],
  example: { path: '/etc/app.conf', name: 'limits', block: 'a 1\n' },
  validate: (p) => {
    const m = 'file_block_present';
    const name = named(m, p, 'name', BLOCK_NAME, 'a name of 1 to 128 letters, digits, spaces and . _ : @ / + -');
    const state = oneOf(m, p, 'state', ['present', 'absent'] as const, 'present');
    const lines = p.block === undefined && state === 'absent' ? [] : blockLines(text(m, p, 'block', 1024 * 1024));
    const marker_begin = optLine(m, p, 'marker_begin') ?? `# BEGIN CAPSTAN MANAGED BLOCK ${name}`;
    const marker_end = optLine(m, p, 'marker_end') ?? `# END CAPSTAN MANAGED BLOCK ${name}`;
    if (marker_begin.trim() === marker_end.trim()) paramError(m, 'marker_end', 'must differ from marker_begin');
    if (lines.some((l) => l.trim() === marker_begin.trim() || l.trim() === marker_end.trim())) paramError(m, 'block', 'must not contain its marker lines');
    const insert_after = regex(m, p, 'insert_after');
    const insert_before = regex(m, p, 'insert_before');
    if (insert_after !== undefined && insert_before !== undefined) paramError(m, 'insert_before', 'and insert_after cannot both be given');
    return {
      path: str(m, p, 'path', { absolute: true }), name, lines, state, marker_begin, marker_end,
      ...(insert_after !== undefined ? { insert_after } : {}), ...(insert_before !== undefined ? { insert_before } : {}), ...writerParams(m, p),
    };
  },
  components: (p) => one('File block', `${p.path}: ${p.name}`),
};

export interface FileKeyValueParams extends WriterParams {
  path: string;
  values: Record<string, string>;
  absent: string[];
  separator: string;
  comment: string;
  case_insensitive: boolean;
  key_fields: number;
  insert_before?: string;
}

/** The part of a separator that separates: "=" for " = ", "" (any run of blanks) for " ". */
export const separatorCore = (sep: string) => sep.trim();

export const MAX_KEY_FIELDS = 8;

export const fileKeyValueSpec: MethodSpec<FileKeyValueParams> = {
  name: 'file_key_value',
  params: [pathParam(), dMap('values', 'Keys and the values they must have.', { example: { PermitRootLogin: 'no' } }), dList('absent', 'Keys that must not be set.', { example: ['X11Forwarding'] }), dStr('separator', 'Between key and value: " " (any blanks), "=", " = "…', { default: ' ', example: ' ' }), dStr('comment', 'The comment character.', { default: '#', example: '#' }), dFlag('case_insensitive', 'Keys compare case-insensitively.', { default: false }), dNum('key_fields', 'Blank-separated fields that make the key (limits.conf: 3).', { default: 1, example: 1 }), dStr('insert_before', 'A regular expression: new keys go before the first line matching it.', { example: '^Match ' }), ...WRITER_PARAMS],
  example: { path: '/etc/ssh/sshd_config', values: { PermitRootLogin: 'no' } },
  validate: (p) => {
    const m = 'file_key_value';
    const separator = p.separator === undefined ? ' ' : line(m, p, 'separator', { max: 16 });
    const comment = p.comment === undefined ? '#' : line(m, p, 'comment', { max: 4 });
    if (/\s/.test(comment)) paramError(m, 'comment', 'must not contain blanks');
    const core = separatorCore(separator);
    if (core !== '' && core.includes(comment)) paramError(m, 'separator', 'must not contain the comment character');
    const kf = p.key_fields ?? 1;
    if (typeof kf !== 'number' || !Number.isInteger(kf) || kf < 1 || kf > MAX_KEY_FIELDS) paramError(m, 'key_fields', `must be a whole number from 1 to ${MAX_KEY_FIELDS}`);
    if (kf > 1 && core !== '') paramError(m, 'key_fields', 'above 1 needs a blank separator (" "), as in limits.conf');
    const checkKey = (k: string, at: string): string => {
      const fields = k.split(/[ \t]+/);
      if (k === '' || /[\r\n\0]/.test(k) || k !== k.trim() || k.startsWith(comment)) paramError(m, at, 'must be a key on one line, not commented, without surrounding blanks');
      if (core === '' && fields.length !== kf) paramError(m, at, `must be ${kf} blank-separated field${kf > 1 ? 's' : ''} (key_fields)`);
      if (core !== '' && k.includes(core)) paramError(m, at, `must not contain the separator ${JSON.stringify(core)}`);
      return k;
    };
    const values = record(m, p, 'values', (k, v, at) => {
      checkKey(k, at);
      if (typeof v !== 'string' && typeof v !== 'number') paramError(m, at, 'must be a string or a number');
      const s = String(v);
      if (/[\r\n\0]/.test(s) || s !== s.trim()) paramError(m, at, 'must be one line without surrounding blanks');
      if (s === '' && core === '') paramError(m, at, 'must not be empty with a blank separator');
      return s;
    }) ?? {};
    const rawAbsent = p.absent;
    if (rawAbsent !== undefined && (!Array.isArray(rawAbsent) || rawAbsent.length > 256 || rawAbsent.some((k) => typeof k !== 'string'))) paramError(m, 'absent', 'must be a list of keys');
    const absent = ((rawAbsent ?? []) as string[]).map((k, i) => checkKey(k, `absent.${i}`));
    const case_insensitive = bool(m, p, 'case_insensitive', false);
    const norm = (k: string) => (case_insensitive ? k.toLowerCase() : k).split(/[ \t]+/).join(' ');
    const set = new Set(Object.keys(values).map(norm));
    if (set.size !== Object.keys(values).length) paramError(m, 'values', 'names a key twice (keys compare case-insensitively)');
    const clash = absent.findIndex((k) => set.has(norm(k)));
    if (clash >= 0) paramError(m, `absent.${clash}`, 'is also in values');
    if (set.size === 0 && absent.length === 0) paramError(m, 'values', 'or absent must name at least one key');
    const insert_before = regex(m, p, 'insert_before');
    return {
      path: str(m, p, 'path', { absolute: true }), values, absent, separator, comment, case_insensitive, key_fields: kf as number,
      ...(insert_before !== undefined ? { insert_before } : {}), ...writerParams(m, p),
    };
  },
  components: (p) => one('File key values', p.path),
};

export interface IniValueParams extends WriterParams {
  path: string;
  section: string;
  key: string;
  value?: string;
  state: 'present' | 'absent';
  separator: string;
}

export const iniValueSpec: MethodSpec<IniValueParams> = {
  name: 'ini_value',
  params: [pathParam(), dStr('section', 'The section ("" for keys before any section).', { required: true, example: 'main' }), dStr('key', 'The key.', { required: true, example: 'workers' }), dStr('value', 'Its value (state present).', { example: '4' }), dStr('state', 'present: the key has the value; absent: the key is not set.', { values: ['present', 'absent'], default: 'present' }), dStr('separator', '"=" or ":" with optional blanks.', { default: ' = ', example: '=' }), ...WRITER_PARAMS],
  example: { path: '/etc/app.ini', section: 'main', key: 'workers', value: '4' },
  validate: (p) => {
    const m = 'ini_value';
    const section = line(m, p, 'section', { empty: true, max: 256 });
    if (section !== section.trim() || /[[\]]/.test(section)) paramError(m, 'section', 'must be a section name without brackets or surrounding blanks ("" for keys before any section)');
    const separator = p.separator === undefined ? ' = ' : line(m, p, 'separator', { max: 16 });
    const core = separatorCore(separator);
    if (core !== '=' && core !== ':') paramError(m, 'separator', 'must be "=" or ":" with optional blanks around it');
    const key = line(m, p, 'key', { max: 256 });
    if (key !== key.trim() || key.includes('=') || key.includes(':') || /^[[;#]/.test(key)) paramError(m, 'key', 'must be a key without = or :, not starting with [ ; or #, without surrounding blanks');
    const state = oneOf(m, p, 'state', ['present', 'absent'] as const, 'present');
    let value: string | undefined;
    if (state === 'present') {
      if (typeof p.value !== 'string' && typeof p.value !== 'number') paramError(m, 'value', 'must be a string or a number (or state "absent")');
      value = String(p.value);
      if (/[\r\n\0]/.test(value) || value !== value.trim()) paramError(m, 'value', 'must be one line without surrounding blanks');
    } else if (p.value !== undefined) paramError(m, 'value', 'must not be given with state "absent"');
    return { path: str(m, p, 'path', { absolute: true }), section, key, state, separator, ...(value !== undefined ? { value } : {}), ...writerParams(m, p) };
  },
  components: (p) => one('INI value', `${p.path}: ${p.section === '' ? '' : `[${p.section}] `}${p.key}`),
};

export interface FileReplaceParams extends WriterParams {
  path: string;
  pattern: string;
  replacement: string;
  /** The flags the pattern is compiled with, `g` always added. */
  flags: string;
}

/** i, m, s, u: what changes how a pattern matches; `g` is always on, `y` and `d` do not apply. */
export const REPLACE_FLAGS = /^(?!.*(.).*\1)[imsu]*$/;

export const fileReplaceSpec: MethodSpec<FileReplaceParams> = {
  name: 'file_replace',
  params: [pathParam(), dStr('pattern', 'A regular expression; every match is replaced.', { required: true, example: '^Listen 80$' }), dStr('replacement', 'What replaces each match ($1… for groups).', { required: true, example: 'Listen 8080' }), dStr('flags', 'Flags among i, m, s, u (g is always on).', { default: 'm', example: 'mi' }), ...WRITER_PARAMS],
  example: { path: '/etc/app.conf', pattern: '^Listen 80$', replacement: 'Listen 8080' },
  validate: (p) => {
    const m = 'file_replace';
    const flags = p.flags === undefined ? 'm' : p.flags;
    if (typeof flags !== 'string' || !REPLACE_FLAGS.test(flags)) paramError(m, 'flags', 'must be made of the flags i, m, s and u, each at most once');
    const pattern = regex(m, p, 'pattern', flags);
    if (pattern === undefined) return paramError(m, 'pattern', 'is required');
    // A pattern that matches nothing at all matches everywhere: every run would insert again.
    if (new RegExp(pattern, flags).test('')) paramError(m, 'pattern', 'must not match the empty string');
    const replacement = text(m, p, 'replacement', 64 * 1024);
    return { path: str(m, p, 'path', { absolute: true }), pattern, replacement, flags, ...writerParams(m, p) };
  },
  components: (p) => one('File replace', `${p.path}: ${p.pattern}`),
};

export interface SymlinkParams extends ShowDiffParam {
  path: string;
  target: string;
  force: boolean;
}

export const symlinkPresentSpec: MethodSpec<SymlinkParams> = {
  name: 'symlink_present',
  params: [pathParam('The link'), dStr('target', 'What the link points to.', { required: true, example: '/opt/app/current' }), dFlag('force', 'Replace a file that is in the way.', { default: false }), SHOW_DIFF],
  example: { path: '/opt/app/live', target: '/opt/app/current' },
  validate: (p) => {
    const m = 'symlink_present';
    const target = str(m, p, 'target');
    if (target.length > 4096) paramError(m, 'target', 'must be at most 4096 characters');
    return { path: str(m, p, 'path', { absolute: true }).replace(/(.)\/+$/, '$1'), target, force: bool(m, p, 'force', false), ...showDiff(m, p) };
  },
  components: (p) => one('Symlink', p.path),
};

export const symlinkAbsentSpec: MethodSpec<{ path: string } & ShowDiffParam> = {
  name: 'symlink_absent',
  params: [pathParam('The link to remove'), SHOW_DIFF],
  example: { path: '/opt/app/live' },
  validate: (p) => ({ path: str('symlink_absent', p, 'path', { absolute: true }).replace(/(.)\/+$/, '$1'), ...showDiff('symlink_absent', p) }),
  components: (p) => one('Symlink absent', p.path),
};

export const FILE_METHOD_SPECS: ReadonlyArray<MethodSpec<any>> = [
  fileFromTemplateSpec, fileBlockPresentSpec, fileKeyValueSpec, iniValueSpec, fileReplaceSpec, symlinkPresentSpec, symlinkAbsentSpec,
  ...SYSTEM_FILE_SPECS, ...REPO_SPECS,
];
