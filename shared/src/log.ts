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

export const silentLogger: Logger = {
  trace: noop,
  debug: noop,
  info: noop,
  warn: noop,
  error: noop,
  child: () => silentLogger,
};
