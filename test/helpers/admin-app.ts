/**
 * What the admin API tests start from: the server's HTTP app in process on a real SQLite store,
 * with the policy generator and key, and an admin client that goes through `inject` (no socket);
 * or the whole server in process on port 0 (its sweeps, runners and relay links too), with an
 * admin client over HTTP.
 */
import { join } from 'node:path';
import type { Test } from 'tap';
import { silentLogger } from '@capstan/shared';
import { Spool } from '@capstan/toolkit';
import { buildApp } from '@capstan/server/api/app';
import { loadServerConfig } from '@capstan/server/config';
import { composeDomain } from '@capstan/server/domain';
import { ensurePolicyKey } from '@capstan/server/policy/key';
import { startServer } from '@capstan/server/server';
import { openRegistry } from '@capstan/server/registry/open';
import { adminClient, programDir } from './programs.js';

export const ADMIN_TOKEN = 'z'.repeat(32);

export interface Answer {
  status: number;
  /** The body parsed when it is JSON, else null. */
  json: any;
  /** The error's code, when the answer is one. */
  code: string | undefined;
  headers: Record<string, string | string[] | number | undefined>;
}

export async function adminApp(t: Test, opts: {
  overrides?: Record<string, unknown>; maxPlanBytes?: number;
  /** The data directory (default: programDir(t)). */
  dir?: string;
  /** More of the app's policy options: the shared folder, a node-token check. */
  policy?: { sharedFolder?: string; authorizeNode?: (req: { headers: Record<string, unknown> }, nodeId: string | undefined) => Promise<void> };
} = {}) {
  const dir = opts.dir ?? programDir(t);
  const config = loadServerConfig({ overrides: { 'general.data_dir': dir, ...opts.overrides } });
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const key = await ensurePolicyKey(dir);
  const domain = composeDomain({ store, log: silentLogger, key, reviewRoles: config.policy.review_roles });
  const generator = domain.generator;
  const policy = { key, ...(opts.maxPlanBytes && { maxPlanBytes: opts.maxPlanBytes }), ...opts.policy };
  const app = buildApp({ config, store, domain, spool, log: silentLogger, adminToken: ADMIN_TOKEN, status: async () => ({}), policy });
  t.teardown(async () => {
    await app.close();
    await store.close();
  });
  /** A request with a raw body (or none); `auth` '' sends no Authorization header. */
  const send = async (method: string, url: string, payload?: string, headers: Record<string, string> = {}, auth = `Bearer ${ADMIN_TOKEN}`): Promise<Answer> => {
    const res = await app.inject({
      method: method as 'GET', url,
      headers: { ...(auth && { authorization: auth }), ...(payload !== undefined && { 'content-type': 'application/json' }), ...headers },
      ...(payload !== undefined && { payload }),
    });
    const json = res.body && res.headers['content-type']?.toString().startsWith('application/json') ? JSON.parse(res.body) : null;
    return { status: res.statusCode, json, code: json?.error?.code as string | undefined, headers: res.headers };
  };
  /** The same with a JSON body. */
  const api = (method: string, url: string, body?: unknown, headers: Record<string, string> = {}, auth?: string) =>
    send(method, url, body === undefined ? undefined : JSON.stringify(body), headers, auth);
  return { dir, config, store, spool, key, domain, generator, app, api, send };
}

/**
 * The whole server in process, listening on port 0 in the test's directory, with the jobs sweep
 * fast and the lifecycle sweep out of the way; `api` calls its admin API with the admin token.
 * `close` may be called by the test before its teardown does. `dir` (default: programDir(t))
 * is its data directory unless the overrides say otherwise.
 */
export async function serverWithApi(t: Test, overrides: Record<string, unknown> | ((dir: string) => Record<string, unknown>) = {}, dir = programDir(t)) {
  const config = loadServerConfig({
    overrides: {
      'general.data_dir': dir, 'general.listen': '127.0.0.1:0', 'jobs.sweep_interval': '100ms', 'lifecycle.sweep_interval': '1h',
      ...(typeof overrides === 'function' ? overrides(dir) : overrides),
    },
  });
  const server = await startServer(config, silentLogger);
  let closing: Promise<void> | null = null;
  const close = () => (closing ??= server.close());
  t.teardown(close);
  return { dir, server, api: adminClient(server.url, server.adminToken), close };
}
