#!/usr/bin/env node
/**
 * capstan-server: `serve` runs the root; `nodes …` are admin verbs that mirror the common admin
 * API calls and work on the same store directly (so they work with the server down, too), with a
 * table view or `--json` (the API's answer). Only this module reads argv, the environment and
 * signals, and chooses exit codes (0 ok, 1 crash, 2 usage or configuration error, 3 other
 * start-up error, 4 the node or request was refused: unknown node, bad filter…).
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { Command, InvalidArgumentError } from 'commander';
import { pino } from 'pino';
import { CAPSTAN_VERSION, capstanError, EXIT_CODES_HELP, EXIT_CONFIG, EXIT_CRASH, EXIT_STARTUP, EXIT_UNAVAILABLE, isCapstanError, logOptions, parseDuration, silentLogger, usageErrorsExit2 } from '@capstan/shared';
import { loadListenerTls, sdAssign, startWatchdog } from '@capstan/toolkit';
import { complianceClock, complianceSettings, complianceView, withPercent } from './registry/compliance.js';
import { changeQuery } from './api/routes/changes.js';
import { createBody, listView, patchBody } from './api/routes/nodes.js';
import { loadServerConfig, type ServerConfig } from './config.js';
import { NodeIdentity, type KeyView } from './identity/service.js';
import { identitySettings } from './identity/settings.js';
import { ensurePolicyKey } from './policy/key.js';
import { parseCredentialRequest, sealCredential } from './bootstrap/credentials.js';
import { createJob, parseJobRequest } from './jobs/create.js';
import { startServer } from './server.js';
import { checkDatabase, isDatabaseUnavailable } from './store/check.js';
import { openStore } from './store/index.js';
import { isFilterKey } from './store/nodes/filters/query.js';
import type { NodeFilter, NodeRecord, SortField, Store } from './store/store.js';
import { table } from './table.js';
import { NodeRegistry, nodeEffects } from './registry/nodes.js';
import { PolicyGenerator } from './policy/generate.js';

const EXIT_REFUSED = 4;

interface CommonFlags {
  config?: string;
  dataDir?: string;
  database?: string;
  listen?: string;
  logLevel?: string;
  json?: boolean;
}

function configFrom(flags: CommonFlags): ServerConfig {
  try {
    return loadServerConfig({
      path: flags.config,
      overrides: {
        'general.listen': flags.listen,
        'general.data_dir': flags.dataDir,
        'database.url': flags.database,
        'log.level': flags.logLevel,
      },
    });
  } catch (err) {
    // Codes other than the generic configuration ones lead the line (ERR_PLAINTEXT_LISTEN).
    const text = isCapstanError(err) ? (err.code.startsWith('ERR_CONFIG') ? err.message : `${err.code}: ${err.message}`) : String(err);
    process.stderr.write(`capstan-server: ${text}\n`);
    process.exit(EXIT_CONFIG);
  }
}

/** Open the store, run one admin verb, close it. A refused request (coded 4xx error) exits 4. */
async function withStore(flags: CommonFlags, fn: (store: Store, config: ServerConfig) => Promise<void>): Promise<void> {
  const config = configFrom(flags);
  let store: Store;
  try {
    store = await openStore(
      config.database.url ? { databaseUrl: config.database.url } : { sqlitePath: join(config.general.data_dir, 'capstan.db') },
    );
  } catch (err) {
    process.stderr.write(`capstan-server: cannot open the store: ${(err as Error).message}\n`);
    process.exit(EXIT_STARTUP);
  }
  try {
    await fn(store, config);
  } catch (err) {
    if (isCapstanError(err) && err.statusCode < 500) {
      process.stderr.write(`capstan-server: ${err.code}: ${err.message}\n`);
      process.exitCode = EXIT_REFUSED;
    } else {
      throw err;
    }
  } finally {
    await store.close();
  }
}

/**
 * withStore with the node registry: a change made here has the effects it has through the API,
 * the ones this process can carry out (the node's policy regenerated before the command returns,
 * a demoted relay's tokens renewed); a running server ends a relay's link when the relay next
 * uses its refused token.
 */
async function withNodes(flags: CommonFlags, fn: (nodes: NodeRegistry, store: Store) => Promise<void>): Promise<void> {
  await withStore(flags, async (store) => {
    const generator = new PolicyGenerator({ store, log: silentLogger });
    const nodes = new NodeRegistry({ store, log: silentLogger }).on(nodeEffects({ store, touch: (id) => generator.touch(id) }));
    try {
      await fn(nodes, store);
    } finally {
      await generator.settled();
    }
  });
}

const CLI_CAUSE = 'admin (command line)';

function out(flags: CommonFlags, json: unknown, text: () => string): void {
  process.stdout.write(flags.json ? `${JSON.stringify(json)}\n` : text());
}

async function mustNode(store: Store, id: string): Promise<NodeRecord | null> {
  const node = await store.getNode(id);
  if (!node) {
    process.stderr.write(`capstan-server: node ${id} is unknown\n`);
    process.exitCode = EXIT_REFUSED;
  }
  return node;
}

