/**
 * Diff settings for method tests: the agent's defaults, secret paths as the agent computes them
 * (built-in list, a state directory, the given globs). (Not a .test.ts: a helper.)
 */
import { DEFAULT_MAX_DIFF_BYTES } from '@capstan/shared';
import { secretPaths, type DiffSettings } from '@capstan/agent/methods/diff';

export function testDiffSettings(over: Partial<DiffSettings> & { stateDir?: string; globs?: string[] } = {}): DiffSettings {
  const { stateDir = '/var/lib/capstan/agent', globs = [], ...rest } = over;
  return { maxBytes: DEFAULT_MAX_DIFF_BYTES, maxFileSize: 1024 * 1024, isSecret: secretPaths({ stateDir, globs }), ...rest };
}
