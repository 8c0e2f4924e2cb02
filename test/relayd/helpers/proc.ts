/**
 * The real capstan-relayd as a child process, like test/helpers/programs.ts but with control of
 * the environment and of the signal used to stop it (SIGKILL for crash tests, SIGHUP for reload).
 */
import { spawn, type ChildProcess } from 'node:child_process';
import { createInterface } from 'node:readline';
import { BIN, programCommand } from '../../helpers/programs.js';

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
  const proc = spawn(...programCommand(BIN.relayd, args), { stdio: ['ignore', 'pipe', 'pipe'], env: opts.env ?? process.env });
  const stdout: string[] = [];
  const stderr: string[] = [];
  proc.stderr!.on('data', (d: Buffer) => stderr.push(d.toString()));
  const exited = new Promise<number | null>((res) => proc.once('exit', (code) => res(code)));
  const url = await new Promise<string>((resolve, reject) => {
    const timer = setTimeout(() => reject(new Error(`relayd not ready: ${stderr.join('')}`)), opts.timeoutMs ?? 20_000);
    void exited.then((code) => {
      clearTimeout(timer);
      reject(new Error(`relayd exited with ${code}: ${stderr.join('')}`));
    });
    createInterface({ input: proc.stdout! }).on('line', (line) => {
      stdout.push(line);
      if (line.startsWith('{"ready":true')) {
        clearTimeout(timer);
        resolve((JSON.parse(line) as { url: string }).url);
      }
    });
  });
  return {
    url,
    proc,
    stdout,
    stderr,
    exited,
    signal: async (sig) => {
      if (proc.exitCode === null && proc.signalCode === null) proc.kill(sig);
      return exited;
    },
  };
}
