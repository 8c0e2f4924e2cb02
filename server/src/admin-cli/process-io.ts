/**
 * The process behind a CliIo, for the two programs that run the admin verbs (`capstan`,
 * `capstan-server`): stdout, stderr, the environment and the exit code. Only their cli.ts use it.
 */
import type { Command } from 'commander';
import { errorLine, EXIT } from './output.js';
import type { CliIo } from './kit.js';

/** Thrown by `exit` so that nothing after it runs while stdout drains. */
class ExitSignal extends Error {}

export function processIo(): CliIo {
  return {
    out: (text) => void process.stdout.write(text),
    err: (text) => void process.stderr.write(text),
    env: process.env,
    isTTY: process.stdout.isTTY === true,
    exit: (code) => {
      // Let stdout drain (a large --json answer piped to a slow reader) before leaving.
      process.exitCode = code;
      process.stdout.write('', () => process.exit(code));
      throw new ExitSignal();
    },
    sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
  };
}

/** Parse argv and run; a crash is one line on stderr and exit 1. */
export function runProgram(program: Command, name: string): void {
  program.parseAsync(process.argv).catch((err: unknown) => {
    if (err instanceof ExitSignal) return;
    process.stderr.write(errorLine(err, name));
    process.exit(EXIT.ERROR);
  });
}
