/**
 * Command-line usage errors (unknown option or command, missing argument) exit 2 in every
 * program, like a configuration error: commander's own default is 1, which Capstan's exit codes
 * reserve for crashes, and systemd's RestartPreventExitStatus=2 3 must not restart a unit whose
 * command line is wrong. Typed structurally so that `shared` does not depend on commander.
 */
import { EXIT_CONFIG } from './protocol.js';

interface UsageCommand {
  exitOverride(fn: (err: { exitCode: number }) => void): unknown;
  configureOutput(o: { outputError: (text: string, write: (text: string) => void) => void }): unknown;
}

/** Call on the top command before its subcommands are made: they inherit both settings. */
export function usageErrorsExit2(program: UsageCommand, name: string, exit: (code: number) => never): void {
  // Help and --version keep exit code 0; everything else commander refuses is a usage error.
  program.exitOverride((err) => exit(err.exitCode === 0 ? 0 : EXIT_CONFIG));
  program.configureOutput({ outputError: (text, write) => write(`${name}: ${text}`) });
}

/** The exit codes every program shares, for `--help`. */
export const EXIT_CODES_HELP = 'Exit codes: 0 ok, 1 crash, 2 usage or configuration error, 3 other start-up error';