const collect = (v: string, prev: string[] = []) => [...prev, v];
const int = (name: string) => (v: string) => {
  // InvalidArgumentError: a usage error (exit 2), not a crash.
  if (!/^\d{1,9}$/.test(v) || Number(v) < 1) throw new InvalidArgumentError(`${name} must be a positive integer`);
  return Number(v);
};

/** `key=value` arguments → tags. */
function tagArgs(args: string[]): Record<string, string> {
  return Object.fromEntries(args.map((t) => {
    const i = t.indexOf('=');
    if (i <= 0) throw capstanError('ERR_BAD_REQUEST', `tag must be <key>=<value>, got "${t}"`);
    return [t.slice(0, i), t.slice(i + 1)];
  }));
}

/** `key=value` → a filter; the key as in the API (`name`, `tag:env`, `last_run`…). */
function filterArg(text: string, exclude: boolean): NodeFilter {
  const i = text.indexOf('=');
  const key = i > 0 ? text.slice(0, i) : '';
  if (!isFilterKey(key)) throw capstanError('ERR_BAD_REQUEST', `filter must be <key>=<value> with a known key, got "${text}"`);
  return { key, values: [text.slice(i + 1)], exclude };
}

const storeOptions = (c: Command) =>
  c
    .option('-c, --config <file>', 'TOML configuration file')
    .option('--data-dir <dir>', 'data directory (SQLite database, spool, admin token)')
    .option('--database <url>', 'PostgreSQL URL (postgres://…); default SQLite in the data directory');
const verb = (parent: Command, spec: string, description: string) =>
  storeOptions(parent.command(spec).description(description)).option('--json', 'print the API\'s JSON instead of a table');

const NODE_TABLE: Array<[string, (n: NodeRecord) => unknown]> = [
  ['id', (n) => n.id], ['name', (n) => n.name], ['accepted', (n) => n.accepted], ['status', (n) => n.status],
  ['state', (n) => n.state], ['manager', (n) => n.manager], ['region', (n) => n.region], ['last run', (n) => n.last_run_at],
];
/** Pending nodes: the certificate each would pin, and the other one sent for its id if any (choose with accept --fingerprint). */
const PENDING_TABLE: Array<[string, (n: NodeRecord) => unknown]> = [
  ['id', (n) => n.id], ['name', (n) => n.name], ['status', (n) => n.status], ['fingerprint', (n) => n.certificate_fingerprint],
  ['conflict', (n) => n.conflict_fingerprint],
];

const program = new Command('capstan-server')
  .description('Capstan root server: verifies and ingests run logs and inventories, keeps the node registry')
  .version(CAPSTAN_VERSION, '-V, --version');
program.addHelpText('after', `\n${EXIT_CODES_HELP}, 4 the request was refused (unknown node, bad filter…), 75 the database did not answer (units restart on it).`);
usageErrorsExit2(program, 'capstan-server', (code) => process.exit(code));

/** Tell systemd we are ready (Type=notify); outside systemd (no NOTIFY_SOCKET) there is nobody to tell. */
async function notifyReady(log: pino.Logger, status: string): Promise<void> {
  if (!process.env.NOTIFY_SOCKET) return;
  try {
    const { default: notify } = await import('systemd-notify');
    await notify({ ready: true, status });
  } catch (err) {
    // The systemd-notify binary may be missing; the unit then times out, which says why.
    log.warn({ err }, 'cannot notify systemd');
  }
}

storeOptions(program.command('serve').description('run the server'))
  .option('--listen <host:port>', 'address to listen on (default 127.0.0.1:3031)')
  .option('--log-level <level>', 'trace, debug, info, warn, error')
  .option('--test', 'check the configuration and that the database is reachable, then exit (2: configuration, 3: database)')
  .action(async (flags: CommonFlags & { test?: boolean }) => {
    const config = configFrom(flags);
    if (flags.test) {
      try {
        await loadListenerTls(config.tls);
      } catch (err) {
        process.stderr.write(`capstan-server: ${isCapstanError(err) ? err.message : String(err)}\n`);
        process.exit(EXIT_CONFIG);
      }
      try {
        const db = await checkDatabase({
          ...(config.database.url && { databaseUrl: config.database.url }),
          sqlitePath: join(config.general.data_dir, 'capstan.db'),
          timeoutMs: 10_000,
        });
        process.stdout.write(`configuration ok; ${db}\n`);
        process.exit(0);
      } catch (err) {
        process.stderr.write(`capstan-server: ${isCapstanError(err) ? `${err.code}: ${err.message}` : String(err)}\n`);
        process.exit(isDatabaseUnavailable(err) ? EXIT_UNAVAILABLE : EXIT_STARTUP);
      }
    }
    const log = pino(logOptions('capstan-server', config.log.level, pino.stdSerializers.err));
    let handle;
    try {
      handle = await startServer(config, log);
    } catch (err) {
      log.fatal({ err }, 'start-up failed');
      process.stderr.write(`capstan-server: cannot start: ${(err as Error).message}\n`);
      const config = isCapstanError(err) && (err.code === 'ERR_CONFIG' || err.code === 'ERR_PLAINTEXT_LISTEN');
      process.exit(config ? EXIT_CONFIG : isDatabaseUnavailable(err) ? EXIT_UNAVAILABLE : EXIT_STARTUP);
    }
    let stopWatchdog = () => {};
    let stopping = false;
    const stop = (signal: string) => {
      if (stopping) {
        // A second signal: the operator does not want to wait for the batch in flight.
        log.warn({ signal }, 'stopping now');
        process.exit(EXIT_CRASH);
      }
      stopping = true;
      log.info({ signal }, 'stopping: finishing the files and sweep batch in flight');
      stopWatchdog();
      // STOPPING=1: systemd shows "deactivating" while the batch in flight finishes.
      const told = sdAssign(process.env, ['STOPPING=1', 'STATUS=stopping: finishing the files and sweep batch in flight']);
      Promise.all([handle.close(), told]).then(
        () => process.exit(0),
        (err: unknown) => {
          log.error({ err }, 'stop failed');
          process.exit(EXIT_CRASH);
        },
      );
    };
    // Handlers first: systemd may send SIGTERM as soon as it has READY=1.
    process.on('SIGTERM', () => stop('SIGTERM'));
    process.on('SIGINT', () => stop('SIGINT'));
    process.stdout.write(`${JSON.stringify({ ready: true, url: handle.url })}\n`);
    await notifyReady(log, `listening on ${handle.url}`);
    // WatchdogSec in the unit: pings at half its interval for as long as the event loop turns.
    if (!stopping) stopWatchdog = startWatchdog(process.env);
  });

