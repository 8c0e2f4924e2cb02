/**
 * Command-line usage errors (unknown option or command, missing argument) exit 2 in every
 * program, like a configuration error: commander's own default is 1, which Capstan's exit codes
 * reserve for crashes, and systemd's RestartPreventExitStatus=2 3 must not restart a unit whose
 * command line is wrong. Typed structurally so that `shared` does not depend on commander.
 * The daemons also tell a configuration error (exit 2) from other start-up failures (exit 3)
 * alike, and word it alike on stderr.
 */
import { isCapstanError } from './errors.js';
import { EXIT_CONFIG, EXIT_OK } from './protocol.js';

interface UsageCommand {
  exitOverride(fn: (err: { exitCode: number }) => void): unknown;
  configureOutput(o: { outputError: (text: string, write: (text: string) => void) => void }): unknown;
}

/** Call on the top command before its subcommands are made: they inherit both settings. */
export function usageErrorsExit2(program: UsageCommand, name: string, exit: (code: number) => never): void {
  // Help and --version keep exit code 0; everything else commander refuses is a usage error.
  program.exitOverride((err) => exit(err.exitCode === EXIT_OK ? EXIT_OK : EXIT_CONFIG));
  program.configureOutput({ outputError: (text, write) => write(`${name}: ${text}`) });
}

/** The exit codes every program shares, for `--help`. */
export const EXIT_CODES_HELP = 'Exit codes: 0 ok, 1 crash, 2 usage or configuration error, 3 other start-up error';

/** A start-up failure that is the configuration's (exit 2) rather than another's (exit 3). */
export function isConfigError(err: unknown): boolean {
  return isCapstanError(err) && (err.code === 'ERR_CONFIG' || err.code === 'ERR_CONFIG_SYNTAX' || err.code === 'ERR_PLAINTEXT_LISTEN');
}

/** A configuration error for stderr: codes other than the generic ones lead the line (ERR_PLAINTEXT_LISTEN). */
export function configErrorText(err: unknown): string {
  return isCapstanError(err) ? (err.code.startsWith('ERR_CONFIG') ? err.message : `${err.code}: ${err.message}`) : String(err);
}
