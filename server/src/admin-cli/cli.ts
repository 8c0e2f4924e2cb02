#!/usr/bin/env node
/**
 * capstan: the remote admin CLI (docs/cli.md). Only this module touches argv, the environment,
 * stdout/stderr and the exit code; the verbs are in commands.ts.
 */
import { buildProgram } from './commands.js';
import { EXIT, errorLine } from './output.js';

const exit = (code: number): never => {
  // Let stdout drain (a large --json answer piped to a slow reader) before leaving.
  process.exitCode = code;
  process.stdout.write('', () => process.exit(code));
  throw new ExitSignal();
};
class ExitSignal extends Error {}

const program = buildProgram({
  out: (text) => void process.stdout.write(text),
  err: (text) => void process.stderr.write(text),
  env: process.env,
  isTTY: process.stdout.isTTY === true,
  exit,
  sleep: (ms) => new Promise((r) => setTimeout(r, ms)),
});

program.parseAsync(process.argv).catch((err: unknown) => {
  if (err instanceof ExitSignal) return;
  process.stderr.write(errorLine(err));
  process.exit(EXIT.ERROR);
});