const nodes = program.command('nodes').description('look at and decide on nodes (the admin API\'s node calls)');

verb(nodes, 'list', 'list nodes (GET /api/1/nodes)')
  .option('--pending', 'only nodes waiting for acceptance')
  .option('-f, --filter <key=value>', 'include filter, repeatable (name=web*, tag:env=prod, status=reachable, last_run=<from>..<to>)', collect)
  .option('-x, --exclude <key=value>', 'exclude filter, repeatable', collect)
  .option('-q, --query <expression>', 'filter expression (docs/filters.md), e.g. "os.name = debian and package:openssl < 3.0.11"')
  .option('--sort <field>', 'name, hostname, id, status, state, accepted, manager, region, last_run_at, last_contact_at, created_at')
  .option('--order <asc|desc>', 'sort order')
  .option('--page <n>', 'page (from 1)', int('page'), 1)
  .option('--per-page <n>', 'nodes per page', int('per-page'), 100)
  .action(async (flags: CommonFlags & { pending?: boolean; filter?: string[]; exclude?: string[]; query?: string; sort?: string; order?: string; page: number; perPage: number }) => {
    await withStore(flags, async (store) => {
      const filters = [...(flags.filter ?? []).map((f) => filterArg(f, false)), ...(flags.exclude ?? []).map((f) => filterArg(f, true))];
      if (flags.query !== undefined) filters.push({ key: 'q', values: [flags.query] });
      if (flags.pending) filters.push({ key: 'accepted', values: ['pending'] });
      const res = await store.listNodes({
        filters, page: flags.page, per_page: flags.perPage,
        ...(flags.sort !== undefined && { sort: flags.sort as SortField }),
        ...(flags.order !== undefined && { order: flags.order as 'asc' | 'desc' }),
      });
      out(flags, { data: res.data.map(listView), total: res.total, totals: res.totals, page: flags.page, per_page: flags.perPage }, () =>
        `${table(flags.pending ? PENDING_TABLE : NODE_TABLE, res.data)}${res.total} nodes (${res.totals.reachable} reachable, ${res.totals.unreachable} unreachable, ${res.totals.unknown} unknown)\n`);
    });
  });

verb(nodes, 'properties <id>', "a node's admin-set properties; --set/--unset change them (GET|PUT /api/1/nodes/<id>/properties)")
  .option('-s, --set <key=value>', 'set a property, repeatable', collect)
  .option('-u, --unset <key>', 'remove a property, repeatable', collect)
  .action(async (id: string, flags: CommonFlags & { set?: string[]; unset?: string[] }) => {
    await withNodes(flags, async (registry, store) => {
      let props = await store.getProperties(id);
      if (props === null) throw capstanError('ERR_NODE_UNKNOWN', `node ${id} is unknown`);
      if (flags.set || flags.unset) {
        const next: Record<string, string> = { ...props };
        for (const kv of flags.set ?? []) {
          const i = kv.indexOf('=');
          if (i <= 0) throw capstanError('ERR_BAD_REQUEST', `--set takes <key>=<value>, got "${kv}"`);
          next[kv.slice(0, i)] = kv.slice(i + 1);
        }
        for (const k of flags.unset ?? []) delete next[k];
        props = await registry.setProperties(id, next, { cause: CLI_CAUSE });
      }
      out(flags, { data: props }, () => table([['property', (r) => r[0]], ['value', (r) => r[1]]], Object.entries(props!)));
    });
  });

verb(nodes, 'show <id>', 'one node (GET /api/1/nodes/<id>)').action(async (id: string, flags: CommonFlags) => {
  await withStore(flags, async (store) => {
    const node = await mustNode(store, id);
    if (!node) return;
    const { certificate: _c, ...fields } = node;
    out(flags, { data: node }, () => table([['field', (r) => r[0]], ['value', (r) => r[1]]], Object.entries(fields)));
  });
});

