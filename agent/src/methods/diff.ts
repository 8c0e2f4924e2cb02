/**
 * What a file change changed, as the text of a diff report (shared/src/runlog/diff.ts): a unified
 * diff for text content, `old → new` lines for modes and owners, a one-line note for binary or
 * oversized content (sizes and sha256, never bytes) and for secret files (nothing of the content).
 *
 * Diffs are computed from what the agent holds before it changes anything (the current file and
 * the content it is about to write), so enforce, audit and dry runs describe the same change.
 */
import { createHash } from 'node:crypto';
import { constants as fsc } from 'node:fs';
import { lstat, open, readFile, realpath } from 'node:fs/promises';
import { isUtf8 } from 'node:buffer';
import { basename, dirname, join, normalize } from 'node:path';
import { createTwoFilesPatch, FILE_HEADERS_ONLY } from 'diff';
import { minimatch } from 'minimatch';

/** What the diff report of a secret file says instead of its content. */
export const SECRET_NOTE = 'content changed (secret file: diff not shown)';

/**
 * What it says for a path reached through a symbolic link (the file itself, or a directory above
 * it): what the link points to may be any file root can read (an admin token, sudoers), and run
 * logs reach every viewer of the changes. The repair replaces the link with a file of its own.
 */
export const LINK_NOTE = 'content changed (a symbolic link at the path or above it: diff not shown)';

/**
 * Whether `path` is reached through a symbolic link: the file itself, or any directory above it
 * (the nearest one that exists, resolved, differs from how it is written).
 */
export async function throughLink(path: string): Promise<boolean> {
  const plain = normalize(path);
  if ((await lstat(plain).catch(() => null))?.isSymbolicLink()) return true;
  for (let d = dirname(plain); ; d = dirname(d)) {
    const real = await realpath(d).catch((err: NodeJS.ErrnoException) => (err.code === 'ENOENT' || err.code === 'ENOTDIR' ? null : d));
    if (real !== null) return real !== d;
    if (d === dirname(d)) return false;
  }
}

export interface DiffSettings {
  /** Cap on one diff's text in UTF-8 bytes (`[methods] max_diff_bytes`). */
  maxBytes: number;
  /** Content larger than this is described by size and sha256, not diffed (`max_diff_file_size`). */
  maxFileSize: number;
  /** Whether a path's content must never be shown (secretPaths()). */
  isSecret: (path: string) => Promise<boolean>;
}

/**
 * Secret by name, wherever the file is: shadow and gshadow and their backups (shadow-, shadow.bak,
 * shadow~), SSH host private keys, SSH user private keys (id_rsa, id_ed25519, … without .pub),
 * and any *.key file.
 */
const SECRET_NAMES: readonly RegExp[] = [/^g?shadow(?:[-~.].*)?$/, /^ssh_host_.+_key$/, /^id_[a-z0-9_]+$/i, /\.key$/];

/** A PEM private key of any kind: PKCS#1/#8, EC, encrypted, OpenSSH. */
const PEM_PRIVATE_KEY = /-----BEGIN (?:[A-Z0-9]+ )*PRIVATE KEY-----/;

/**
 * The secret-path test: the built-in names above, anything under the agent's state directory, and
 * the admin's globs (`diff_secret_paths`). A path is checked as written and as resolved (symbolic
 * links followed), so a link to /etc/shadow is as secret as /etc/shadow.
 */
export function secretPaths(opts: { stateDir: string; globs: readonly string[] }): (path: string) => Promise<boolean> {
  const stateDirs = resolvedForms(opts.stateDir);
  return async (path) => {
    const forms = await resolvedForms(path);
    const states = await stateDirs;
    return forms.some(
      (p) =>
        SECRET_NAMES.some((re) => re.test(basename(p))) ||
        states.some((s) => p === s || p.startsWith(s.endsWith('/') ? s : `${s}/`)) ||
        opts.globs.some((g) => minimatch(p, g, { dot: true })),
    );
  };
}

/** The path as written (normalised) and with symbolic links resolved (its parent's, when it does not exist). */
async function resolvedForms(path: string): Promise<string[]> {
  const plain = normalize(path);
  const real = await realpath(plain).catch(async () => {
    const parent = await realpath(dirname(plain)).catch(() => null);
    return parent === null ? null : join(parent, basename(plain));
  });
  return real === null || real === plain ? [plain] : [plain, real];
}

/** A file's content as a diff needs it: bytes only up to maxFileSize, size and hash always. */
export interface Content {
  size: number;
  sha256: string;
  /** null: larger than maxFileSize, not kept. */
  data: Buffer | null;
  /** Not a regular file (a symbolic link, a FIFO…): nothing of it was read. */
  special?: string;
}

export function contentOf(data: Buffer, maxFileSize: number): Content {
  return { size: data.length, sha256: createHash('sha256').update(data).digest('hex'), data: data.length <= maxFileSize ? data : null };
}

/**
 * A regular file's content (null when absent), streamed when it is too large to keep. Never read
 * through a link at the path (O_NOFOLLOW), nor from something that is no regular file (a FIFO
 * would block): those give `special`, and no bytes.
 */
