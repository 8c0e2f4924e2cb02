/**
 * What every file-writing method's parameters share: the owner, group and mode of the file, the
 * `validate` command that checks a candidate before it replaces the file, `show_diff`; and the
 * small value checks the file methods have in common (names, single lines, regexes, booleans).
 *
 * These modules and `../methods.ts` import each other: import them through
 * `@capstan/shared/policy/methods`, which must be the one that loads first.
 */
import { mode, paramError, showDiff, type ShowDiffParam } from '../methods.js';

/** A user or group: a name (resolved on the node from /etc/passwd or /etc/group) or a numeric id. */
export type Account = string | number;

export interface WriterParams extends ShowDiffParam {
  mode?: number;
  owner?: Account;
  group?: Account;
  /** argv of a checker run on the candidate file (`%s`: its path) before it replaces the file. */
  validate?: string[];
}

/** POSIX-portable user and group names (plus the upper case and trailing `$` some systems use). */
export const ACCOUNT_NAME = /^[A-Za-z_][A-Za-z0-9_.-]{0,31}\$?$/;
const MAX_ID = 4294967294;
export const MAX_VALIDATE_ARGS = 64;

type P = Record<string, unknown>;

/** A user or group: a name, a numeric id, or a string of digits (an id). */
export function account(m: string, p: P, field: string): Account | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v === 'number' && Number.isInteger(v) && v >= 0 && v <= MAX_ID) return v;
  if (typeof v === 'string' && /^\d{1,10}$/.test(v) && Number(v) <= MAX_ID) return Number(v);
  if (typeof v === 'string' && ACCOUNT_NAME.test(v)) return v;
  return paramError(m, field, 'must be a user or group name, or a numeric id');
}

/**
 * `validate`: a command line as a list, run without a shell, where every `%s` stands for the
 * candidate's path. A checker that is not given the candidate checks nothing, so `%s` is required.
 */
export function validateCommand(m: string, p: P): string[] | undefined {
  const v = p.validate;
  if (v === undefined) return undefined;
  if (!Array.isArray(v) || v.length === 0 || v.length > MAX_VALIDATE_ARGS || v.some((a) => typeof a !== 'string' || a.includes('\0'))) {
    paramError(m, 'validate', `must be a command line as a list of 1 to ${MAX_VALIDATE_ARGS} strings, e.g. ["/usr/sbin/sshd", "-t", "-f", "%s"]`);
  }
  const argv = v as string[];
  if (argv[0] === '') paramError(m, 'validate', 'must start with a command');
  if (!argv.some((a) => a.includes('%s'))) paramError(m, 'validate', 'must pass the candidate file as %s');
  return argv;
}

/** mode, owner, group, validate and show_diff, each optional. */
export function writerParams(m: string, p: P): WriterParams {
  const out: WriterParams = { ...showDiff(m, p) };
  const md = mode(m, p);
  const owner = account(m, p, 'owner');
  const group = account(m, p, 'group');
  const validate = validateCommand(m, p);
  if (md !== undefined) out.mode = md;
  if (owner !== undefined) out.owner = owner;
  if (group !== undefined) out.group = group;
  if (validate !== undefined) out.validate = validate;
  return out;
}

export function bool(m: string, p: P, field: string, dflt: boolean): boolean {
  const v = p[field];
  if (v === undefined) return dflt;
  if (typeof v !== 'boolean') paramError(m, field, 'must be true or false');
  return v;
}

export function oneOf<T extends string>(m: string, p: P, field: string, allowed: readonly T[], dflt: T): T {
  const v = p[field];
  if (v === undefined) return dflt;
  if (typeof v !== 'string' || !(allowed as readonly string[]).includes(v)) paramError(m, field, `must be one of ${allowed.join(', ')}`);
  return v as T;
}

/** A string of one line: no line break, no NUL (`empty`: may be ""). */
export function line(m: string, p: P, field: string, opts: { empty?: boolean; max?: number } = {}): string {
  const v = p[field];
  if (typeof v !== 'string' || (v === '' && !opts.empty)) paramError(m, field, opts.empty ? 'must be a string' : 'must be a non-empty string');
  if (/[\r\n\0]/.test(v)) paramError(m, field, 'must be a single line');
  if (v.length > (opts.max ?? 4096)) paramError(m, field, `must be at most ${opts.max ?? 4096} characters`);
  return v;
}

export function optLine(m: string, p: P, field: string, opts: { empty?: boolean; max?: number } = {}): string | undefined {
  return p[field] === undefined ? undefined : line(m, p, field, opts);
}

/** Text content (a file's): any string without NUL, bounded. */
export function text(m: string, p: P, field: string, max = 16 * 1024 * 1024): string {
  const v = p[field];
  if (typeof v !== 'string') paramError(m, field, 'must be a string');
  if (v.includes('\0')) paramError(m, field, 'must not contain NUL');
  if (v.length > max) paramError(m, field, `must be at most ${max} characters`);
  return v;
}

/** A name matching `re` (`what` says which names are allowed). */
export function named(m: string, p: P, field: string, re: RegExp, what: string): string {
  const v = p[field];
  if (typeof v !== 'string' || !re.test(v)) paramError(m, field, `must be ${what}`);
  return v;
}

export const MAX_PATTERN = 4096;

/**
 * A JavaScript regular expression, compiled here so the server refuses one that does not compile
 * when the directive is saved. Matching on the node is bounded in time (agent/src/methods/regex.ts).
 */
export function regex(m: string, p: P, field: string, flags = ''): string | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || v === '' || v.length > MAX_PATTERN || /[\r\n\0]/.test(v)) {
    paramError(m, field, `must be a regular expression of 1 to ${MAX_PATTERN} characters on one line`);
  }
  try {
    new RegExp(v, flags);
  } catch (err) {
    paramError(m, field, `is not a valid regular expression: ${(err as Error).message}`);
  }
  return v;
}

/** A relative path inside the shared folder: no absolute path, no `.`, `..` or empty segment. */
export function sharedPath(m: string, p: P, field: string): string | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || v === '' || v.includes('\0') || v.includes('\\') || v.startsWith('/') || v.split('/').some((s) => s === '' || s === '.' || s === '..')) {
    paramError(m, field, 'must be a relative path inside the shared folder');
  }
  return v;
}

/** A plain object whose values pass `each` (which names its field as `<field>.<key>`). */
export function record<T>(m: string, p: P, field: string, each: (key: string, value: unknown, at: string) => T, max = 256): Record<string, T> | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  if (!v || typeof v !== 'object' || Array.isArray(v)) paramError(m, field, 'must be an object');
  const entries = Object.entries(v as P);
  if (entries.length > max) paramError(m, field, `must have at most ${max} entries`);
  return Object.fromEntries(entries.map(([k, x]) => [k, each(k, x, `${field}.${k}`)]));
}

/** An ASCII-armored OpenPGP public key block, as `gpg --armor --export` writes it. */
export function pgpPublicKey(m: string, p: P, field: string): string | undefined {
  const v = p[field];
  if (v === undefined) return undefined;
  const ok = typeof v === 'string' && v.length <= 1024 * 1024 && /^-----BEGIN PGP PUBLIC KEY BLOCK-----\r?\n[\s\S]+\n-----END PGP PUBLIC KEY BLOCK-----\s*$/.test(v.trim() + '\n');
  if (!ok) paramError(m, field, 'must be an ASCII-armored public key (-----BEGIN PGP PUBLIC KEY BLOCK----- … -----END PGP PUBLIC KEY BLOCK-----)');
  return (v as string).trim() + '\n';
}

export const one = (component: string, key: string) => [{ component, key }];
