#!/usr/bin/env node
/**
 * capstan-server: `serve` runs the root; `compact-runs` and `policy-key` maintain its database and
 * files; the admin verbs (`nodes`, `credentials`, `changes`, `jobs`, `keys`, `lifecycle`) are
 * `capstan`'s, run in process (cli/host.ts). Only this module (through process-io.ts) reads argv
 * and the environment and chooses exit codes.
 */
import { buildProgram } from './admin-cli/commands.js';
import { processIo, runProgram } from './admin-cli/process-io.js';
import { SERVER_HOST } from './cli/host.js';

runProgram(buildProgram(processIo(), SERVER_HOST), SERVER_HOST.name);
