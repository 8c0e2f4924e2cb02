/**
 * fstab(5) and /proc/self/mountinfo as the mount methods read them, and the one edit they make to
 * fstab: the line of one mount point set (in place, the first such line; any other line for that
 * mount point dropped) or removed, every other line, comment and blank kept byte for byte.
 */

/** fstab and mountinfo write space, tab, newline and backslash as octal escapes (\040 …). */
export const unescapeField = (s: string): string => s.replace(/\\([0-7]{3})/g, (_, o: string) => String.fromCharCode(parseInt(o, 8)));
export const escapeField = (s: string): string => s.replace(/[ \t\n\\]/g, (c) => `\\${c.charCodeAt(0).toString(8).padStart(3, '0')}`);

export interface FstabEntry {
  device: string;
  path: string;
  fstype: string;
  options: string[];
  dump: number;
  pass: number;
}

/** One fstab line, unescaped; null for a comment, a blank or a line of fewer than 2 fields. */
export function parseFstabLine(line: string): FstabEntry | null {
  const f = line.trim().split(/\s+/);
  if (f[0] === undefined || f[0] === '' || f[0].startsWith('#') || f.length < 2) return null;
  return {
    device: unescapeField(f[0]),
    path: unescapeField(f[1]!),
    fstype: f[2] ?? 'auto',
    options: (f[3] ?? 'defaults').split(','),
    dump: Number(f[4] ?? 0) || 0,
    pass: Number(f[5] ?? 0) || 0,
  };
}

export const formatFstabLine = (e: FstabEntry): string =>
  [escapeField(e.device), escapeField(e.path), e.fstype, e.options.join(','), String(e.dump), String(e.pass)].join(' ');

/** A mount point compared as the kernel does: without trailing slashes. */
const samePath = (a: string, b: string) => (a.replace(/\/+$/, '') || '/') === (b.replace(/\/+$/, '') || '/');

export const sameEntry = (a: FstabEntry, b: FstabEntry): boolean =>
  a.device === b.device && samePath(a.path, b.path) && a.fstype === b.fstype && a.options.join(',') === b.options.join(',') && a.dump === b.dump && a.pass === b.pass;

/** The entries of `text` for mount point `path`. */
export const fstabEntries = (text: string, path: string): FstabEntry[] =>
  text.split('\n').map(parseFstabLine).filter((e): e is FstabEntry => e !== null && samePath(e.path, path));

/**
 * `text` with `entry` as the only line for its mount point: the first existing line for it is
 * replaced where it stands (left as written when it already says the same), later ones dropped;
 * without one, the line is appended. `entry` null removes every line for `path`.
 */
export function setFstab(text: string, path: string, entry: FstabEntry | null): string {
  const lines = text === '' ? [] : text.replace(/\n$/, '').split('\n');
  const out: string[] = [];
  let placed = entry === null;
  for (const line of lines) {
    const e = parseFstabLine(line);
    if (e === null || !samePath(e.path, path)) {
      out.push(line);
      continue;
    }
    if (placed) continue;
    out.push(sameEntry(e, entry!) ? line : formatFstabLine(entry!));
    placed = true;
  }
  if (!placed) out.push(formatFstabLine(entry!));
  return out.length ? `${out.join('\n')}\n` : '';
}

export interface MountInfo {
  /** The mounted directory of its file system (a bind mount's source within it). */
  root: string;
  path: string;
  /** Per-mount options (rw, nosuid, relatime, …). */
  options: string[];
  fstype: string;
  source: string;
  /** Super-block options (size=…, mode=…, errors=…). */
  superOptions: string[];
}

/** /proc/self/mountinfo: `id parent maj:min root path options [optional…] - fstype source superopts`. */
export function parseMountInfo(text: string): MountInfo[] {
  const out: MountInfo[] = [];
  for (const line of text.split('\n')) {
    const f = line.split(' ');
    const dash = f.indexOf('-', 6);
    if (dash < 0 || f.length < dash + 4) continue;
    out.push({
      root: unescapeField(f[3]!), path: unescapeField(f[4]!), options: f[5]!.split(','),
      fstype: f[dash + 1]!, source: unescapeField(f[dash + 2]!), superOptions: f[dash + 3]!.split(','),
    });
  }
  return out;
}

/** The mount at `path` a process sees: the last one listed there (mounts stack). */
export const mountAt = (mounts: MountInfo[], path: string): MountInfo | undefined => mounts.filter((m) => samePath(m.path, path)).at(-1);

/**
 * Per-mount flags the kernel always shows when set, with the option that clears each one. Only
 * these and `key=value` options the kernel shows are compared: others (defaults, auto, nofail,
 * _netdev, user, x-…) live in fstab only, and a file system may leave a value out when it is its
 * default (tmpfs omits uid=0), which must not read as drift.
 */
const FLAGS: Record<string, string> = {
  ro: 'rw', nosuid: 'suid', nodev: 'dev', noexec: 'exec', noatime: 'atime', nodiratime: 'diratime', relatime: 'norelatime', sync: 'async',
};
const CLEARS = new Map(Object.entries(FLAGS).map(([set, clear]) => [clear, set]));

/** 64m, 65536k, 67108864: one number of bytes; null when not a plain size. */
function bytes(v: string): number | null {
  const m = /^(\d+)([kmgt]?)$/i.exec(v);
  if (!m) return null;
  return Number(m[1]) * 1024 ** ' kmgt'.indexOf((m[2] || ' ').toLowerCase());
}

/** The wanted options the mount does not have, as `noexec` or `size=64m (is 32768k)`; empty when it has them all. */
export function optionDrift(wanted: string[], mount: MountInfo): string[] {
  const shown = [...mount.options, ...mount.superOptions];
  const drift: string[] = [];
  for (const o of wanted) {
    const [key, value] = o.includes('=') ? [o.slice(0, o.indexOf('=')), o.slice(o.indexOf('=') + 1)] : [o, undefined];
    if (value === undefined) {
      if (key in FLAGS && !shown.includes(key)) drift.push(o);
      else if (CLEARS.has(key) && shown.includes(CLEARS.get(key)!)) drift.push(o);
      continue;
    }
    const have = shown.find((s) => s.startsWith(`${key}=`))?.slice(key.length + 1);
    // A share of memory (tmpfs size=50%) is shown in bytes: not comparable.
    if (have === undefined || have === value || value.endsWith('%')) continue;
    const [a, b] = [bytes(have), bytes(value)];
    if (a === null || b === null || a !== b) drift.push(`${o} (is ${have})`);
  }
  return drift;
}
