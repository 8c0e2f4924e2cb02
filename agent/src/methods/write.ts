/**
 * How the file-writing methods look at and write a file, once for all of them. A method describes
 * each file it manages as a target (the content it wants, from the current one; mode, owner,
 * group; a `validate` checker) and converges its targets together with convergeParts().
 *
 * A write goes to an exclusive, unpredictable temporary file in the same directory, gets its mode
 * and owner, is fsync'd, passes the checker, and is renamed over the file (then the directory is
 * fsync'd): a reader sees the old file or the new one, and a refused candidate leaves the old file
 * untouched. A symbolic link at the managed path is never written through: it is an error naming
 * the link (ERR_FILE_SYMLINK); a directory or special file there is ERR_FILE_TYPE.
 */
import { randomBytes } from 'node:crypto';
import { isUtf8 } from 'node:buffer';
import { constants, type Stats } from 'node:fs';
import { chmod, lstat, mkdir, open, readFile, readlink, rename, rm, rmdir } from 'node:fs/promises';
import { dirname } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import type { Account } from '@capstan/shared/policy/methods';
import { resolveGid, resolveUid } from './owners.js';
import { contentDiff, contentOf, modeLine, octal, ownerLine, ownerText, readContent } from './diff.js';
import { converge, run, type MethodContext, type Outcome } from './types.js';

/** Editing methods read the whole file: larger ones are refused (ERR_FILE_TOO_LARGE). */
export const MAX_EDIT_SIZE = 4 * 1024 * 1024;
/** What a refused candidate's checker said, at most (its end: where the error usually is). */
export const MAX_CHECKER_OUTPUT = 2048;

export async function lstatOrNull(path: string): Promise<Stats | null> {
  return lstat(path).catch((err: NodeJS.ErrnoException) => {
    if (err.code === 'ENOENT' || err.code === 'ENOTDIR') return null;
    throw err;
  });
}

export const kindOf = (s: Stats) => (s.isDirectory() ? 'a directory' : s.isSymbolicLink() ? 'a symbolic link' : s.isFile() ? 'a regular file' : 'a special file');

/** One thing a method converges (a file, a link, a directory): look, say, and change. */
export interface Part {
  plan(): Promise<PartPlan>;
}

export interface PartPlan {
  /** What differs (empty: compliant). */
  drift: string[];
  /** The diff text of the change (empty when compliant). */
  describe(): Promise<string>;
  /** Make the change; resolves to how to undo it, or null when nothing was changed. */
  apply(): Promise<Undo | null>;
}

export type Undo = () => Promise<void>;

export interface FileTarget {
  path: string;
  /**
   * The content wanted, given the current text (null: the file is absent). Null means nothing is
   * wanted of an absent file: it may stay absent. Methods that write whole files ignore `cur`.
   */
  want: (cur: string | null) => string | null | Promise<string | null>;
  /** Whether `want` edits the current text (it is then read, bounded, and must be UTF-8). */
  edits?: boolean;
  /** The mode wanted; undefined: an existing file keeps its own, a new one gets 0644. */
  mode?: number;
  owner?: Account;
  group?: Account;
  /** argv of a checker, `%s` standing for the candidate's path. */
  validate?: string[];
}

/** A file target as a Part: its drift (content, mode, owner, group), diff and atomic write. */
export function filePart(t: FileTarget, ctx: MethodContext): Part {
  return { plan: () => planFile(t, ctx) };
}

