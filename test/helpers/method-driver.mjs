#!/usr/bin/env node
/**
 * Applies generic methods with the agent's own registry (the repository's built agent/dist), the
 * way a run applies a directive, and prints what they reported. Meant to run inside a throwaway
 * root (test/helpers/root.ts), where it changes only the root; plain JavaScript so that it needs
 * no TypeScript loader there.
 *
 * stdin: JSON, one step or a list of steps:
 *   {"method": "user_present", "params": {...}, "mode": "enforce"|"audit", "dryRun": false,
 *    "procRoot": "/proc", "commandTimeoutMs": 60000}
 * stdout: one JSON line per step: {"outcomes": [{component, key, status, message, diff?}]}
 *   or {"error": {"code", "message"}} when the parameters are refused.
 * Exit 0 unless the input cannot be read.
 */
import { readFileSync } from 'node:fs';
import { silentLogger, DEFAULT_MAX_DIFF_BYTES } from '@capstan/shared';
import { METHODS } from '../../agent/dist/methods/index.js';
import { secretPaths } from '../../agent/dist/methods/diff.js';

const input = JSON.parse(readFileSync(0, 'utf8'));
for (const step of Array.isArray(input) ? input : [input]) {
  const method = METHODS.get(step.method);
  if (!method) {
    console.log(JSON.stringify({ error: { code: 'ERR_METHOD_PARAMS', message: `unknown method ${step.method}` } }));
    continue;
  }
  let params;
  try {
    params = method.validate(step.params ?? {});
  } catch (err) {
    console.log(JSON.stringify({ error: { code: err.code, message: err.message } }));
    continue;
  }
  const ctx = {
    mode: step.mode ?? 'enforce',
    dryRun: step.dryRun === true,
    log: silentLogger,
    env: process.env,
    commandTimeoutMs: step.commandTimeoutMs ?? 120_000,
    sysctlRoot: '/proc/sys',
    ...(step.procRoot ? { procRoot: step.procRoot } : {}),
    diff: { maxBytes: DEFAULT_MAX_DIFF_BYTES, maxFileSize: 1024 * 1024, isSecret: secretPaths({ stateDir: '/var/lib/capstan/agent', globs: [] }) },
    fetchShared: () => Promise.reject(new Error('no shared folder in a throwaway root')),
  };
  console.log(JSON.stringify({ outcomes: await method.apply(params, ctx) }));
}
