/**
 * Argument parsers both command lines share (`capstan-server`'s admin verbs and the remote
 * `capstan`): what commander calls on each value of an option. A bad value is an
 * InvalidArgumentError, which commander reports as a usage error (exit 2), not a crash.
 */
import { InvalidArgumentError } from 'commander';

/** A repeatable option: each value appended. */
export const collect = (v: string, prev: string[] = []) => [...prev, v];

export const int = (name: string) => (v: string) => {
  if (!/^\d{1,9}$/.test(v) || Number(v) < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
  return Number(v);
};