async function planFile(t: FileTarget, ctx: MethodContext): Promise<PartPlan> {
  const st = await lstatOrNull(t.path);
  if (st?.isSymbolicLink()) {
    const to = await readlink(t.path).catch(() => '?');
    throw capstanError('ERR_FILE_SYMLINK', `${t.path} is a symbolic link (to ${to}): not written through`);
  }
  if (st && !st.isFile()) throw capstanError('ERR_FILE_TYPE', `${t.path} is ${kindOf(st)}, not a regular file`);
  if (st && t.edits && st.size > MAX_EDIT_SIZE) throw capstanError('ERR_FILE_TOO_LARGE', `${t.path} is larger than ${MAX_EDIT_SIZE} bytes: not edited`);
  let cur: Buffer | null = null;
  let next: string | null;
  if (t.edits) {
    cur = st ? await readFile(t.path) : null;
    if (cur && (cur.includes(0) || !isUtf8(cur))) throw capstanError('ERR_FILE_NOT_TEXT', `${t.path} is not UTF-8 text: not edited`);
    next = await t.want(cur === null ? null : cur.toString('utf8'));
  } else {
    next = await t.want(null);
    // A file of another size differs: no need to read it (it may be large).
    if (st && next !== null && st.size === Buffer.byteLength(next)) cur = await readFile(t.path);
  }
  if (st && next === null) next = cur?.toString('utf8') ?? null;
  const body = next === null ? null : Buffer.from(next);
  const contentDrift = body !== null && (!st || cur === null || !cur.equals(body));
  const uid = t.owner === undefined ? undefined : await resolveUid(t.owner);
  const gid = t.group === undefined ? undefined : await resolveGid(t.group);
  const drift: string[] = [];
  if (!st && body !== null) drift.push(`${t.path} does not exist`);
  else if (contentDrift) drift.push(`${t.path} content differs`);
  if (st) {
    if (t.mode !== undefined && (st.mode & 0o7777) !== t.mode) drift.push(`${t.path} mode is ${octal(st.mode)}, not ${octal(t.mode)}`);
    if (uid !== undefined && st.uid !== uid) drift.push(`${t.path} owner is uid ${st.uid}, not ${uid}`);
    if (gid !== undefined && st.gid !== gid) drift.push(`${t.path} group is gid ${st.gid}, not ${gid}`);
  }
  const newMode = t.mode ?? (st ? st.mode & 0o7777 : 0o644);
  return {
    drift,
    describe: async () => {
      let text = '';
      if (body !== null && contentDrift) {
        const before = st ? await readContent(t.path, ctx.diff.maxFileSize) : null;
        text = await contentDiff(t.path, before, contentOf(body, ctx.diff.maxFileSize), ctx.diff);
        if (!st) {
          const who = uid !== undefined || gid !== undefined ? `, owner ${await ownerText({ uid: uid ?? process.getuid?.() ?? 0, gid: gid ?? process.getgid?.() ?? 0 })}` : '';
          text = text.replace(/^created .*\n/, (l) => `${l.slice(0, -1)} (mode ${octal(newMode)}${who})\n`);
        }
      }
      if (st) {
        if (t.mode !== undefined && (st.mode & 0o7777) !== t.mode) text += modeLine(st.mode, t.mode);
        if ((uid !== undefined && uid !== st.uid) || (gid !== undefined && gid !== st.gid)) text += await ownerLine(st, { uid: uid ?? st.uid, gid: gid ?? st.gid });
      }
      return text;
    },
    apply: async () => {
      if (drift.length === 0) return null;
      const owner = { uid: uid ?? st?.uid, gid: gid ?? st?.gid };
      if (body !== null && contentDrift) {
        const before = st ? { data: await readFile(t.path), mode: st.mode & 0o7777, uid: st.uid, gid: st.gid } : null;
        await writeAtomic(t.path, body, { mode: newMode, ...owner, validate: t.validate }, ctx);
        return before ? () => writeAtomic(t.path, before.data, before, ctx) : () => rm(t.path, { force: true });
      }
      // Only the mode or owner differ: changed in place, on the file itself (never through a link).
      await setMeta(t.path, { mode: newMode, ...owner });
      return () => setMeta(t.path, { mode: st!.mode & 0o7777, uid: st!.uid, gid: st!.gid });
    },
  };
}

async function setMeta(path: string, m: { mode: number; uid?: number; gid?: number }): Promise<void> {
  // O_NONBLOCK: a FIFO raced into the path since the look must not hang the run.
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW | constants.O_NONBLOCK);
  try {
    if (m.uid !== undefined || m.gid !== undefined) await fh.chown(m.uid ?? -1, m.gid ?? -1);
    await fh.chmod(m.mode); // after chown, which clears set-id bits
  } finally {
    await fh.close();
  }
}

/**
 * Write `data` to `path` through a temporary file beside it: mode and owner set, fsync'd, checked
 * by `validate` (argv, `%s` → the candidate), renamed over `path`, the directory fsync'd.
 */