for (const [name, acceptance] of [['accept', 'accepted'], ['refuse', 'refused']] as const) {
  const cmd = verb(nodes, `${name} <id>`, `${name} a pending node (POST /api/1/nodes/<id>/${name})`);
  if (acceptance === 'accepted') cmd.option('--fingerprint <sha256>', 'the certificate to pin, required when the node sent two (nodes list --pending shows both)');
  cmd.action(async (id: string, flags: CommonFlags & { fingerprint?: string }) => {
    await withNodes(flags, async (registry) => {
      const updated = acceptance === 'accepted'
        ? await registry.accept(id, { cause: CLI_CAUSE, ...(flags.fingerprint !== undefined && { fingerprint: flags.fingerprint }) })
        : await registry.refuse(id, { cause: CLI_CAUSE });
      out(flags, { data: listView(updated) }, () => `${id} ${acceptance}\n`);
    });
  });
}

verb(nodes, 'add', 'add a node by address, or register a relay (POST /api/1/nodes)')
  .requiredOption('--host <address>', 'DNS name or IP address')
  .option('--name <name>', 'display name (default: the address)')
  .option('--id <id>', 'node id (default: a new UUID)')
  .option('-t, --tag <key=value>', 'tag, repeatable', collect)
  .option('-g, --group <id>', 'group, repeatable', collect)
  .option('--certificate <file>', 'the node\'s PEM certificate (UID=<id>), pinned at once')
  .option('--relay', 'a relay: its tokens open the relay-only endpoints (needs --id and --certificate: capstan-relayd --identity prints both)')
  .option('--policy-server <id>', 'the node id of the relay this node is under (a sub-relay: its upstream relay; default: this server)')
  .action(async (flags: CommonFlags & { host: string; name?: string; id?: string; tag?: string[]; group?: string[]; certificate?: string; relay?: boolean; policyServer?: string }) => {
    await withNodes(flags, async (registry) => {
      const certificate = flags.certificate !== undefined ? await readFile(flags.certificate, 'utf8').catch((err: Error) => {
        throw capstanError('ERR_BAD_REQUEST', `cannot read --certificate ${flags.certificate}: ${err.message}`);
      }) : undefined;
      const tags = tagArgs(flags.tag ?? []);
      const node = await registry.create(createBody({
        host: flags.host, ...(flags.name && { name: flags.name }), ...(flags.id && { id: flags.id }),
        ...(flags.tag && { tags }), ...(flags.group && { groups: flags.group }),
        ...(certificate !== undefined && { certificate }), ...(flags.relay && { relay: true }),
        ...(flags.policyServer !== undefined && { policy_server: flags.policyServer }),
      }), { cause: CLI_CAUSE });
      out(flags, { data: listView(node) }, () => `${node.id} added${node.relay ? ' as a relay' : ''}\n`);
    });
  });

verb(nodes, 'set-relay <id> <on|off>', 'register an accepted node as a relay, or no longer (PATCH /api/1/nodes/<id> {relay})').action(async (id: string, value: string, flags: CommonFlags) => {
  await withNodes(flags, async (registry) => {
    if (value !== 'on' && value !== 'off') throw capstanError('ERR_BAD_REQUEST', 'set-relay takes on or off');
    const node = await registry.patch(id, patchBody({ relay: value === 'on' }), { cause: CLI_CAUSE });
    out(flags, { data: listView(node) }, () => `${id} ${node.relay ? 'is a relay' : 'is no longer a relay'}\n`);
  });
});

verb(nodes, 'set-state <id> <state>', 'set a node\'s state; terminated is final (PATCH /api/1/nodes/<id>)').action(async (id: string, state: string, flags: CommonFlags) => {
  await withNodes(flags, async (registry) => {
    const node = await registry.patch(id, patchBody({ state }), { cause: CLI_CAUSE });
    out(flags, { data: listView(node) }, () => `${id} ${node.state} (${node.status})\n`);
  });
});

verb(nodes, 'set-tags <id> [tags...]', 'replace a node\'s tags with these key=value pairs; none clears them (PATCH /api/1/nodes/<id> {tags})').action(async (id: string, tags: string[], flags: CommonFlags) => {
  await withNodes(flags, async (registry) => {
    const node = await registry.patch(id, patchBody({ tags: tagArgs(tags) }), { cause: CLI_CAUSE });
    out(flags, { data: listView(node) }, () => `${id} tags: ${Object.entries(node.tags).map(([k, v]) => `${k}=${v}`).join(' ') || '(none)'}\n`);
  });
});

verb(nodes, 'set-groups <id> [groups...]', 'replace a node\'s static groups; none clears them (PATCH /api/1/nodes/<id> {groups})').action(async (id: string, groups: string[], flags: CommonFlags) => {
  await withNodes(flags, async (registry) => {
    const node = await registry.patch(id, patchBody({ groups }), { cause: CLI_CAUSE });
    out(flags, { data: listView(node) }, () => `${id} groups: ${node.groups.join(' ') || '(none)'}\n`);
  });
});

