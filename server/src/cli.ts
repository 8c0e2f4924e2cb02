#!/usr/bin/env node
/**
 * capstan-server: `serve` runs the root; `nodes …` and the other verbs are admin verbs that mirror
 * the common admin API calls and work on the same store directly (so they work with the server
 * down, too), with a table view or `--json` (the API's answer). This module only assembles the
 * program; the verbs are in cli/, one file per group. Only the CLI reads argv, the environment
 * and signals, and chooses exit codes (0 ok, 1 crash, 2 usage or configuration error, 3 other
 * start-up error, 4 the node or request was refused: unknown node, bad filter…).
 */
import { Command } from 'commander';
import { CAPSTAN_VERSION, EXIT_CRASH } from '@capstan/shared/protocol';
import { EXIT_CODES_HELP, usageErrorsExit2 } from '@capstan/shared/usage';
import { changesCommand } from './cli/changes.js';
import { findingsCommand } from './cli/findings.js';
import { compactRunsCommand } from './cli/compact-runs.js';
import { credentialsCommand } from './cli/credentials.js';
import { jobsCommand } from './cli/jobs.js';
import { keysCommand, policyKeyCommand } from './cli/keys.js';
import { nodesCommand } from './cli/nodes.js';
import { serveCommand } from './cli/serve.js';

const program = new Command('capstan-server')
  .description('Capstan root server: verifies and ingests run logs and inventories, keeps the node registry')
  .version(CAPSTAN_VERSION, '-V, --version');
program.addHelpText('after', `\n${EXIT_CODES_HELP}, 4 the request was refused (unknown node, bad filter…), 75 the database did not answer (units restart on it).`);
usageErrorsExit2(program, 'capstan-server', (code) => process.exit(code));

// In the order `--help` lists them.
serveCommand(program);
nodesCommand(program);
changesCommand(program);
findingsCommand(program);
keysCommand(program);
credentialsCommand(program);
jobsCommand(program);
compactRunsCommand(program);
policyKeyCommand(program);

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`capstan-server: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(EXIT_CRASH);
});
