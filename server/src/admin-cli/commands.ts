/**
 * The program `capstan`: global options, and the verbs (verbs/*.ts), each one or a few admin API
 * calls (docs/cli.md). Built around an `io` (output, environment, exit) so that nothing below
 * cli.ts touches the process.
 */
import { readFile } from 'node:fs/promises';
import { homedir } from 'node:os';
import { join } from 'node:path';
import { Command, InvalidArgumentError, Option } from 'commander';
import { capstanError } from '@capstan/shared/errors';
import { CAPSTAN_VERSION, DEFAULT_SERVER_LISTEN } from '@capstan/shared/protocol';
import { ApiClient } from './client.js';
import { bashCompletion, zshCompletion } from './completion.js';
import { int, type CliIo, type VerbFn, type Verbs } from './kit.js';
import { errorLine, EXIT, EXIT_CODES_TEXT, exitCodeOf, renderList, renderObject, type Column, type Format } from './output.js';
import { adminVerbs } from './verbs/admins.js';
import { nodeVerbs } from './verbs/nodes.js';
import { operationVerbs } from './verbs/operations.js';
import { policyVerbs } from './verbs/policy.js';
import { reportVerbs } from './verbs/reports.js';
import { eventVerbs } from './verbs/events.js';

export type { CliIo } from './kit.js';
export { filterParams } from './kit.js';

interface Globals {
  url?: string;
  tokenFile?: string;
  caFile?: string;
  json?: boolean;
  csv?: boolean;
  timeout: number;
}

/** The server's default listener (`general.listen` in server.toml). */
export const DEFAULT_URL = `http://${DEFAULT_SERVER_LISTEN}`;
/** Where the first start of a packaged server writes its admin token. */
export const SERVER_TOKEN_FILE = '/var/lib/capstan/server/admin.token';

/** The token: `--token-file`, else CAPSTAN_TOKEN, else ~/.config/capstan/token, else the server's admin.token. */
export async function resolveToken(g: { tokenFile?: string }, env: CliIo['env']): Promise<string | undefined> {
  const read = async (path: string) => (await readFile(path, 'utf8')).trim();
  if (g.tokenFile) {
    try {
      return await read(g.tokenFile);
    } catch (err) {
      throw capstanError('ERR_CLI_FILE', `cannot read the token file ${g.tokenFile}: ${(err as Error).message}`);
    }
  }
  if (env.CAPSTAN_TOKEN) return env.CAPSTAN_TOKEN.trim();
  const home = env.HOME ?? homedir();
  for (const path of [join(env.XDG_CONFIG_HOME ?? join(home, '.config'), 'capstan', 'token'), SERVER_TOKEN_FILE]) {
    try {
      return await read(path);
    } catch {
      // Absent or unreadable (the server's file is 0600): try the next one.
    }
  }
  return undefined;
}

export function buildProgram(io: CliIo): Command {
  const program = new Command('capstan')
    .description('Capstan\'s remote admin CLI: the admin API over HTTP(S), from any machine')
    .version(CAPSTAN_VERSION)
    .option('--url <url>', `the server's API (env CAPSTAN_URL, default ${DEFAULT_URL})`)
    .option('--token-file <file>', `the admin token (default: env CAPSTAN_TOKEN, ~/.config/capstan/token, ${SERVER_TOKEN_FILE})`)
    .option('--ca-file <file>', 'PEM of the CA that signed the server\'s certificate (a private CA)')
    .addOption(new Option('--json', 'print the API\'s JSON').conflicts('csv'))
    .option('--csv', 'print CSV (RFC 4180)')
    .option('--timeout <seconds>', 'give up on a call after this long', int('--timeout'), 30)
    .addHelpText('after', `\n${EXIT_CODES_TEXT}.`)
    .showHelpAfterError();
  program.exitOverride((err) => io.exit(err.exitCode === 0 ? EXIT.OK : EXIT.USAGE));
  program.configureOutput({ writeOut: io.out, writeErr: io.err, outputError: (text, write) => write(`capstan: ${text}`) });

  /** The global options wherever they were given (`capstan --json nodes list`, `capstan nodes list --json`). */
  const globals = (cmd: Command): Globals => cmd.optsWithGlobals() as Globals;
  const formatOf = (cmd: Command): Format => (globals(cmd).json ? 'json' : globals(cmd).csv ? 'csv' : 'table');

  /** Run a verb with a client; failures print one coded line and exit with their code. */
  const act = <A extends unknown[]>(fn: VerbFn<A>) =>
    async (...args: unknown[]) => {
      const cmd = args[args.length - 1] as Command;
      const g = globals(cmd);
      let api: ApiClient | undefined;
      let code: number = EXIT.OK;
      try {
        const ca = g.caFile ? await readFile(g.caFile, 'utf8').catch((err: Error) => {
          throw capstanError('ERR_CLI_FILE', `cannot read the CA file ${g.caFile}: ${err.message}`);
        }) : undefined;
        api = new ApiClient({
          url: g.url ?? io.env.CAPSTAN_URL ?? DEFAULT_URL,
          token: await resolveToken(g, io.env),
          ...(ca !== undefined && { ca }),
          timeoutMs: g.timeout * 1000,
        });
        code = (await fn(api, formatOf(cmd), cmd, ...(args.slice(0, -2) as A))) ?? EXIT.OK;
      } catch (err) {
        io.err(errorLine(err));
        // A bad key=value met while building the request is a usage error, as commander's own.
        code = err instanceof InvalidArgumentError ? EXIT.USAGE : exitCodeOf(err);
      } finally {
        await api?.close();
      }
      io.exit(code);
    };
  const list = (fmt: Format, columns: Column[], answer: { data: unknown[] }) => io.out(renderList(fmt, columns, answer.data, answer));
  const show = (fmt: Format, answer: { data: Record<string, unknown> }) => io.out(renderObject(fmt, answer.data, answer));
  const verbs: Verbs = { io, act, list, show };
  for (const add of [nodeVerbs, reportVerbs, eventVerbs, policyVerbs, operationVerbs, adminVerbs]) add(program, verbs);

  // Completion scripts are made from the command tree above, so they never lag a new verb.
  program.command('completion <shell>').description('print a completion script: bash or zsh')
    .action((shell: string) => {
      if (shell === 'bash') io.out(bashCompletion(program));
      else if (shell === 'zsh') io.out(zshCompletion(program));
      else {
        io.err('capstan: completion: the shell must be bash or zsh\n');
        io.exit(EXIT.USAGE);
      }
      io.exit(EXIT.OK);
    });
  return program;
}