verb(nodes, 'delete <id>', 'delete a node, its runs, and revoke its certificate (DELETE /api/1/nodes/<id>)').action(async (id: string, flags: CommonFlags) => {
  await withNodes(flags, async (registry) => {
    await registry.remove(id, { cause: CLI_CAUSE });
    out(flags, { data: { id, deleted: true } }, () => `${id} deleted\n`);
  });
});

verb(nodes, 'history <id>', 'lifecycle transitions, newest first (GET /api/1/nodes/<id>/history)')
  .option('--page <n>', 'page', int('page'), 1)
  .option('--per-page <n>', 'entries per page', int('per-page'), 100)
  .action(async (id: string, flags: CommonFlags & { page: number; perPage: number }) => {
    await withStore(flags, async (store) => {
      if (!(await mustNode(store, id))) return;
      const res = await store.getHistory(id, flags.page, flags.perPage);
      out(flags, { data: res.data, total: res.total, page: flags.page, per_page: flags.perPage }, () =>
        table([['at', (h) => h.at], ['field', (h) => h.field], ['from', (h) => h.from], ['to', (h) => h.to], ['cause', (h) => h.cause]], res.data));
    });
  });

verb(nodes, 'runs <id>', 'runs, newest first (GET /api/1/nodes/<id>/runs)')
  .option('--from <time>', 'runs started at or after (RFC 3339)')
  .option('--to <time>', 'runs started before (RFC 3339)')
  .option('--page <n>', 'page', int('page'), 1)
  .option('--per-page <n>', 'runs per page', int('per-page'), 20)
  .action(async (id: string, flags: CommonFlags & { from?: string; to?: string; page: number; perPage: number }) => {
    await withStore(flags, async (store) => {
      if (!(await mustNode(store, id))) return;
      const res = await store.listRuns(id, flags.page, flags.perPage, { ...(flags.from && { from: flags.from }), ...(flags.to && { to: flags.to }) });
      out(flags, { data: res.data, total: res.total, page: flags.page, per_page: flags.perPage }, () =>
        `${table([['started', (r) => r.started_at], ['config', (r) => r.config_id], ['complete', (r) => r.complete], ['reports', (r) => r.report_count], ['counts', (r) => r.counts]], res.data)}${res.total} runs\n`);
    });
  });

verb(nodes, 'compliance [id]', 'one node\'s compliance, or the global one (GET /api/1/nodes/<id>/compliance, GET /api/1/compliance)')
  .option('--by <rule|directive>', 'global compliance per rule or per directive')
  .action(async (id: string | undefined, flags: CommonFlags & { by?: string }) => {
    const pct = (v: number | null) => (v === null ? '-' : `${v}%`);
    await withStore(flags, async (store, config) => {
      const clock = complianceClock(complianceSettings(config));
      if (id !== undefined) {
        if (!(await mustNode(store, id))) return;
        const view = complianceView((await store.getComplianceBase(id))!, clock);
        const state = view.time_state === null ? '' : ` (${view.time_state.replace('_', ' ')})`;
        out(flags, { data: view }, () =>
          `${table([['rule', (c) => c.rule_id], ['directive', (c) => c.directive_id], ['component', (c) => c.component], ['state', (c) => c.state], ['outcome', (c) => c.outcome]], view.components)}compliance ${pct(view.compliance)} of ${view.summary.total} items${state}\n`);
      } else if (flags.by === 'rule' || flags.by === 'directive') {
        const rows = (await store.complianceByRule(flags.by, clock)).map((r) => ({ ...r, ...withPercent(r.counts) }));
        out(flags, { data: rows, total: rows.length }, () =>
          table([['rule', (r) => r.rule_id], ...(flags.by === 'directive' ? [['directive', (r: { directive_id?: string }) => r.directive_id] as [string, (r: any) => unknown]] : []),
            ['nodes', (r) => r.nodes], ['compliance', (r) => pct(r.compliance)], ['error', (r) => r.counts.error], ['missing', (r) => r.counts.missing],
            ['applying', (r) => r.counts.applying], ['no answer', (r) => r.counts.no_answer]], rows));
      } else if (flags.by !== undefined) {
        throw capstanError('ERR_BAD_REQUEST', '--by must be rule or directive');
      } else {
        const agg = await store.complianceSummary([], clock);
        const view = {
          nodes: agg.nodes, nodes_with_data: agg.nodes_with_data, ...withPercent(agg.counts),
          relays: { nodes: agg.relays.nodes, ...withPercent(agg.relays.counts) },
          agentless: { nodes: agg.agentless.nodes, ...withPercent(agg.agentless.counts) },
        };
        out(flags, { data: view }, () =>
          `${table([['state', (r) => r[0]], ['items', (r) => r[1]], ['percent', (r) => `${view.percent[r[0] as keyof typeof view.percent]}%`]], Object.entries(agg.counts))}compliance ${pct(view.compliance)} over ${agg.nodes} managed nodes (${agg.nodes_with_data} with data); apart: ${agg.relays.nodes} relays, ${agg.agentless.nodes} nodes without an agent\n`);
      }
    });
  });

