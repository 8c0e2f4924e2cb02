/**
 * The generic methods' parameter schemas and the components each reports. Shared so that the
 * server refuses a directive with bad parameters when an admin saves it (400 naming the field),
 * and computes the components it expects for compliance, with exactly the agent's rules.
 */
import { capstanError } from '../errors.js';
import { dFlag, dList, dMap, dNum, dStr, MODE, pathParam, SHOW_DIFF, type ParamDoc } from './params.js';
import { FILE_METHOD_SPECS } from './specs/files.js';

// The file-writing methods' specs, imported through this module (it and they import each other).
export * from './specs/files.js';
import { ACCOUNT_SPECS } from './specs/accounts.js';
import { SYSTEM_SPECS } from './specs/system.js';

export interface Component {
  component: string;
  key: string;
}

export interface MethodSpec<P> {
  name: string;
  /** Methods that never change anything report audit types even in enforce mode. */
  auditOnly?: boolean;
  /**
   * The parameters for people and forms (params.ts), and a minimal valid set of them; a test
   * proves they agree with `validate`.
   */
  params?: readonly ParamDoc[];
  example?: Record<string, unknown>;
  /** Check and type the parameters; throws ERR_METHOD_PARAMS naming the field (message and `details.field`). */
  validate: (params: Record<string, unknown>) => P;
  components: (params: P) => Component[];
}

/**
 * A parameter refused: the message names the method and the field, and `details.field` holds the
 * field's path under `params` (`path`, `unless.command`) for clients that point at the input.
 * `method` may carry a nested prefix (`command_run.unless`).
 */
export function paramError(method: string, field: string, what: string): never {
  const [name, ...under] = method.split('.');
  throw capstanError('ERR_METHOD_PARAMS', `${method}: ${field} ${what}`, { details: { method: name, field: [...under, field].join('.') } });
}

export function str(method: string, p: Record<string, unknown>, field: string, opts: { absolute?: boolean } = {}): string {
  const v = p[field];
  if (typeof v !== 'string' || v.length === 0) paramError(method, field, 'must be a non-empty string');
  if (v.includes('\0')) paramError(method, field, 'must not contain NUL');
  if (opts.absolute && !v.startsWith('/')) paramError(method, field, 'must be an absolute path');
  return v;
}

export function optStr(method: string, p: Record<string, unknown>, field: string, opts: { absolute?: boolean } = {}): string | undefined {
  return p[field] === undefined ? undefined : str(method, p, field, opts);
}

export function mode(method: string, p: Record<string, unknown>, field = 'mode'): number | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !/^0?[0-7]{3,4}$/.test(v)) paramError(method, field, 'must be an octal mode such as "0644"');
  return parseInt(v, 8);
}

export function strList(method: string, p: Record<string, unknown>, field: string): string[] {
  const v = p[field];
  if (v === undefined) return [];
  if (!Array.isArray(v) || v.some((x) => typeof x !== 'string' || x.includes('\0'))) paramError(method, field, 'must be a list of strings');
  return v as string[];
}

export function id(method: string, p: Record<string, unknown>, field: string): number | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'number' || !Number.isInteger(v) || v < 0) paramError(method, field, 'must be a numeric id');
  return v;
}

/**
 * `show_diff`, which every method that writes files takes: false keeps what the change changed out
 * of the run log (no diff report); absent or true leaves the agent's default (diffs, except for
 * secret files, which are never shown).
 */
export function showDiff(method: string, p: Record<string, unknown>): { show_diff?: boolean } {
  const v = p.show_diff;
  if (v === undefined) return {};
  if (typeof v !== 'boolean') paramError(method, 'show_diff', 'must be true or false');
  return { show_diff: v };
}

/** The parameter every file method may carry. */
export interface ShowDiffParam {
  show_diff?: boolean;
}

export const one = (component: string, key: string): Component[] => [{ component, key }];

export const fileContentSpec: MethodSpec<{ path: string; content: string; mode?: number } & ShowDiffParam> = {
  name: 'file_content',
  params: [pathParam(), dStr('content', 'The whole content of the file.', { required: true, multiline: true, example: 'listen 80\n' }), MODE, SHOW_DIFF],
  example: { path: '/etc/app.conf', content: 'listen 80\n' },
  validate: (p) => {
    if (typeof p.content !== 'string') paramError('file_content', 'content', 'must be a string');
    return { path: str('file_content', p, 'path', { absolute: true }), content: p.content, mode: mode('file_content', p), ...showDiff('file_content', p) };
  },
  components: (p) => one('File content', p.path),
};

