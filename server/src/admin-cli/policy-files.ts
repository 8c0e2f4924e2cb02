/**
 * Policy as code on disk: a directory with `directives/`, `groups/`, `rules/`, `techniques/`,
 * `properties/` (global properties, by name) and `nodes/` (a node's own properties, by node id),
 * one file per object, named `<id>.toml` or `<id>.json`, holding the object as the admin API
 * takes it (docs/cli.md, "Policy as code"). The id may be left out of the file: it is the file's
 * name. Reading checks only the layout (the server checks the objects, with the same code as a save).
 *
 * Nothing inside the directory is followed: a symbolic link (a file or a kind directory) is
 * refused, whether it points inside or out, and files are opened with O_NOFOLLOW, so neither a
 * read nor an export (nor --force's removal) reaches anything outside the directory.
 */
import { constants as fsc } from 'node:fs';
import { lstat, mkdir, open, readdir, rm } from 'node:fs/promises';
import { extname, join } from 'node:path';
import { parse as parseToml, stringify as stringifyToml } from 'smol-toml';
import { capstanError } from '@capstan/shared/errors';

export const POLICY_KINDS = ['directives', 'groups', 'rules', 'techniques', 'properties', 'nodes'] as const;
export type PolicyDirName = (typeof POLICY_KINDS)[number];
/** `properties` (global properties) and `nodes` may be absent: a directory of directives, groups and rules alone. */
export type PolicyFiles = Record<Exclude<PolicyDirName, 'properties' | 'nodes'>, Array<Record<string, unknown>>>
  & { properties?: Array<Record<string, unknown>>; nodes?: Array<Record<string, unknown>> };
/** One policy file may hold at most this much: the API's whole request is at most 1 MiB by default. */
export const MAX_POLICY_FILE = 1024 * 1024;

function fail(message: string): never {
  throw capstanError('ERR_POLICY_FILE', message);
}

/** What is at `path` without following a link; null when nothing is. A link is refused. */
async function entry(path: string): Promise<import('node:fs').Stats | null> {
  const st = await lstat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT') return null;
    fail(`cannot read ${path}: ${err.message}`);
  });
  if (st?.isSymbolicLink()) fail(`${path}: a symbolic link (links are not followed in a policy directory)`);
  return st ?? null;
}

/** A policy file's text, read through a descriptor that refuses a link, at most MAX_POLICY_FILE bytes. */
async function readPolicyFile(path: string): Promise<string> {
  let fh;
  try {
    fh = await open(path, fsc.O_RDONLY | fsc.O_NOFOLLOW | fsc.O_NONBLOCK);
  } catch (err) {
    fail(`${path}: ${(err as NodeJS.ErrnoException).code === 'ELOOP' ? 'a symbolic link (links are not followed in a policy directory)' : (err as Error).message}`);
  }
  try {
    const st = await fh.stat();
    if (!st.isFile()) fail(`${path}: not a file`);
    if (st.size > MAX_POLICY_FILE) fail(`${path}: larger than ${MAX_POLICY_FILE} bytes`);
    const buf = Buffer.alloc(MAX_POLICY_FILE + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n, null);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > MAX_POLICY_FILE) fail(`${path}: larger than ${MAX_POLICY_FILE} bytes`);
    }
    return buf.subarray(0, n).toString('utf8');
  } finally {
    await fh.close();
  }
}

