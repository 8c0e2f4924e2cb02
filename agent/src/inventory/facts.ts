/**
 * The node's own facts, from a facts directory (default /etc/capstan/facts.d/), in the manner of
 * Puppet's external facts: each `*.json` or `*.toml` file is an object of facts; each executable
 * file is run (no arguments, no shell) and must print one JSON object on stdout. Each one is
 * bounded in time and size; one that fails (syntax, exit status, time-out, too large, not an
 * object) is reported under `facts_errors` and the others still count. The facts are merged in
 * file-name order (a later file's top-level key wins) under the inventory's `facts`.
 */
import { execFile } from 'node:child_process';
import { constants } from 'node:fs';
import { access, lstat, open, readdir } from 'node:fs/promises';
import { join } from 'node:path';
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
    execFile(path, [], { timeout: opts.timeoutMs, killSignal: 'SIGKILL', maxBuffer: opts.maxBytes, env: { ...process.env, LC_ALL: 'C' } }, (err, stdout) => {
      if (!err) return resolve(stdout);
      const e = err as NodeJS.ErrnoException & { killed?: boolean; code?: unknown };
      if (e.code === 'ERR_CHILD_PROCESS_STDIO_MAXBUFFER') return reject(new Error(`printed more than ${opts.maxBytes} bytes`));
      if (e.killed) return reject(new Error(`ran longer than ${opts.timeoutMs} ms`));
      reject(new Error(typeof e.code === 'number' ? `exited with status ${e.code}` : (e.message.split('\n')[0] ?? 'failed')));
    });
  });
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
  for (const [i, name] of names.entries()) {
    if (i >= opts.maxFiles) {
      errors[name] = `skipped: more than ${opts.maxFiles} files in ${opts.dir}`;
      continue;
    }
    const path = join(opts.dir, name);
    try {
      const st = await lstat(path);
      if (!st.isFile()) continue;
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