export const fileLinePresentSpec: MethodSpec<{ path: string; line: string } & ShowDiffParam> = {
  name: 'file_line_present',
  params: [pathParam(), dStr('line', 'A line the file must contain (appended when missing).', { required: true, example: 'vm.swappiness = 10' }), SHOW_DIFF],
  example: { path: '/etc/app.conf', line: 'vm.swappiness = 10' },
  validate: (p) => {
    const line = str('file_line_present', p, 'line');
    if (/[\r\n]/.test(line)) paramError('file_line_present', 'line', 'must be a single line');
    return { path: str('file_line_present', p, 'path', { absolute: true }), line, ...showDiff('file_line_present', p) };
  },
  components: (p) => one('File line', `${p.path}: ${p.line}`),
};

export const fileAbsentSpec: MethodSpec<{ path: string } & ShowDiffParam> = {
  name: 'file_absent',
  params: [pathParam('The file to remove'), SHOW_DIFF],
  example: { path: '/etc/app.conf' },
  validate: (p) => ({ path: str('file_absent', p, 'path', { absolute: true }), ...showDiff('file_absent', p) }),
  components: (p) => one('File absent', p.path),
};

export const filePermissionsSpec: MethodSpec<{ path: string; mode?: number; owner?: number; group?: number } & ShowDiffParam> = {
  name: 'file_permissions',
  params: [pathParam(), dStr('mode', 'Octal mode such as "0644" (mode, owner or group: at least one).', { example: '0640' }), dNum('owner', 'Owner\'s numeric id.', { example: 0 }), dNum('group', 'Group\'s numeric id.', { example: 0 }), SHOW_DIFF],
  example: { path: '/etc/app.conf', mode: '0640' },
  validate: (p) => {
    const out = { path: str('file_permissions', p, 'path', { absolute: true }), mode: mode('file_permissions', p), owner: id('file_permissions', p, 'owner'), group: id('file_permissions', p, 'group'), ...showDiff('file_permissions', p) };
    if (out.mode === undefined && out.owner === undefined && out.group === undefined) paramError('file_permissions', 'mode', 'or owner or group is required');
    return out;
  },
  components: (p) => one('File permissions', p.path),
};

export const directoryPresentSpec: MethodSpec<{ path: string; mode?: number } & ShowDiffParam> = {
  name: 'directory_present',
  params: [pathParam('The directory'), MODE, SHOW_DIFF],
  example: { path: '/srv/app' },
  validate: (p) => ({ path: str('directory_present', p, 'path', { absolute: true }), mode: mode('directory_present', p), ...showDiff('directory_present', p) }),
  components: (p) => one('Directory', p.path),
};

export const fileFromSharedFolderSpec: MethodSpec<{ source: string; path: string; sha256: string; mode?: number } & ShowDiffParam> = {
  name: 'file_from_shared_folder',
  params: [dStr('source', 'The file\'s path inside the server\'s shared folder.', { required: true, example: 'app/app.conf' }), pathParam(), dStr('sha256', 'sha256 of the file as served (64 hex digits): checked before it is written.', { required: true, example: '0'.repeat(64) }), MODE, SHOW_DIFF],
  example: { source: 'app/app.conf', path: '/etc/app.conf', sha256: '0'.repeat(64) },
  validate: (p) => {
    const source = str('file_from_shared_folder', p, 'source');
    if (source.split('/').some((s) => s === '..' || s === '.' || s === '') || source.startsWith('/') || source.includes('\\')) {
      paramError('file_from_shared_folder', 'source', 'must be a relative path inside the shared folder');
    }
    const hash = str('file_from_shared_folder', p, 'sha256');
    if (!/^[0-9a-f]{64}$/.test(hash)) paramError('file_from_shared_folder', 'sha256', 'must be 64 lowercase hex digits');
    return { source, path: str('file_from_shared_folder', p, 'path', { absolute: true }), sha256: hash, mode: mode('file_from_shared_folder', p), ...showDiff('file_from_shared_folder', p) };
  },
  components: (p) => one('File from shared folder', p.path),
};

/** A bundle's name: its top directory in the archive and its directory under the target. */
export const ARCHIVE_NAME = /^[A-Za-z0-9][A-Za-z0-9._+-]{0,127}$/;