/** Read a policy directory; files other than `.toml`/`.json` (and hidden ones) are refused, not skipped. */
export async function readPolicyDir(dir: string): Promise<PolicyFiles> {
  const out: PolicyFiles = { directives: [], groups: [], rules: [], techniques: [], properties: [], nodes: [] };
  let top: string[];
  try {
    top = await readdir(dir);
  } catch (err) {
    fail(`cannot read ${dir}: ${(err as Error).message}`);
  }
  const strays = top.filter((n) => !n.startsWith('.') && !(POLICY_KINDS as readonly string[]).includes(n));
  for (const n of strays) if ((await entry(join(dir, n)))?.isDirectory()) fail(`${join(dir, n)}: unknown directory (expected ${POLICY_KINDS.join(', ')})`);
  if (!POLICY_KINDS.some((k) => top.includes(k))) fail(`${dir} holds none of ${POLICY_KINDS.join('/, ')}/`);
  for (const kind of POLICY_KINDS) {
    if (!top.includes(kind)) continue;
    const sub = join(dir, kind);
    if (!(await entry(sub))?.isDirectory()) fail(`${sub}: not a directory`);
    const seen = new Map<string, string>();
    for (const name of (await readdir(sub)).sort()) {
      if (name.startsWith('.')) continue;
      const path = join(sub, name);
      const ext = extname(name);
      if (ext !== '.toml' && ext !== '.json') fail(`${path}: not a .toml or .json file`);
      await entry(path);
      const text = await readPolicyFile(path);
      let obj: unknown;
      try {
        obj = ext === '.toml' ? parseToml(text) : JSON.parse(text);
      } catch (err) {
        fail(`${path}: ${(err as Error).message.split('\n')[0]}`);
      }
      if (!obj || typeof obj !== 'object' || Array.isArray(obj)) fail(`${path}: must hold one object`);
      const o = obj as Record<string, unknown>;
      const id = name.slice(0, -ext.length);
      if (o.id !== undefined && o.id !== id) fail(`${path}: id ${JSON.stringify(o.id)} differs from the file name`);
      if (seen.has(id)) fail(`${path}: ${kind} ${id} is also in ${seen.get(id)}`);
      seen.set(id, path);
      (out[kind] ??= []).push({ id, ...o });
    }
  }
  return out;
}

/** What the server stores beside the object, left out of the files. */
const SERVER_FIELDS = ['updated_at'];

export function fileText(obj: Record<string, unknown>, format: 'toml' | 'json'): string {
  const clean = Object.fromEntries(Object.entries(obj).filter(([k, v]) => !SERVER_FIELDS.includes(k) && v !== null && v !== undefined));
  return format === 'json' ? `${JSON.stringify(clean, null, 2)}\n` : stringifyToml(clean) + '\n';
}

/** Can TOML say it? It has no null: an object holding one (a property's value) is written as JSON. */
export function tomlCanHold(v: unknown): boolean {
  if (v === null) return false;
  if (Array.isArray(v)) return v.every(tomlCanHold);
  if (typeof v === 'object') return Object.values(v as object).every((x) => x === undefined || tomlCanHold(x));
  return true;
}

/**
 * Write a policy directory. Without `force`, a directory already holding policy files is refused
 * (an export over an older one would leave files for objects deleted since); with it, the old
 * files are removed first.
 */
export async function writePolicyDir(dir: string, files: PolicyFiles, format: 'toml' | 'json', force: boolean): Promise<number> {
  // Every kind directory is checked before anything is removed: a link among them stops the
  // export with nothing changed.
  for (const kind of POLICY_KINDS) {
    const st = await entry(join(dir, kind));
    if (st && !st.isDirectory()) fail(`${join(dir, kind)}: not a directory`);
  }
  for (const kind of POLICY_KINDS) {
    const sub = join(dir, kind);
    const present = (await readdir(sub).catch(() => [] as string[])).filter((n) => /\.(toml|json)$/.test(n));
    if (present.length && !force) fail(`${sub} already holds policy files: use --force to replace them`);
    // rm removes a link itself, never its target.
    for (const n of present) await rm(join(sub, n));
  }
  let written = 0;
  for (const kind of POLICY_KINDS) {
    const sub = join(dir, kind);
    await mkdir(sub, { recursive: true });
    await entry(sub);
    for (const obj of files[kind] ?? []) {
      // Techniques are written as JSON whatever the format: nested lists of calls read better so.
      // So is an object holding a null under its top level, which TOML cannot write.
      const inner = Object.fromEntries(Object.entries(obj).filter(([, v]) => v !== null));
      const fmt = kind === 'techniques' || !tomlCanHold(inner) ? 'json' : format;
      const path = join(sub, `${String(obj.id)}.${fmt}`);
      // A new file of its own: a link (or anything) put there meanwhile is refused, not followed.
      let fh;
      try {
        fh = await open(path, fsc.O_WRONLY | fsc.O_CREAT | fsc.O_EXCL | fsc.O_NOFOLLOW, 0o644);
      } catch (err) {
        fail(`cannot write ${path}: ${(err as Error).message}`);
      }
      try {
        await fh.writeFile(fileText(obj, fmt));
      } finally {
        await fh.close();
      }
      written++;
    }
  }
  return written;
}
