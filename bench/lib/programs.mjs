// @ts-check
/**
 * Starting the real capstan-server and capstan-relayd for a benchmark: child processes on port 0
 * in temporary directories, ready when they print `{"ready":true,"url":…}`, stopped with SIGTERM
 * (so a --cpu-prof profile gets written) and SIGKILL if they hang.
 */
import { spawn } from 'node:child_process';
import { existsSync, readFileSync } from 'node:fs';
import { createInterface } from 'node:readline';
import { basename, resolve } from 'node:path';

export const REPO = resolve(import.meta.dirname, '../..');

/** Where the built programs are: this checkout unless CAPSTAN_BENCH_PROGRAMS points elsewhere. */
export function programPaths(root = process.env.CAPSTAN_BENCH_PROGRAMS || REPO) {
  return {
    root,
    server: resolve(root, 'server/dist/cli.js'),
    relayd: resolve(root, 'relayd/dist/cli.js'),
  };
}

/**
 * The NODE_OPTIONS the shipped systemd unit of `program` ('server', 'relayd') gives it
 * (packaging/systemd/capstan-<program>.service), '' when it sets none: a benchmark runs the
 * program, or its code in process, with the same heap settings as a host does.
 * @param {string} program
 */
export function unitNodeOptions(program) {
  const unit = resolve(REPO, `packaging/systemd/capstan-${program}.service`);
  return existsSync(unit) ? nodeOptionsOfUnit(readFileSync(unit, 'utf8')) : '';
}

/**
 * The NODE_OPTIONS a unit file's text sets: `Environment=NODE_OPTIONS=…` or, quoted as systemd
 * allows, `Environment="NODE_OPTIONS=…"`; '' when no such line is whole.
 * @param {string} text
 */
export function nodeOptionsOfUnit(text) {
  return /^Environment=("?)NODE_OPTIONS=([^"\n]*)\1\s*$/m.exec(text)?.[2]?.trim() ?? '';
}

/**
 * `env` with the unit's NODE_OPTIONS of `program` before any the caller gives.
 * @param {string} program
 * @param {NodeJS.ProcessEnv} env
 */
export function withUnitNodeOptions(program, env) {
  const options = [unitNodeOptions(program), env.NODE_OPTIONS ?? ''].filter(Boolean).join(' ');
  return options ? { ...env, NODE_OPTIONS: options } : env;
}

/**
 * A program (`<root>/<program>/dist/cli.js`) started as its unit starts it: with the unit's
 * NODE_OPTIONS, then `nodeFlags` on its command line.
 * @param {string} bin
 * @param {string[]} args
 * @param {{ nodeFlags?: string[], timeoutMs?: number, env?: NodeJS.ProcessEnv }} [opts]
 */
export async function startProgram(bin, args, opts = {}) {
  const proc = spawn(process.execPath, [...(opts.nodeFlags ?? []), bin, ...args], {
    stdio: ['ignore', 'pipe', 'pipe'],
    env: withUnitNodeOptions(basename(resolve(bin, '../..')), opts.env ?? process.env),
  });
  /** @type {string[]} */
  const stderr = [];
  proc.stderr.on('data', (d) => {
    if (stderr.length < 200) stderr.push(String(d));
  });
  const timeoutMs = opts.timeoutMs ?? 20_000;
  const url = await new Promise((res, rej) => {
    const timer = setTimeout(() => rej(new Error(`${bin} not ready in ${timeoutMs} ms: ${stderr.join('')}`)), timeoutMs);
    proc.once('exit', (code) => {
      clearTimeout(timer);
      rej(new Error(`${bin} exited with ${code}: ${stderr.join('').slice(-2000)}`));
    });
    createInterface({ input: proc.stdout }).on('line', (line) => {
      if (line.startsWith('{"ready":true')) {
        clearTimeout(timer);
        res(JSON.parse(line).url);
      }
    });
  });
  return {
    /** @type {string} */
    url,
    pid: /** @type {number} */ (proc.pid),
    stderr,
    /** SIGTERM, then SIGKILL after `graceMs`; resolves with the exit code. */
    stop(graceMs = 15_000) {
      return new Promise((res) => {
        if (proc.exitCode !== null || proc.signalCode !== null) return res(proc.exitCode);
        const kill = setTimeout(() => proc.kill('SIGKILL'), graceMs);
        proc.once('exit', (code) => {
          clearTimeout(kill);
          res(code);
        });
        proc.kill('SIGTERM');
      });
    },
  };
}
