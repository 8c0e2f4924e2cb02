/**
 * The admin CLI's program: global options, and the verbs (verbs/*.ts), each one or a few admin API
 * calls (docs/cli.md). Built around an `io` (output, environment, exit) so that nothing below
 * cli.ts touches the process, and around a `ProgramHost` that says how the verbs reach the API:
 * `capstan` over HTTP(S) (REMOTE below), `capstan-server`'s aliases in process (cli/in-process.ts),
 * so both programs run the same verbs with the same columns and exit codes.
 */
import { homedir } from 'node:os';
import { join } from 'node:path';
import { readFile } from 'node:fs/promises';
import { Command, InvalidArgumentError, Option } from 'commander';
import { CAPSTAN_VERSION, DEFAULT_SERVER_LISTEN } from '@capstan/shared/protocol';
import { ApiClient } from './client.js';
import { bashCompletion, zshCompletion } from './completion.js';
import { int, readCliFile, type CliIo, type VerbFn, type Verbs } from './kit.js';
import { errorLine, EXIT, EXIT_CODES_TEXT, exitCodeOf, renderList, renderObject, type Column, type Format } from './output.js';
import type { ApiTransport } from './transport.js';
import { adminVerbs } from './verbs/admins.js';
import { credentialVerbs } from './verbs/credentials.js';
import { jobVerbs } from './verbs/jobs.js';
import { campaignVerbs } from './verbs/campaigns.js';
import { nodeVerbs } from './verbs/nodes.js';
import { keyVerbs, managerVerbs } from './verbs/operations.js';
import { policyVerbs } from './verbs/policy.js';
import { propertyVerbs } from './verbs/properties.js';
import { changeVerbs, complianceVerbs } from './verbs/reports.js';
import { lifecycleVerbs, softwareVerbs } from './verbs/fleet.js';
import { vulnVerbs } from './verbs/vulns.js';
import { eventVerbs } from './verbs/events.js';

export type { CliIo } from './kit.js';
export { filterParams } from './kit.js';

/** The verb groups, by the name of the top-level command(s) each adds, in `capstan --help` order. */
export const VERB_GROUPS = {
  nodes: nodeVerbs,
  software: softwareVerbs,
  lifecycle: lifecycleVerbs,
  compliance: complianceVerbs,
  changes: changeVerbs,
  events: eventVerbs,
  policy: policyVerbs,
  properties: propertyVerbs,
  jobs: jobVerbs,
  campaigns: campaignVerbs,
  credentials: credentialVerbs,
  managers: managerVerbs,
  keys: keyVerbs,
  admins: adminVerbs,
  vulns: vulnVerbs,
} as const satisfies Record<string, (program: Command, verbs: Verbs) => void>;

export type VerbGroup = keyof typeof VERB_GROUPS;

/** A program that runs the admin verbs: its name, its own options and commands, its way to the API. */
export interface ProgramHost {
  name: string;
  description: string;
  /** The exit codes, for --help. */
  exitCodes: string;
  /** Which verb groups it has, in --help order. */
  groups: readonly VerbGroup[];
  /** Its own options (where the API is) and commands, added before the verbs. */
  setUp(program: Command, io: CliIo): void;
  /** A transport for one verb, from the options as given on the command line. */
  connect(options: Record<string, unknown>, io: CliIo): Promise<ApiTransport>;
  /** A `completion` command (its scripts complete this program's name). */
  completion?: boolean;
}

interface RemoteOptions {
  url?: string;
  tokenFile?: string;
  caFile?: string;
  timeout: number;
}

/** The server's default listener (`general.listen` in server.toml). */
export const DEFAULT_URL = `http://${DEFAULT_SERVER_LISTEN}`;
/** Where the first start of a packaged server writes its admin token. */
export const SERVER_TOKEN_FILE = '/var/lib/capstan/server/admin.token';