export interface ArchiveParams extends ShowDiffParam {
  source: string;
  /** sha256 of the .tar.gz as served. */
  sha256: string;
  /** sha256 of the bundle's SHA256SUMS file. */
  sums_sha256: string;
  /** Absolute directory the bundle lands in, as <target>/<name>. */
  target: string;
  /** The bundle's name: the archive's top directory; by default the file name without .tar.gz/.tgz. */
  name: string;
  /** Remove bundles under target that no archive directive of the node's policy assigns. */
  purge: boolean;
}

/**
 * Choria's archive convention: a .tar.gz whose top directory is its name and holds a SHA256SUMS
 * file; the directive carries both the archive's and the SUMS file's sha256 (agent/src/methods/archive.ts).
 */
export const archiveFromSharedFolderSpec: MethodSpec<ArchiveParams> = {
  name: 'archive_from_shared_folder',
  params: [dStr('source', 'A .tar.gz or .tgz in the shared folder.', { required: true, example: 'app/tools-1.2.tar.gz' }), dStr('sha256', 'sha256 of the archive as served.', { required: true, example: '1'.repeat(64) }), dStr('sums_sha256', 'sha256 of the archive\'s SHA256SUMS file.', { required: true, example: '2'.repeat(64) }), dStr('target', 'The directory the bundle lands in, as <target>/<name>.', { required: true, example: '/opt/bundles' }), dStr('name', 'The bundle\'s name: the archive\'s top directory (default: the file name without .tar.gz).', { example: 'tools-1.2' }), dFlag('purge', 'Remove the bundles under target that no archive directive assigns.', { default: false, example: true }), SHOW_DIFF],
  example: { source: 'app/tools-1.2.tar.gz', sha256: '1'.repeat(64), sums_sha256: '2'.repeat(64), target: '/opt/bundles' },
  validate: (p) => {
    const m = 'archive_from_shared_folder';
    const source = str(m, p, 'source');
    if (source.split('/').some((s) => s === '..' || s === '.' || s === '') || source.includes('\\')) {
      paramError(m, 'source', 'must be a relative path inside the shared folder');
    }
    const base = source.split('/').pop()!;
    const fromFile = /^(.+)\.(tar\.gz|tgz)$/.exec(base);
    if (!fromFile) paramError(m, 'source', 'must name a .tar.gz or .tgz file');
    const name = optStr(m, p, 'name') ?? fromFile[1]!;
    if (!ARCHIVE_NAME.test(name) || name === '..' || name === '.') paramError(m, 'name', 'must be a plain directory name (letters, digits, . _ + -)');
    const hex = (field: string) => {
      const v = str(m, p, field);
      if (!/^[0-9a-f]{64}$/.test(v)) paramError(m, field, 'must be 64 lowercase hex digits');
      return v;
    };
    const target = str(m, p, 'target', { absolute: true });
    if (target.split('/').some((s) => s === '..' || s === '.')) paramError(m, 'target', 'must not contain . or .. segments');
    if (p.purge !== undefined && typeof p.purge !== 'boolean') paramError(m, 'purge', 'must be true or false');
    return { source, sha256: hex('sha256'), sums_sha256: hex('sums_sha256'), target: target.replace(/\/+$/, '') || '/', name, purge: p.purge === true, ...showDiff(m, p) };
  },
  components: (p) => [
    { component: 'Archive from shared folder', key: `${p.target === '/' ? '' : p.target}/${p.name}` },
    ...(p.purge ? [{ component: 'Archive purge', key: p.target }] : []),
  ],
};

const PKG_NAME = /^[A-Za-z0-9][A-Za-z0-9+._:-]{0,127}$/;

/**
 * `version`: absent (any version will do), `"latest"` (upgrade whenever the package manager has a
 * newer candidate), or a version to hold exactly, older or newer than the installed one.
 */
export const packagePresentSpec: MethodSpec<{ name: string; version?: string }> = {
  name: 'package_present',
  params: [dStr('name', 'The package name.', { required: true, example: 'nginx' }), dStr('version', 'An exact version, or "latest" (default: any installed version).', { example: '1.22.1-9' })],
  example: { name: 'nginx' },
  validate: (p) => {
    const name = str('package_present', p, 'name');
    if (!PKG_NAME.test(name)) paramError('package_present', 'name', 'is not a package name');
    const version = optStr('package_present', p, 'version');
    if (version !== undefined && !/^[A-Za-z0-9+.~:_-]{1,128}$/.test(version)) paramError('package_present', 'version', 'is not a version (nor "latest")');
    return { name, version };
  },
  components: (p) => one('Package present', p.name),
};

