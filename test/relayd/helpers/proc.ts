/**
 * The real capstan-relayd as a child process, like test/helpers/programs.ts but with control of
 * the environment and of the signal used to stop it (SIGKILL for crash tests, SIGHUP for reload).
 */
import type { ChildProcess } from 'node:child_process';
import { BIN, startProgram } from '../../helpers/programs.js';

export interface RelayProc {
  url: string;
  proc: ChildProcess;
  stdout: string[];
  stderr: string[];
  /** Send a signal and wait for the exit code (null when killed by the signal). */
  signal(sig: NodeJS.Signals): Promise<number | null>;
  exited: Promise<number | null>;
}

export async function startRelayd(args: string[], opts: { env?: NodeJS.ProcessEnv; timeoutMs?: number } = {}): Promise<RelayProc> {
  const r = await startProgram(BIN.relayd, args, opts.timeoutMs, opts.env ?? process.env);
  return { url: r.url, proc: r.proc, stdout: r.output, stderr: r.stderr, exited: r.exited, signal: r.signal };
}