/** The token: `--token-file`, else CAPSTAN_TOKEN, else ~/.config/capstan/token, else the server's admin.token. */
export async function resolveToken(g: { tokenFile?: string }, env: CliIo['env']): Promise<string | undefined> {
  if (g.tokenFile) return (await readCliFile(g.tokenFile, 'the token file')).trim();
  if (env.CAPSTAN_TOKEN) return env.CAPSTAN_TOKEN.trim();
  const home = env.HOME ?? homedir();
  for (const path of [join(env.XDG_CONFIG_HOME ?? join(home, '.config'), 'capstan', 'token'), SERVER_TOKEN_FILE]) {
    try {
      return (await readFile(path, 'utf8')).trim();
    } catch {
      // Absent or unreadable (the server's file is 0600): try the next one.
    }
  }
  return undefined;
}

/** `capstan`: every verb, over HTTP(S) from any machine. */
export const REMOTE: ProgramHost = {
  name: 'capstan',
  description: 'Capstan\'s admin CLI: the admin API over HTTP(S), from any machine',
  exitCodes: EXIT_CODES_TEXT,
  groups: Object.keys(VERB_GROUPS) as VerbGroup[],
  completion: true,
  setUp(program) {
    program
      .option('--url <url>', `the server's API (env CAPSTAN_URL, default ${DEFAULT_URL})`)
      .option('--token-file <file>', `the admin token (default: env CAPSTAN_TOKEN, ~/.config/capstan/token, ${SERVER_TOKEN_FILE})`)
      .option('--ca-file <file>', 'PEM of the CA that signed the server\'s certificate (a private CA)')
      .option('--timeout <seconds>', 'give up on a call after this long', int('--timeout'), 30);
  },
  async connect(options, io) {
    const g = options as unknown as RemoteOptions;
    const ca = g.caFile ? await readCliFile(g.caFile, 'the CA file') : undefined;
    return new ApiClient({
      url: g.url ?? io.env.CAPSTAN_URL ?? DEFAULT_URL,
      token: await resolveToken(g, io.env),
      ...(ca !== undefined && { ca }),
      timeoutMs: g.timeout * 1000,
    });
  },
};

export function buildProgram(io: CliIo, host: ProgramHost = REMOTE): Command {
  const program = new Command(host.name)
    .description(host.description)
    .version(CAPSTAN_VERSION)
    .addOption(new Option('--json', 'print the API\'s JSON').conflicts('csv'))
    .option('--csv', 'print CSV (RFC 4180)')
    .addHelpText('after', `\n${host.exitCodes}.`)
    .showHelpAfterError();
  program.exitOverride((err) => io.exit(err.exitCode === 0 ? EXIT.OK : EXIT.USAGE));
  program.configureOutput({ writeOut: io.out, writeErr: io.err, outputError: (text, write) => write(`${host.name}: ${text}`) });
  host.setUp(program, io);

  /** The options wherever they were given (`capstan --json nodes list`, `capstan nodes list --json`). */
  const globals = (cmd: Command) => cmd.optsWithGlobals() as Record<string, unknown>;
  const formatOf = (cmd: Command): Format => (globals(cmd).json ? 'json' : globals(cmd).csv ? 'csv' : 'table');

  /** Run a verb on a transport; failures print one coded line and exit with their code. */
  const act = <A extends unknown[]>(fn: VerbFn<A>) =>
    async (...args: unknown[]) => {
      const cmd = args[args.length - 1] as Command;
      let api: ApiTransport | undefined;
      let code: number = EXIT.OK;
      try {
        api = await host.connect(globals(cmd), io);
        code = (await fn(api, formatOf(cmd), cmd, ...(args.slice(0, -2) as A))) ?? EXIT.OK;
      } catch (err) {
        io.err(errorLine(err, host.name));
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
  for (const group of host.groups) VERB_GROUPS[group](program, verbs);

  // Completion scripts are made from the command tree above, so they never lag a new verb.
  if (host.completion) {
    program.command('completion <shell>').description('print a completion script: bash or zsh')
      .action((shell: string) => {
        if (shell === 'bash') io.out(bashCompletion(program));
        else if (shell === 'zsh') io.out(zshCompletion(program));
        else {
          io.err(`${host.name}: completion: the shell must be bash or zsh\n`);
          io.exit(EXIT.USAGE);
        }
        io.exit(EXIT.OK);
      });
  }
  return program;
}
