#!/usr/bin/env node
/**
 * capstan: the admin CLI over the admin API (docs/cli.md). Only this module (through
 * process-io.ts) touches argv, the environment, stdout/stderr and the exit code; the verbs are in
 * commands.ts.
 */
import { buildProgram, REMOTE } from './commands.js';
import { processIo, runProgram } from './process-io.js';

runProgram(buildProgram(processIo(), REMOTE), REMOTE.name);
