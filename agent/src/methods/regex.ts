/**
 * Directive regular expressions, run with a time bound. A pattern such as `(a+)+$` backtracks
 * exponentially on the wrong line, and JavaScript's engine offers no bound of its own; a script
 * run in a vm context with a timeout is interrupted, regex included (ERR_REGEX_TIMEOUT), so one
 * bad directive costs its own error, never the run. Inputs are bounded by MAX_EDIT_SIZE.
 */
import vm from 'node:vm';
import { capstanError } from '@capstan/shared/errors';

export const REGEX_TIME_LIMIT_MS = 1000;

// Data in, fixed code: the directive's text is never code here, only the pattern of a RegExp.
const sandbox = vm.createContext({});
const REPLACE = new vm.Script('input.replace(new RegExp(pattern, flags), replacement)');
const MATCHING_LINES = new vm.Script(`(() => {
  const re = new RegExp(pattern, flags);
  const out = [];
  for (let i = 0; i < lines.length; i++) if (re.test(lines[i])) out.push(i);
  return out;
})()`);

function bounded<T>(script: vm.Script, data: Record<string, unknown>, what: string): T {
  Object.assign(sandbox, data);
  try {
    return script.runInContext(sandbox, { timeout: REGEX_TIME_LIMIT_MS }) as T;
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_SCRIPT_EXECUTION_TIMEOUT') {
      throw capstanError('ERR_REGEX_TIMEOUT', `${what} ran longer than ${REGEX_TIME_LIMIT_MS} ms`);
    }
    throw err;
  } finally {
    for (const k of Object.keys(data)) delete (sandbox as Record<string, unknown>)[k];
  }
}

/** `input` with every match of `pattern` replaced (`$1`, `$<name>`, `$&`, `$$` as String.replace has them). */
export function replaceAll(input: string, pattern: string, flags: string, replacement: string, what: string): string {
  return String(bounded<string>(REPLACE, { input, pattern, flags: `${flags}g`, replacement }, what));
}

/** Indices of the lines `pattern` matches (no `g`: each line tested from its start). */
export function matchingLines(lines: readonly string[], pattern: string, what: string): number[] {
  return Array.from(bounded<number[]>(MATCHING_LINES, { lines, pattern, flags: '' }, what));
}
