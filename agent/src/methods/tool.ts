/**
 * What the system methods share: running a host tool whose failure is the outcome's error, finding
 * a tool on PATH, and the small text files they edit (fstab, hostname, modules-load.d) with the
 * diff of each edit.
 */
import { access, readFile } from 'node:fs/promises';
import { constants } from 'node:fs';
import { delimiter, dirname, join } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { contentDiff, contentOf } from './diff.js';
import { installFile } from './files.js';
import { run, type MethodContext, type RunResult } from './types.js';

export async function onPath(cmd: string, env: NodeJS.ProcessEnv): Promise<boolean> {
  for (const dir of (env.PATH ?? '').split(delimiter)) {
    if (!dir) continue;
    try {
      await access(join(dir, cmd), constants.X_OK);
      return true;
    } catch {
      /* next */
    }
  }
  return false;
}

export interface ToolOptions {
  /** Written to the tool's standard input. */
  input?: string;
  /** Text that must never reach a message (a password hash): masked in what the tool wrote. */
  secret?: string;
  /** Extra environment (DEBIAN_FRONTEND, …) over the context's. */
  env?: NodeJS.ProcessEnv;
}

/** The last non-empty line a tool wrote, masked and bounded: what an admin reads in the report. */
export function lastLine(text: string, secret?: string): string {
  const masked = secret ? text.split(secret).join('<hidden>') : text;
  const line = masked.trim().split('\n').pop()?.trim() ?? '';
  return line.length > 300 ? `${line.slice(0, 300)}…` : line;
}

/**
 * Run a host tool (no shell, bounded by `[methods] command_timeout`); anything but exit 0 throws
 * ERR_METHOD_TOOL naming the tool, its code and the last line of its stderr (or stdout).
 */
export async function tool(cmd: string, args: string[], ctx: Pick<MethodContext, 'env' | 'commandTimeoutMs'>, opts: ToolOptions = {}): Promise<RunResult> {
  const r = await run(cmd, args, opts.env ? { ...ctx, env: { ...ctx.env, ...opts.env } } : ctx, { input: opts.input });
  if (r.code !== 0) throw toolError(cmd, r, opts.secret);
  return r;
}

/** ERR_METHOD_TOOL for a tool that did not exit 0: its code and what it said last. */
export function toolError(cmd: string, r: RunResult, secret?: string) {
  const said = lastLine(r.stderr, secret) || lastLine(r.stdout, secret);
  return capstanError('ERR_METHOD_TOOL', `${cmd} ${r.code === 127 && r.stdout === '' ? 'could not run' : `exited ${r.code}`}${said ? `: ${said}` : ''}`);
}

/** A text file's content, or null when it does not exist. */
export async function readText(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/** Replace a small text file atomically (files.ts installFile), making its directory when needed. */
export async function writeText(path: string, text: string, mode?: number): Promise<void> {
  await makeDir(dirname(path));
  await installFile(path, text, mode);
}

/** The diff report's text for `path` going from `before` (null: absent) to `after`. */
export function textDiff(path: string, before: string | null, after: string, ctx: MethodContext): Promise<string> {
  if (before === after) return Promise.resolve('');
  const side = (s: string) => contentOf(Buffer.from(s), ctx.diff.maxFileSize);
  return contentDiff(path, before === null ? null : side(before), side(after), ctx.diff);
}

/** The lines of a file without comments (`#`) and blanks, trimmed. */
export const meaningfulLines = (text: string | null): string[] =>
  (text ?? '').split('\n').map((l) => l.replace(/#.*/, '').trim()).filter((l) => l !== '');