/** `purge`: configuration files go too (apt-get purge, apk del --purge; rpm removes them anyway). */
export const packageAbsentSpec: MethodSpec<{ name: string; purge: boolean }> = {
  name: 'package_absent',
  params: [dStr('name', 'The package name.', { required: true, example: 'telnet' }), dFlag('purge', 'Its configuration files go too (apt-get purge).', { default: false, example: true })],
  example: { name: 'telnet' },
  validate: (p) => {
    const name = str('package_absent', p, 'name');
    if (!PKG_NAME.test(name)) paramError('package_absent', 'name', 'is not a package name');
    if (p.purge !== undefined && typeof p.purge !== 'boolean') paramError('package_absent', 'purge', 'must be true or false');
    return { name, purge: p.purge === true };
  },
  components: (p) => one('Package absent', p.name),
};

export const UNIT = /^[A-Za-z0-9@:._-]{1,200}$/;

export function serviceSpec(name: string, component: string): MethodSpec<{ name: string }> {
  return {
    name,
    params: [dStr('name', 'The systemd unit, such as nginx.service.', { required: true, example: 'nginx.service' })],
    example: { name: 'nginx.service' },
    validate: (p) => {
      const unit = str(name, p, 'name');
      if (!UNIT.test(unit)) paramError(name, 'name', 'is not a unit name');
      return { name: unit };
    },
    components: (p) => one(component, p.name),
  };
}

export const serviceRunningSpec = serviceSpec('service_running', 'Service running');
export const serviceEnabledSpec = serviceSpec('service_enabled', 'Service enabled');

export interface CommandParams {
  command: string;
  args: string[];
}

const cmd = (method: string, p: Record<string, unknown>): CommandParams => ({ command: str(method, p, 'command'), args: strList(method, p, 'args') });
export const commandKey = (c: CommandParams): string => [c.command, ...c.args].join(' ');

export const commandCheckSpec: MethodSpec<CommandParams & { expect_exit: number }> = {
  name: 'command_check',
  params: [dStr('command', 'The command (an absolute path, run without a shell).', { required: true, example: '/usr/bin/true' }), dList('args', 'Its arguments.', { example: ['-q'] }), dNum('expect_exit', 'The exit code that means compliant.', { default: 0, example: 0 })],
  example: { command: '/usr/bin/true' },
  auditOnly: true,
  validate: (p) => {
    const e = p.expect_exit ?? 0;
    if (typeof e !== 'number' || !Number.isInteger(e) || e < 0 || e > 255) paramError('command_check', 'expect_exit', 'must be an exit code 0-255');
    return { ...cmd('command_check', p), expect_exit: e };
  },
  components: (p) => one('Command check', commandKey(p)),
};

export const commandRunSpec: MethodSpec<CommandParams & { creates?: string; unless?: CommandParams }> = {
  name: 'command_run',
  params: [dStr('command', 'The command (an absolute path, run without a shell).', { required: true, example: '/usr/local/bin/setup' }), dList('args', 'Its arguments.', { example: ['--quiet'] }), dStr('creates', 'Run only while this path does not exist (creates or unless: at least one).', { example: '/var/lib/app/done' }), dMap('unless', 'Run only when this command fails: {command, args}.', { example: { command: '/usr/bin/test', args: ['-f', '/var/lib/app/done'] }, fields: [dStr('command', 'The command.', { required: true }), dList('args', 'Its arguments.')] })],
  example: { command: '/usr/local/bin/setup', creates: '/var/lib/app/done' },
  validate: (p) => {
    const base = cmd('command_run', p);
    const creates = optStr('command_run', p, 'creates', { absolute: true });
    let unless: CommandParams | undefined;
    if (p.unless !== undefined) {
      if (!p.unless || typeof p.unless !== 'object' || Array.isArray(p.unless)) paramError('command_run', 'unless', 'must be {command, args}');
      unless = cmd('command_run.unless', p.unless as Record<string, unknown>);
    }
    if (!creates && !unless) paramError('command_run', 'creates', 'or unless is required, so that the command runs only when needed');
    return { ...base, creates, unless };
  },
  components: (p) => one('Command run', commandKey(p)),
};