/** "1d", "12h", "30m" before now, or an RFC 3339 time. */
function sinceTime(v: string): string {
  const ms = parseDuration(v);
  if (ms !== null) return new Date(Date.now() - ms).toISOString();
  return v;
}

storeOptions(program.command('changes').description('what the agents changed, newest first (GET /api/1/changes)'))
  .option('--json', 'print the API\'s JSON instead of a table')
  .option('--node <id>', 'one node (repeat or comma-separate for several)', (v: string, acc: string[] = []) => [...acc, v])
  .option('--rule <id>', 'one rule', (v: string, acc: string[] = []) => [...acc, v])
  .option('--directive <id>', 'one directive', (v: string, acc: string[] = []) => [...acc, v])
  .option('--group <id>', 'the members of a policy group', (v: string, acc: string[] = []) => [...acc, v])
  .option('--label <label>', 'intentional or corrective')
  .option('--since <when>', 'changes since a duration ago ("1d", "2h") or an RFC 3339 time')
  .option('--until <when>', 'changes before a duration ago or an RFC 3339 time')
  .option('--show', 'print each change with its diff instead of a table')
  .option('--page <n>', 'page', (v: string) => Number(v), 1)
  .option('--per-page <n>', 'changes per page (at most 1000)', (v: string) => Number(v), 50)
  .action(async (flags: CommonFlags & { json?: boolean; node?: string[]; rule?: string[]; directive?: string[]; group?: string[]; label?: string; since?: string; until?: string; show?: boolean; page: number; perPage: number }) => {
    await withStore(flags, async (store) => {
      const q = await changeQuery(store, {
        ...(flags.node && { node: flags.node }), ...(flags.rule && { rule: flags.rule }), ...(flags.directive && { directive: flags.directive }),
        ...(flags.group && { group: flags.group }), ...(flags.label && { label: flags.label }),
        ...(flags.since && { from: sinceTime(flags.since) }), ...(flags.until && { to: sinceTime(flags.until) }),
      });
      if (!Number.isInteger(flags.page) || flags.page < 1 || !Number.isInteger(flags.perPage) || flags.perPage < 1 || flags.perPage > 1000) {
        throw capstanError('ERR_BAD_REQUEST', '--page must be a positive integer and --per-page an integer from 1 to 1000');
      }
      const res = await store.listChanges(q, flags.page, flags.perPage);
      out(flags, { data: res.data, total: res.total }, () => {
        if (!flags.show) {
          return `${table([['at', (c) => c.at], ['node', (c) => c.node_id], ['label', (c) => c.label], ['rule', (c) => c.rule_id], ['directive', (c) => c.directive_id],
            ['component', (c) => c.component], ['key', (c) => c.key_value], ['message', (c) => c.message], ['diff', (c) => (c.diff === null ? '' : 'yes')]], res.data)}${res.total} changes\n`;
        }
        return `${res.data.map((c) => `${c.at} ${c.node_id} ${c.label} ${c.event_type}\n  rule ${c.rule_id} directive ${c.directive_id} component ${c.component} key ${c.key_value}\n  ${c.message}\n${c.diff === null ? '' : `${c.diff.replace(/^/gm, '    ')}${c.diff.endsWith('\n') ? '' : '\n'}`}`).join('\n')}${res.total} changes\n`;
      });
    });
  });

verb(nodes, 'lifecycle', 'registry counts by status, state and acceptance (GET /api/1/lifecycle)').action(async (flags: CommonFlags) => {
  await withStore(flags, async (store) => {
    const c = await store.counts();
    const rows = [
      ...Object.entries(c.by_status).map(([k, v]) => ['status', k, v]),
      ...Object.entries(c.by_state).map(([k, v]) => ['state', k, v]),
      ...Object.entries(c.by_acceptance).map(([k, v]) => ['accepted', k, v]),
      ['purged', 'nodes', c.purged_nodes], ['deleted', 'runs', c.deleted_runs],
    ];
    out(flags, { data: c }, () => table([['count', (r) => r[0]], ['of', (r) => r[1]], ['n', (r) => r[2]]], rows));
  });
});

const keys = program.command('keys').description('the keyring that signs node identity tokens (the admin API\'s /api/1/keys)');

/** Open the identity keyring of the data directory, run one verb, close it. Coded 4xx → exit 4. */
async function withIdentity(flags: CommonFlags, fn: (identity: NodeIdentity, store: Store) => Promise<void> | void): Promise<void> {
  const config = configFrom(flags);
  await withStore(flags, async (store) => {
    const identity = await NodeIdentity.open({ dataDir: config.general.data_dir, secretFile: config.identity.secret_file, store, log: silentLogger, ...identitySettings(config.identity) });
    try {
      await fn(identity, store);
    } finally {
      identity.close();
    }
  });
}

const KEY_TABLE: Array<[string, (k: KeyView) => unknown]> = [
  ['kid', (k) => k.kid], ['alg', (k) => k.alg], ['active', (k) => k.active], ['published', (k) => k.published],
  ['nodes', (k) => k.nodes], ['created', (k) => k.created_at], ['retired', (k) => k.retired_at],
];

