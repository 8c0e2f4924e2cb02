import { CapstanError } from './errors.js';

/**
 * The logger shape every module accepts. pino's Logger satisfies it; tests pass `silentLogger`.
 * `shared` never creates a logger of its own (STYLE.md): cli.ts makes one and hands it down.
 */
export interface LogFn {
  (obj: object, msg?: string): void;
  (msg: string): void;
}

export interface Logger {
  trace: LogFn;
  debug: LogFn;
  info: LogFn;
  warn: LogFn;
  error: LogFn;
  child(bindings: Record<string, unknown>): Logger;
}

const noop: LogFn = () => {};

/** What a logged error becomes: a coded, expected condition says its code and message only. */
export function errorForLog(err: unknown, full: (err: Error) => unknown): unknown {
  // Coded errors are conditions the program expects (bad input, a refusal, a directory it may not
  // make): their stack says nothing an operator can use. ERR_INTERNAL and uncoded errors are bugs
  // or crashes, and keep theirs.
  if (err instanceof CapstanError && err.code !== 'ERR_INTERNAL') return { type: err.name, code: err.code, message: err.message };
  // A system call's refusal (ECONNREFUSED, ENOSPC…) is the environment speaking, not a bug.
  const sys = err as NodeJS.ErrnoException;
  if (err instanceof Error && typeof sys.code === 'string' && typeof sys.syscall === 'string') {
    return { type: err.name, code: sys.code, message: err.message, syscall: sys.syscall };
  }
  return err instanceof Error ? full(err) : err;
}

/**
 * The logger options every program uses (pino's shape; `shared` creates no logger itself):
 * a level name (`"level":"warn"`, what journald-reading tools and people expect) instead of
 * pino's number, and `err` through errorForLog with pino's own serializer for the rest.
 */
export function logOptions(program: string, level: string, fullError: (err: Error) => unknown) {
  return {
    level,
    base: { program },
    formatters: { level: (label: string) => ({ level: label }) },
    serializers: { err: (err: unknown) => errorForLog(err, fullError) },
  };
}

export const silentLogger: Logger = {
  trace: noop,
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
  child: () => silentLogger,
};