export const sysctlValueSpec: MethodSpec<{ key: string; value: string }> = {
  name: 'sysctl_value',
  params: [dStr('key', 'A sysctl key such as net.ipv4.ip_forward.', { required: true, example: 'net.ipv4.ip_forward' }), dStr('value', 'Its value.', { required: true, example: '0' })],
  example: { key: 'net.ipv4.ip_forward', value: '0' },
  validate: (p) => {
    const key = str('sysctl_value', p, 'key');
    if (!/^[a-z0-9_]+(\.[a-z0-9_*-]+)+$/i.test(key)) paramError('sysctl_value', 'key', 'is not a sysctl key such as net.ipv4.ip_forward');
    const v = p.value;
    if (typeof v !== 'string' && typeof v !== 'number') paramError('sysctl_value', 'value', 'must be a string or number');
    return { key, value: String(v) };
  },
  components: (p) => one('Sysctl value', p.key),
};

export const METHOD_SPECS: ReadonlyMap<string, MethodSpec<any>> = new Map(
  [
    fileContentSpec, fileLinePresentSpec, fileAbsentSpec, filePermissionsSpec, directoryPresentSpec, fileFromSharedFolderSpec,
    archiveFromSharedFolderSpec, packagePresentSpec, packageAbsentSpec, serviceRunningSpec, serviceEnabledSpec, commandCheckSpec, commandRunSpec, sysctlValueSpec,
    ...FILE_METHOD_SPECS,
    ...ACCOUNT_SPECS, ...SYSTEM_SPECS,
  ].map((m) => [m.name, m as MethodSpec<any>]),
);

/** Validate a directive's method and parameters (server side, on save). */
export function validateMethodParams(method: string, params: unknown): Record<string, unknown> {
  const spec = METHOD_SPECS.get(method);
  if (!spec) throw capstanError('ERR_METHOD_PARAMS', `unknown method ${method}; known: ${[...METHOD_SPECS.keys()].join(', ')}`, { details: { field: 'method' } });
  if (!params || typeof params !== 'object' || Array.isArray(params)) {
    throw capstanError('ERR_METHOD_PARAMS', `${method}: params must be an object`, { details: { method, field: 'params' } });
  }
  const read = new Set<string>();
  spec.validate(readTracked(params as Record<string, unknown>, '', read));
  const unknown = unreadField(params as Record<string, unknown>, '', read);
  if (unknown !== undefined) paramError(method, unknown, `is not a parameter of ${method} (a misspelling?)`);
  return params as Record<string, unknown>;
}

const isPlainObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

/**
 * A view of `params` that records the path of every field `validate` reads (nested objects
 * included, as `unless.command`). A method's parameters are exactly what its validation reads, so
 * a parameter added to a method's `validate` is known at once, and there is no second list to
 * forget; a field nothing reads is one the agent would ignore: a typo.
 */
function readTracked(obj: Record<string, unknown>, prefix: string, read: Set<string>): Record<string, unknown> {
  return new Proxy(obj, {
    get(target, key, receiver) {
      const value = Reflect.get(target, key, receiver) as unknown;
      if (typeof key !== 'string') return value;
      read.add(prefix + key);
      return isPlainObject(value) ? readTracked(value, `${prefix}${key}.`, read) : value;
    },
  });
}

/** The path of the first field of `obj` (and of the nested objects validation looked into) that was never read. */
function unreadField(obj: Record<string, unknown>, prefix: string, read: Set<string>): string | undefined {
  for (const [key, value] of Object.entries(obj)) {
    const path = prefix + key;
    if (!read.has(path)) return path;
    if (isPlainObject(value) && [...read].some((r) => r.startsWith(`${path}.`))) {
      const inner = unreadField(value, `${path}.`, read);
      if (inner !== undefined) return inner;
    }
  }
  return undefined;
}

/** The components a directive is expected to report, for expected-vs-received compliance. */
export function expectedComponents(method: string, params: Record<string, unknown>): Component[] {
  const spec = METHOD_SPECS.get(method);
  if (!spec) return [{ component: method, key: 'unknown method' }];
  try {
    return spec.components(spec.validate(params));
  } catch {
    return [{ component: method, key: 'invalid parameters' }];
  }
}