export async function writeAtomic(
  path: string, data: Buffer, o: { mode: number; uid?: number; gid?: number; validate?: string[] }, ctx: Pick<MethodContext, 'env' | 'commandTimeoutMs'>,
): Promise<void> {
  await makeDir(dirname(path));
  // Unpredictable and exclusive (O_EXCL also refuses a planted link); `.tmp` so that the daemons
  // reading these directories (cron, sudo, apt, systemd, yum) ignore it meanwhile.
  const tmp = `${path}.capstan-${randomBytes(6).toString('hex')}.tmp`;
  const fh = await open(tmp, 'wx', 0o600);
  try {
    try {
      await fh.writeFile(data);
      if (o.uid !== undefined || o.gid !== undefined) await fh.chown(o.uid ?? -1, o.gid ?? -1);
      await fh.chmod(o.mode);
      await fh.sync();
    } finally {
      await fh.close();
    }
    if (o.validate) await check(o.validate, tmp, path, ctx);
    await rename(tmp, path);
  } catch (err) {
    await rm(tmp, { force: true }).catch(() => undefined);
    throw err;
  }
  await syncDir(dirname(path));
}

async function check(argv: string[], candidate: string, path: string, ctx: Pick<MethodContext, 'env' | 'commandTimeoutMs'>): Promise<void> {
  const [cmd, ...args] = argv.map((a) => a.replaceAll('%s', candidate));
  const r = await run(cmd!, args, ctx);
  if (r.code === 0) return;
  const said = (r.stderr.trim() || r.stdout.trim()).slice(-MAX_CHECKER_OUTPUT);
  throw capstanError('ERR_FILE_VALIDATE', `${argv[0]} refused the new ${path} (exit ${r.code}), left unchanged: ${said}`);
}

/** Make the rename durable. Some file systems refuse fsync on a directory: that is not an error. */
async function syncDir(dir: string): Promise<void> {
  const fh = await open(dir, constants.O_RDONLY).catch(() => null);
  await fh?.sync().catch(() => undefined);
  await fh?.close();
}

/**
 * A directory created with its mode and owner when it is missing (an existing one is left as it
 * is): ~/.ssh for authorized_keys.
 */
export function dirPart(path: string, mode: number, owner: () => Promise<{ uid: number; gid: number }>): Part {
  return {
    plan: async () => {
      const st = await lstatOrNull(path);
      if (st && !st.isDirectory()) throw capstanError('ERR_FILE_TYPE', `${path} is ${kindOf(st)}, not a directory`);
      if (st) return { drift: [], describe: async () => '', apply: async () => null };
      return {
        drift: [`${path} does not exist`],
        describe: async () => `created directory ${path} (mode ${octal(mode)})\n`,
        apply: async () => {
          const o = await owner();
          await makeDir(dirname(path));
          await mkdir(path, { mode });
          await chmod(path, mode);
          const fh = await open(path, constants.O_RDONLY | constants.O_DIRECTORY | constants.O_NOFOLLOW);
          await fh.chown(o.uid, o.gid).finally(() => fh.close());
          // Undone after the files in it (parts undo in reverse): empty again by then.
          return () => rmdir(path);
        },
      };
    },
  };
}

export interface ConvergeOptions {
  show_diff?: boolean;
  /** More drift than the parts' (a daemon that has not reloaded). */
  extraDrift?: () => Promise<string | null>;
  /** Run after the parts were applied, told which changed (daemon-reload, apt-get update). */
  after?: (changed: boolean[]) => Promise<void>;
  /** Undo every part's change when `after` (or a later part) fails, so the next run tries again. */
  rollback?: boolean;
}

/**
 * converge() over parts: drift is every part's, the diff is every part's in order, a repair
 * applies them in order then runs `after`.
 */
export async function convergeParts(
  ctx: MethodContext, component: string, key: string, parts: Part[], words: { ok: string; repaired: string }, o: ConvergeOptions = {},
): Promise<Outcome> {
  let plans: PartPlan[] = [];
  const planAll = async () => {
    plans = [];
    for (const p of parts) plans.push(await p.plan());
    return plans;
  };
  return converge(
    ctx, component, key,
    async () => {
      const drift = (await planAll()).flatMap((p) => p.drift);
      const extra = await o.extraDrift?.();
      if (extra) drift.push(extra);
      return drift.length > 0 ? drift.join('; ') : null;
    },
    async () => {
      const undo: Undo[] = [];
      const changed: boolean[] = [];
      try {
        for (const p of parts) {
          const u = await (await p.plan()).apply();
          changed.push(u !== null);
          if (u) undo.push(u);
        }
        await o.after?.(changed);
      } catch (err) {
        if (o.rollback) for (const u of undo.reverse()) await u().catch((e: Error) => ctx.log.warn({ err: e, key }, 'undo failed'));
        throw err;
      }
    },
    words,
    o.show_diff === false ? undefined : async () => (await Promise.all(plans.map((p) => p.describe()))).join(''),
  );
}
