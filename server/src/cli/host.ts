/**
 * The program `capstan-server`: `serve`, `compact-runs` and `policy-key` of its own, and the admin
 * verbs of `capstan` (admin-cli/) with the same names, columns and exit codes, run in process on
 * the configured registry (in-process.ts), beside a running server or without one.
 */
import { EXIT_CODES_HELP } from '@capstan/shared/usage';
import type { ProgramHost } from '../admin-cli/commands.js';
import { storeOptions, type CommonFlags } from './common.js';
import { compactRunsCommand } from './compact-runs.js';
import { policyKeyCommand } from './policy-key.js';
import { serveCommand } from './serve.js';

export const SERVER_HOST: ProgramHost = {
  name: 'capstan-server',
  description: 'Capstan root server: verifies and ingests run logs and inventories, keeps the node registry; '
    + 'its admin verbs are capstan\'s, run on this host\'s registry',
  exitCodes: `${EXIT_CODES_HELP}, 75 the database did not answer (serve; units restart on it). `
    + 'The admin verbs exit as capstan\'s do: 3 the registry could not be opened, 4 request refused, 6 not found, 7 failed tasks (jobs watch)',
  groups: ['nodes', 'lifecycle', 'changes', 'events', 'properties', 'jobs', 'credentials', 'keys'],
  setUp(program) {
    storeOptions(program);
    // In the order `--help` lists them, before the admin verbs.
    serveCommand(program);
    compactRunsCommand(program);
    policyKeyCommand(program);
  },
  async connect(options) {
    // The server's modules are loaded for a verb only: `--help` and a usage error answer at once.
    const { openServerHost } = await import('./in-process.js');
    return openServerHost(options as CommonFlags);
  },
};
