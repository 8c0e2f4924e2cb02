/**
 * The node's own facts, from a facts directory (default /etc/capstan/facts.d/), in the manner of
 * Puppet's external facts: each `*.json` or `*.toml` file is an object of facts; each executable
 * file is run (no arguments, no shell) and must print one JSON object on stdout. Each one is
 * bounded in time and size; one that fails (syntax, exit status, time-out, too large, not an
 * object) is reported under `facts_errors` and the others still count. The facts are merged in
 * file-name order (a later file's top-level key wins) under the inventory's `facts`.
 *
 * The agent runs as root, so a source is trusted as sshd's StrictModes trusts a key file: it and
 * every directory above it must be owned by root (or the agent's own user) and writable by no
 * group or other user; a root-owned sticky directory (/tmp) above the facts directory is allowed,
 * since nobody else can rename what root owns in it. A refused source is never read or run.
 * An executable runs in a process group of its own, which is killed whole when it ends, so
 * nothing it started in the background outlives it.
 */
import { spawn } from 'node:child_process';
import { constants, type Stats } from 'node:fs';
import { access, lstat, open, readdir, realpath } from 'node:fs/promises';
import { dirname, join } from 'node:path';
import { parseTomlText } from '@capstan/shared/config';

export interface FactsOptions {
  dir: string;
  /** Longest an executable may run (ms); it is killed beyond. */
  timeoutMs: number;
  /** Largest file read or executable output kept (bytes). */
  maxBytes: number;
  /** Most files looked at; the rest (in name order) are reported and skipped. */
  maxFiles: number;
}

export interface FactsResult {
  facts: Record<string, unknown>;
  errors: Record<string, string>;
}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

async function readCapped(path: string, maxBytes: number): Promise<string> {
  const fh = await open(path, constants.O_RDONLY | constants.O_NOFOLLOW);
  try {
    const buf = Buffer.alloc(maxBytes + 1);
    let n = 0;
    for (;;) {
      const { bytesRead } = await fh.read(buf, n, buf.length - n, null);
      if (bytesRead === 0) break;
      n += bytesRead;
      if (n > maxBytes) throw new Error(`larger than ${maxBytes} bytes`);
    }
    return buf.subarray(0, n).toString('utf8');
  } finally {
    await fh.close();
  }
}

function runExecutable(path: string, opts: FactsOptions): Promise<string> {
  return new Promise((resolve, reject) => {
    // detached: a process group of its own, so that its background children can be killed with it.
    const child = spawn(path, [], { detached: true, stdio: ['ignore', 'pipe', 'ignore'], env: { ...process.env, LC_ALL: 'C' } });
    const chunks: Buffer[] = [];
    let bytes = 0;
    let failure: Error | null = null;
    let exitCode: number | null = null;
    const killGroup = () => {
      try {
        if (child.pid !== undefined) process.kill(-child.pid, 'SIGKILL');
      } catch {
        // the group is gone already
      }
    };
    const timer = setTimeout(() => {
      failure ??= new Error(`ran longer than ${opts.timeoutMs} ms`);
      killGroup();
    }, opts.timeoutMs);
    child.stdout.on('data', (c: Buffer) => {
      bytes += c.length;
      if (bytes > opts.maxBytes) {
        failure ??= new Error(`printed more than ${opts.maxBytes} bytes`);
        killGroup();
      } else {
        chunks.push(c);
      }
    });
    child.on('error', (err) => {
      failure ??= err;
    });
    // The leader ended: what it left running in its group ends too (and lets stdout close).
    child.on('exit', (code) => {
      exitCode = code;
      killGroup();
    });
    child.on('close', () => {
      clearTimeout(timer);
      killGroup();
      if (failure) return reject(new Error(failure.message.split('\n')[0] ?? 'failed'));
      if (exitCode !== 0) return reject(new Error(exitCode === null ? 'killed by a signal' : `exited with status ${exitCode}`));
      resolve(Buffer.concat(chunks).toString('utf8'));
    });
  });
}

/** Why `st` (of `path`) may not be trusted by a root agent, or null: owner and write bits. */
function untrusted(path: string, st: Stats, stickyOk: boolean): string | null {
  const me = process.geteuid?.() ?? 0;
  if (st.uid !== 0 && st.uid !== me) return `${path} is owned by uid ${st.uid}, not root`;
  if ((st.mode & 0o022) !== 0 && !(stickyOk && st.isDirectory() && (st.mode & 0o1000) !== 0)) {
    return `${path} is writable by its group or others (mode ${(st.mode & 0o7777).toString(8).padStart(4, '0')})`;
  }
  return null;
}

/** Why the facts directory and the directories above it may not be trusted, or null. */
async function untrustedChain(dir: string): Promise<string | null> {
  const real = await realpath(dir);
  for (let d = real; ; d = dirname(d)) {
    const why = untrusted(d, await lstat(d), d !== real);
    if (why) return why;
    if (d === dirname(d)) return null;
  }
}

async function isExecutable(path: string): Promise<boolean> {
  return access(path, constants.X_OK).then(() => true, () => false);
}

/** Read every fact source of `opts.dir`; a missing directory is no facts, not an error. */
export async function readFacts(opts: FactsOptions): Promise<FactsResult> {
  const facts: Record<string, unknown> = {};
  const errors: Record<string, string> = {};
  let names: string[];
  try {
    names = (await readdir(opts.dir)).filter((n) => !n.startsWith('.')).sort();
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return { facts, errors };
    return { facts, errors: { [opts.dir]: (err as Error).message } };
  }
  try {
    const why = await untrustedChain(opts.dir);
    if (why) return { facts, errors: { [opts.dir]: `refused: ${why}` } };
  } catch (err) {
    return { facts, errors: { [opts.dir]: (err as Error).message } };
  }
  for (const [i, name] of names.entries()) {
    if (i >= opts.maxFiles) {
      errors[name] = `skipped: more than ${opts.maxFiles} files in ${opts.dir}`;
      continue;
    }
    const path = join(opts.dir, name);
    try {
      const st = await lstat(path);
      if (!st.isFile()) continue;
      const isSource = name.endsWith('.json') || name.endsWith('.toml') || (await isExecutable(path));
      if (!isSource) continue;
      const why = untrusted(path, st, false);
      if (why) throw new Error(`refused: ${why}`);
      let value: unknown;
      if (await isExecutable(path)) {
        value = JSON.parse(await runExecutable(path, opts));
      } else if (name.endsWith('.json')) {
        value = JSON.parse(await readCapped(path, opts.maxBytes));
      } else if (name.endsWith('.toml')) {
        value = parseTomlText(await readCapped(path, opts.maxBytes));
      } else {
        continue; // a README or a backup file: not a fact source
      }
      if (!isObject(value)) throw new Error('is not an object of facts');
      Object.assign(facts, JSON.parse(JSON.stringify(value)) as Record<string, unknown>);
    } catch (err) {
      errors[name] = ((err as Error).message || String(err)).split('\n')[0]!.slice(0, 500);
    }
  }
  return { facts, errors };
}