verb(keys, 'list', 'signing keys, with the nodes whose unexpired token each signed (GET /api/1/keys)').action(async (flags: CommonFlags) => {
  await withIdentity(flags, async (identity) => {
    const rows = await identity.listKeys();
    out(flags, { data: rows }, () => table(KEY_TABLE, rows));
  });
});

verb(keys, 'rotate', 'make a new key active; old tokens stay valid until they expire (POST /api/1/keys/rotate)').action(async (flags: CommonFlags) => {
  await withIdentity(flags, async (identity) => {
    const key = await identity.rotate();
    out(flags, { data: key }, () => `${key.kid} active\n`);
  });
});

verb(keys, 'delete <kid>', 'delete a retired key; refused while it signs unexpired tokens (DELETE /api/1/keys/<kid>)')
  .option('--force', 'delete even if nodes still hold unexpired tokens it signed (they will renew)')
  .action(async (kid: string, flags: CommonFlags & { force?: boolean }) => {
    await withIdentity(flags, async (identity) => {
      const r = await identity.deleteKey(kid, flags.force ?? false);
      out(flags, { data: r }, () => `${kid} deleted (${r.nodes} nodes held tokens it signed)\n`);
    });
  });

// Bootstrap (docs/bootstrap.md): SSH credentials, pinned host keys, bootstrap jobs and their progress.
const credentials = program.command('credentials').description('SSH credentials for bootstrap jobs (the admin API\'s /api/1/credentials)');

/** A secret read from a file (never from the command line, where `ps` would show it). */
const secretFile = async (path: string | undefined, what: string) => (path === undefined ? undefined : readFile(path, 'utf8').catch((err: Error) => {
  throw capstanError('ERR_BAD_REQUEST', `cannot read ${what} ${path}: ${err.message}`);
}));

verb(credentials, 'add', 'add a credential, sealed at rest (POST /api/1/credentials)')
  .requiredOption('--id <id>', 'credential id')
  .requiredOption('--user <name>', 'login name on the nodes')
  .option('--port <n>', 'SSH port (default 22)', int('port'))
  .option('--key-file <file>', 'private key (OpenSSH or PEM)')
  .option('--passphrase-file <file>', 'the private key\'s passphrase')
  .option('--password-file <file>', 'a password (with or instead of a key)')
  .option('-s, --selector <selector>', 'node:<id>, tag:<key>=<value>, group:<id>, manager:<id> or *; repeatable', collect)
  .action(async (flags: CommonFlags & { id: string; user: string; port?: number; keyFile?: string; passphraseFile?: string; passwordFile?: string; selector?: string[] }) => {
    await withIdentity(flags, async (identity, store) => {
      const passphrase = (await secretFile(flags.passphraseFile, '--passphrase-file'))?.replace(/\r?\n$/, '');
      const password = (await secretFile(flags.passwordFile, '--password-file'))?.replace(/\r?\n$/, '');
      const privateKey = await secretFile(flags.keyFile, '--key-file');
      const req = parseCredentialRequest({
        id: flags.id, user: flags.user, selectors: flags.selector ?? [],
        ...(flags.port !== undefined && { port: flags.port }), ...(privateKey !== undefined && { private_key: privateKey }),
        ...(passphrase !== undefined && { passphrase }), ...(password !== undefined && { password }),
      });
      const c = await store.bootstrap.createCredential(await sealCredential(req, identity.keySealer, new Date()));
      out(flags, { data: c }, () => `${c.id} added (${c.fingerprint ?? 'password'})\n`);
    });
  });

verb(credentials, 'list', 'credentials: metadata only (GET /api/1/credentials)').action(async (flags: CommonFlags) => {
  await withStore(flags, async (store) => {
    const rows = await store.bootstrap.listCredentials();
    out(flags, { data: rows, total: rows.length }, () => table([['id', (c) => c.id], ['user', (c) => c.user], ['port', (c) => c.port],
      ['selectors', (c) => c.selectors.join(' ')], ['fingerprint', (c) => c.fingerprint], ['created', (c) => c.created_at]], rows));
  });
});

verb(credentials, 'delete <id>', 'delete a credential (DELETE /api/1/credentials/<id>)').action(async (id: string, flags: CommonFlags) => {
  await withStore(flags, async (store) => {
    if (!(await store.bootstrap.deleteCredential(id))) throw capstanError('ERR_CREDENTIAL_UNKNOWN', `credential ${id} is unknown`);
    out(flags, { data: { id, deleted: true } }, () => `${id} deleted\n`);
  });
});

verb(nodes, 'host-key <id>', 'the SSH host key pinned for a node (GET /api/1/nodes/<id>/host-key)').action(async (id: string, flags: CommonFlags) => {
  await withStore(flags, async (store) => {
    const k = await store.bootstrap.getHostKey(id);
    if (!k) throw capstanError('ERR_NOT_FOUND', `no host key is pinned for node ${id}`);
    out(flags, { data: k }, () => `${k.algorithm} ${k.fingerprint} (pinned ${k.pinned_at}${k.job_id ? ` by job ${k.job_id}` : ''})\n`);
  });
});