export async function readContent(path: string, maxFileSize: number): Promise<Content | null> {
  let fh;
  try {
    fh = await open(path, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
  } catch (err) {
    const code = (err as NodeJS.ErrnoException).code;
    if (code === 'ENOENT') return null;
    if (code === 'ELOOP') return { size: 0, sha256: '', data: null, special: 'a symbolic link' };
    throw err;
  }
  try {
    const s = await fh.stat();
    if (!s.isFile()) return { size: 0, sha256: '', data: null, special: 'not a regular file' };
    if (s.size <= maxFileSize) return contentOf(await fh.readFile(), maxFileSize);
    const hash = createHash('sha256');
    let size = 0;
    for await (const chunk of fh.createReadStream({ autoClose: false })) {
      hash.update(chunk as Buffer);
      size += (chunk as Buffer).length;
    }
    return { size, sha256: hash.digest('hex'), data: null };
  } finally {
    await fh.close();
  }
}

const isText = (c: Content) => c.data !== null && !c.data.includes(0) && isUtf8(c.data);
const summary = (c: Content) => `${c.size} bytes, sha256 ${c.sha256}`;
/** `a/etc/motd` for /etc/motd: the a/ b/ convention of git and patch -p1. */
const side = (prefix: 'a' | 'b', path: string) => `${prefix}/${path.replace(/^\/+/, '')}`;

/**
 * The change of a file's content, `before` → `after` (null: absent). The line diff's work is
 * bounded by maxEdits() (Myers' algorithm costs lines × edits): a change of more lines than that
 * is summarised instead.
 */
export async function contentDiff(path: string, before: Content | null, after: Content | null, s: DiffSettings): Promise<string> {
  const head = before === null ? `created ${path}\n` : after === null ? `deleted ${path}\n` : '';
  const pem = (c: Content | null) => c?.data != null && PEM_PRIVATE_KEY.test(c.data.toString('latin1'));
  // An edit (a line added) carries what it edits into `after`: through a link, neither side is shown.
  if (before?.special !== undefined || (await throughLink(path))) return `${head}${LINK_NOTE}\n`;
  if (pem(before) || pem(after) || (await s.isSecret(path))) return `${head}${SECRET_NOTE}\n`;
  const sides = [before, after].filter((c): c is Content => c !== null);
  const note = (what: string) => `${head}${what}: ${before ? summary(before) : 'none'} → ${after ? summary(after) : 'none'}\n`;
  if (sides.some((c) => c.data === null)) return note(`content larger than ${s.maxFileSize} bytes, not diffed`);
  if (!sides.every(isText)) return note('binary content');
  const patch = createTwoFilesPatch(
    before ? side('a', path) : '/dev/null', after ? side('b', path) : '/dev/null',
    before?.data!.toString('utf8') ?? '', after?.data!.toString('utf8') ?? '',
    undefined, undefined, { context: 3, headerOptions: FILE_HEADERS_ONLY, maxEditLength: maxEdits(s.maxBytes) },
  );
  if (patch === undefined) return note(`more than ${maxEdits(s.maxBytes)} changed lines, not diffed`);
  return `${head}${patch}`;
}

/**
 * Content that would be replaced by content known only by its sha256 (audit and dry runs of
 * file_from_shared_folder, which download nothing).
 */
export async function pendingContentNote(path: string, before: Content | null, sha256: string, s: DiffSettings): Promise<string> {
  const head = before === null ? `created ${path}\n` : '';
  if (before?.special !== undefined || (await throughLink(path))) return `${head}${LINK_NOTE}\n`;
  if ((before?.data != null && PEM_PRIVATE_KEY.test(before.data.toString('latin1'))) || (await s.isSecret(path))) return `${head}${SECRET_NOTE}\n`;
  return `${head}content would be replaced (not downloaded in audit or dry runs): ${before ? summary(before) : 'none'} → sha256 ${sha256}\n`;
}

/** Every changed line costs at least two bytes of diff ("+\n"): beyond this many the cap cuts the diff anyway. */
export const maxEdits = (maxBytes: number) => Math.max(16, Math.ceil(maxBytes / 2));

export const octal = (mode: number) => (mode & 0o7777).toString(8).padStart(4, '0');

/** `mode 0644 → 0600`. */
export const modeLine = (before: number, after: number) => `mode ${octal(before)} → ${octal(after)}\n`;

/** uid → user name and gid → group name, from passwd(5)/group(5) text: `name:x:id:…` lines. */
export function idNames(text: string): Map<number, string> {
  const out = new Map<number, string>();
  for (const line of text.split('\n')) {
    const [name, , id] = line.split(':');
    if (!name || name.startsWith('#') || id === undefined || !/^\d+$/.test(id)) continue;
    if (!out.has(Number(id))) out.set(Number(id), name);
  }
  return out;
}

async function names(file: string): Promise<Map<number, string>> {
  return idNames(await readFile(file, 'utf8').catch(() => ''));
}

/** `app:app` (user:group; a number where the id has no name). */
export async function ownerText(o: { uid: number; gid: number }): Promise<string> {
  const [users, groups] = await Promise.all([names('/etc/passwd'), names('/etc/group')]);
  return `${users.get(o.uid) ?? o.uid}:${groups.get(o.gid) ?? o.gid}`;
}

/** `owner root:root → app:app`. */
export async function ownerLine(before: { uid: number; gid: number }, after: { uid: number; gid: number }): Promise<string> {
  return `owner ${await ownerText(before)} → ${await ownerText(after)}\n`;
}
