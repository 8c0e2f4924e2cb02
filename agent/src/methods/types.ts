/**
 * Generic methods: one idempotent check-and-repair each. A method looks, and in enforce mode
 * repairs and looks again; in audit mode (or a dry run) it only looks. Outcomes are mapped to
 * RUDDER's report types by the policy engine.
 */
import { execFile } from 'node:child_process';
import { type Logger } from '@capstan/shared/log';
import { type MethodSpec } from '@capstan/shared/policy/methods';
import { capDiff, type ReportDiff } from '@capstan/shared/runlog/diff';
import type { DiffSettings } from './diff.js';

export type Status = 'success' | 'repaired' | 'error' | 'compliant' | 'noncompliant' | 'na';

export interface Outcome {
  component: string;
  key: string;
  status: Status;
  message: string;
  /** What the change changed (or would change), capped: written as a diff report after the outcome's report. */
  diff?: ReportDiff;
  /** The error code of an `error` outcome that came from a coded error (not written to the run log). */
  code?: string;
}

export interface MethodContext {
  mode: 'enforce' | 'audit';
  /** Look only, like audit, but report what enforce would have done. */
  dryRun: boolean;
  log: Logger;
  /** PATH and other environment for commands (tests put fake tools first on PATH). */
  env: NodeJS.ProcessEnv;
  commandTimeoutMs: number;
  /** Base directory of sysctl values (/proc/sys; a temporary tree in tests). */
  sysctlRoot: string;
  /** Where `modules` (the loaded kernel modules) is read: /proc unless a test points elsewhere. */
  procRoot?: string;
  /** How file changes are described (cap, secret paths). */
  diff: DiffSettings;
  /** Fetch a shared-folder file from the relay; resolves to its bytes. `sha256`: what the directive expects. */
  fetchShared: (path: string, sha256?: string) => Promise<Buffer>;
  /**
   * Every directive of the bundle being applied, so that a method can see what else the node is
   * assigned (archive_from_shared_folder's `purge` keeps the bundles other directives install).
   */
  siblings?: ReadonlyArray<{ method: string; params: Record<string, unknown> }>;
}

/** A method: the shared parameter spec (validate, components, auditOnly) plus how to apply it. */
export interface Method<P> extends MethodSpec<P> {
  apply: (params: P, ctx: MethodContext) => Promise<Outcome[]>;
}

export type ParamsOf<S> = S extends MethodSpec<infer P> ? P : never;





export interface RunResult {
  code: number;
  stdout: string;
  stderr: string;
}

/**
 * Run a command without a shell, bounded in time and output; never throws for a non-zero exit.
 * `input` is written to its standard input (secrets go there, never into the arguments, which
 * every user of the host can read in /proc).
 */
export function run(cmd: string, args: string[], ctx: Pick<MethodContext, 'env' | 'commandTimeoutMs'>, opts: { input?: string } = {}): Promise<RunResult> {
  return new Promise((resolve) => {
    const child = execFile(cmd, args, { env: ctx.env, timeout: ctx.commandTimeoutMs, maxBuffer: 4 * 1024 * 1024 }, (err, stdout, stderr) => {
      if (err && typeof (err as { code?: unknown }).code !== 'number') {
        const e = err as NodeJS.ErrnoException & { killed?: boolean };
        resolve({ code: 127, stdout: String(stdout ?? ''), stderr: e.killed ? `timed out after ${ctx.commandTimeoutMs} ms` : e.message });
        return;
      }
      resolve({ code: err ? Number((err as { code: number }).code) : 0, stdout: String(stdout), stderr: String(stderr) });
    });
    if (opts.input !== undefined) {
      // A command that exits without reading it must not fail the run with EPIPE.
      child.stdin?.on('error', () => undefined);
      child.stdin?.end(opts.input);
    }
  });
}

/**
 * The shape every method shares: look; if wrong and allowed, repair and look again.
 * `check` resolves to null when compliant, or to a description of the drift. `describe`, when
 * given, says what the repair changes (or in audit and dry runs would change), computed before
 * anything is touched; it becomes the outcome's diff, capped at `max_diff_bytes`. A describe that
 * fails leaves a note, never an error: the diff is information, the outcome is the report.
 */
export async function converge(
  ctx: MethodContext,
  component: string,
  key: string,
  check: () => Promise<string | null>,
  repair: () => Promise<void>,
  words: { ok: string; repaired: string },
  describe?: () => Promise<string>,
): Promise<Outcome> {
  try {
    const drift = await check();
    if (drift === null) return { component, key, status: ctx.mode === 'audit' ? 'compliant' : 'success', message: words.ok };
    const diff = describe
      ? capDiff(await describe().catch((err: Error) => `diff not available: ${err.message}\n`), ctx.diff.maxBytes)
      : undefined;
    const withDiff = diff ? { diff } : {};
    if (ctx.mode === 'audit') return { component, key, status: 'noncompliant', message: drift, ...withDiff };
    if (ctx.dryRun) return { component, key, status: 'noncompliant', message: `would repair: ${drift}`, ...withDiff };
    await repair();
    const after = await check();
    if (after !== null) return { component, key, status: 'error', message: `repair did not converge: ${after}` };
    return { component, key, status: 'repaired', message: `${words.repaired} (${drift})`, ...withDiff };
  } catch (err) {
    const code = (err as { code?: unknown }).code;
    return { component, key, status: 'error', message: (err as Error).message, ...(typeof code === 'string' && code.startsWith('ERR_') ? { code } : {}) };
  }
}

/** A method's describe, unless its directive says `show_diff = false`. */
export const unlessHidden = (p: { show_diff?: boolean }, describe: () => Promise<string>) => (p.show_diff === false ? undefined : describe);