verb(nodes, 'clear-host-key <id>', 'forget a node\'s pinned SSH host key after a legitimate change (DELETE /api/1/nodes/<id>/host-key)').action(async (id: string, flags: CommonFlags) => {
  await withStore(flags, async (store) => {
    if (!(await store.bootstrap.clearHostKey(id))) throw capstanError('ERR_NOT_FOUND', `no host key is pinned for node ${id}`);
    out(flags, { data: { node_id: id, cleared: true } }, () => `host key of ${id} cleared: the next bootstrap pins the key it meets\n`);
  });
});

const jobs = program.command('jobs').description('jobs and their per-node tasks (the admin API\'s /api/1/jobs)');

verb(jobs, 'bootstrap', 'install the agent over SSH on nodes with an address and no agent (POST /api/1/jobs {type: "bootstrap"})')
  .option('--name <name>', 'job name', 'bootstrap')
  .option('-n, --node <id>', 'node id, repeatable', collect)
  .option('-f, --filter <key=value>', 'node filter, repeatable (group=web, tag:env=prod, managed_by=aws-prod)', collect)
  .option('--credential <id>', 'use this credential for every node (default: chosen by selectors)')
  .option('--relay-url <url>', 'the URL the agent reports to (default: [bootstrap] relay_url)')
  .option('--timeout <duration>', 'the job\'s timeout (default: [jobs] default_timeout)')
  .action(async (flags: CommonFlags & { name: string; node?: string[]; filter?: string[]; credential?: string; relayUrl?: string; timeout?: string }) => {
    const config = configFrom(flags);
    const limits = {
      defaultTimeoutMs: config.jobs.default_timeout, maxTargets: config.jobs.max_targets,
      bootstrapEnabled: config.bootstrap.enabled, bootstrapRelayUrl: config.bootstrap.relay_url,
    };
    await withStore(flags, async (store) => {
      const req = parseJobRequest({
        name: flags.name, type: 'bootstrap', nodes: flags.node ?? [], filters: (flags.filter ?? []).map((f) => filterArg(f, false)),
        ...(flags.credential !== undefined && { credential: flags.credential }), ...(flags.relayUrl !== undefined && { relay_url: flags.relayUrl }),
        ...(flags.timeout !== undefined && { timeout: flags.timeout }),
      }, limits);
      // The running server takes the pending tasks at its next jobs sweep.
      const job = await createJob(store, req, limits, new Date());
      out(flags, { data: job }, () => `${job.id} created (${job.progress.total} nodes, ${job.progress.failed} failed at once)\n`);
    });
  });

verb(jobs, 'show <id>', 'a job and the progress of each node (GET /api/1/jobs/<id>)').action(async (id: string, flags: CommonFlags) => {
  await withStore(flags, async (store) => {
    const job = await store.jobs.getJob(id);
    if (!job) throw capstanError('ERR_JOB_UNKNOWN', `job ${id} is unknown`);
    const tasks = await store.jobs.listTasks(id);
    out(flags, { data: { ...job, tasks } }, () =>
      `${job.name} (${job.type}) ${job.state}\n${table([['node', (x) => x.node_id], ['state', (x) => x.state], ['step', (x) => x.step], ['reason', (x) => x.reason], ['message', (x) => x.message]], tasks)}`);
  });
});

storeOptions(program.command('compact-runs').description('convert runs stored before migration 14 to the node-day form, in place (docs/capacity.md)'))
  .option('--batch <n>', 'runs per transaction', int('--batch'), 500)
  .action(async (flags: CommonFlags & { batch: number }) => {
    // Resumable: the store remembers the last run looked at, so an interrupted run goes on from there.
    await withStore(flags, async (store) => {
      let done = 0;
      let skipped = 0;
      for (;;) {
        const r = await store.compactRuns(flags.batch);
        done += r.converted;
        skipped += r.skipped;
        process.stdout.write(`converted ${done} runs, left ${skipped} as they were; through run id ${r.through_id} of ${r.max_id}\n`);
        if (r.done) break;
      }
    });
  });

const policyKey = program.command('policy-key').description('the ed25519 key that signs policy bundles (docs/policy.md)');

verb(policyKey, 'rotate', 'make a new policy key active, endorsed by the previous one (POST /api/1/keys/policy/rotate)').action(async (flags: CommonFlags) => {
  // Files only, no store: a running server picks the new key up within seconds.
  const keyring = await ensurePolicyKey(configFrom(flags).general.data_dir);
  const r = await keyring.rotate();
  out(flags, { data: r }, () => `${r.key_id} active (endorsed by ${r.previous_key_id})\n`);
});

verb(policyKey, 'show', 'the active policy key and its endorsement chain (GET /api/1/keys/policy)').action(async (flags: CommonFlags) => {
  const k = (await ensurePolicyKey(configFrom(flags).general.data_dir)).current();
  const data = { key_id: k.keyId, algorithm: 'ed25519', public_key: k.publicKeyPem, endorsements: k.endorsements };
  out(flags, { data }, () => `${k.keyId} (${k.endorsements.length} endorsements)\n${k.publicKeyPem}`);
});

program.parseAsync(process.argv).catch((err: unknown) => {
  process.stderr.write(`capstan-server: ${err instanceof Error ? err.message : String(err)}\n`);
  process.exit(EXIT_CRASH);
});
