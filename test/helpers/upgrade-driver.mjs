#!/usr/bin/env node
/**
 * Runs the agent's upgrade action (the repository's built agent/dist) on each request read from
 * stdin (a JSON list), the way `capstan-agent listen` runs an upgrade job, and prints one JSON
 * line per request: {"result": UpgradeResult, "lines": [...]} or {"error": {code, message}}.
 * Meant to run inside a throwaway root (test/helpers/root.ts); plain JavaScript, no loader there.
 */
import { readFileSync } from 'node:fs';
import { applyUpgrade } from '../../agent/dist/upgrade/apply.js';
import { parseUpgradeRequest } from '@capstan/shared/upgrade';

for (const raw of JSON.parse(readFileSync(0, 'utf8'))) {
  const lines = [];
  try {
    const result = await applyUpgrade(parseUpgradeRequest(raw), { env: process.env, commandTimeoutMs: 120_000, line: (l) => lines.push(l) });
    console.log(JSON.stringify({ result, lines }));
  } catch (err) {
    console.log(JSON.stringify({ error: { code: err.code, message: err.message }, lines }));
  }
}
