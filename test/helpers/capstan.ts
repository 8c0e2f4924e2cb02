/**
 * The admin CLI in process: `capstan <args>` (or another host's program) with its output, its
 * error lines and its exit code, nothing written to the test's own stdout.
 */
import { buildProgram, REMOTE, type CliIo, type ProgramHost } from '@capstan/server/admin-cli/commands';

export class Exit extends Error {
  constructor(readonly code: number) {
    super(`exit ${code}`);
  }
}

export interface CliRun {
  code: number;
  out: string;
  err: string;
}

/** A CliIo that records; `exit` throws Exit. */
export function recordingIo(env: Record<string, string | undefined>, isTTY = false): CliIo & { output(): { out: string; err: string } } {
  let out = '';
  let err = '';
  return {
    out: (s) => void (out += s),
    err: (s) => void (err += s),
    env: { HOME: '/nonexistent', ...env },
    isTTY,
    exit: (code) => {
      throw new Exit(code);
    },
    sleep: async () => undefined,
    output: () => ({ out, err }),
  };
}

/** Run `capstan <args>` in process; its output, errors and exit code (-1: it never exited). */
export async function capstan(args: string[], env: Record<string, string | undefined> = {}, isTTY = false, host: ProgramHost = REMOTE): Promise<CliRun> {
  const io = recordingIo(env, isTTY);
  try {
    await buildProgram(io, host).parseAsync(['node', host.name, ...args]);
    return { code: -1, ...io.output() };
  } catch (e) {
    if (e instanceof Exit) return { code: e.code, ...io.output() };
    throw e;
  }
}
