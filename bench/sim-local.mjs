#!/usr/bin/env node
// @ts-check
/**
 * capstan-sim against a fresh local fleet root: starts a capstan-server (SQLite, or a fresh
 * PostgreSQL database with --postgres) and one or more capstan-relayd in front of it, in a
 * temporary directory on loopback, runs capstan-sim with every relay and both pids, and stops
 * everything. Arguments other than its own go to capstan-sim unchanged:
 *
 *   node bench/sim-local.mjs [--postgres] [--relays N] [--keep] -- --nodes 10000 --time-scale 20 --duration 60s
 */
import { spawn } from 'node:child_process';
import { mkdtemp, rm } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join, resolve } from 'node:path';
import { parseArgs } from 'node:util';
import { freshDatabase, pgUnavailable } from './lib/postgres.mjs';
import { programPaths, startProgram } from './lib/programs.mjs';

const SIM = resolve(import.meta.dirname, 'dist/sim/cli.js');
const { values: own, positionals: simArgs } = parseArgs({
  allowPositionals: true,
  options: {
    postgres: { type: 'boolean', default: false },
    relays: { type: 'string', default: '1' },
    keep: { type: 'boolean', default: false },
  },
});
const relays = Number(own.relays);
if (!Number.isInteger(relays) || relays < 1 || relays > 16) {
  process.stderr.write('sim-local: --relays must be an integer from 1 to 16\n');
  process.exit(2);
}
if (own.postgres) {
  const why = await pgUnavailable();
  if (why) {
    process.stderr.write(`sim-local: ${why}\n`);
    process.exit(3);
  }
}

const bins = programPaths();
const dir = await mkdtemp(join(tmpdir(), 'capstan-sim-local-'));
const db = own.postgres ? await freshDatabase() : null;
/** @type {Awaited<ReturnType<typeof startProgram>>[]} */
const started = [];
let code = 1;
try {
  const server = await startProgram(bins.server, ['serve', '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'server'), '--log-level', 'warn', ...(db ? ['--database', db.url] : [])]);
  started.push(server);
  const relayUrls = [];
  const pids = ['--pid', `server=${server.pid}`];
  for (let i = 0; i < relays; i++) {
    const relay = await startProgram(bins.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, `relay${i}`), '--upstream', server.url, '--log-level', 'warn']);
    started.push(relay);
    relayUrls.push('--relay', relay.url);
    pids.push('--pid', `relay${relays > 1 ? i : ''}=${relay.pid}`);
  }
  process.stderr.write(`sim-local: server ${server.url} (${db ? 'PostgreSQL' : 'SQLite'}), relays ${relayUrls.filter((_, k) => k % 2).join(' ')}, in ${dir}\n`);
  const sim = spawn(process.execPath, [
    SIM, ...relayUrls, '--server', server.url, '--token-file', join(dir, 'server', 'admin.token'), ...pids, ...simArgs,
  ], { stdio: 'inherit' });
  code = await new Promise((res) => sim.once('exit', (c) => res(c ?? 1)));
} finally {
  for (const p of started.reverse()) await p.stop();
  if (db && !own.keep) await db.drop().catch(() => undefined);
  if (!own.keep) await rm(dir, { recursive: true, force: true });
  else process.stderr.write(`sim-local: kept ${dir}${db ? ` and database ${db.name}` : ''}\n`);
}
process.exit(code);
