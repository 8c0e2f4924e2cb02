/**
 * Relay-facing bootstrap routes (docs/bootstrap.md, "From a relay"): a relay that hosts a node's
 * provider runs that node's bootstrap, outbound from the node's segment. It claims its tasks
 * (secrets sealed to its certificate), downloads the agent package, and reports each step, a
 * first-use host key and the outcome; the server records them as it records its own steps and
 * waits for the enrolment itself. Same authentication as the providers routes: the relay's own
 * token naming the relay in the path (unless `[identity] require_relay_token = false`).
 *
 *   POST /relay-api/1/bootstrap/<relay>/claim                 {limit, agent_url?}
 *   GET  /relay-api/1/bootstrap/<relay>/package/<arch>
 *   POST /relay-api/1/bootstrap/<relay>/tasks/<job>/<node>    one event (shared/bootstrap/relay.ts)
 */
import { createReadStream } from 'node:fs';
import { createHash } from 'node:crypto';
import { basename } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { capstanError, ERROR_CODES } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import { PROVIDER_ID } from '@capstan/toolkit/providers/index';
import { RELAY_BOOTSTRAP_PATH, type RelayBootstrapEvent } from '@capstan/toolkit/bootstrap/relay';
import type { RelayAuthorizer } from '../../identity/relay-auth.js';
import type { BootstrapRunner } from '../../bootstrap/runner.js';

/** Tasks one claim may take, whatever the relay asks for. */
export const MAX_CLAIM = 64;
const MAX_EVENT_BYTES = 16 * 1024;
const ARCH = /^[a-z0-9][a-z0-9-]{0,31}$/;
const STEPS = new Set(['connect', 'verify', 'copy', 'install']);
const FINGERPRINT = /^SHA256:[A-Za-z0-9+/]{43}$/;
const ALGORITHM = /^[a-z0-9@.-]{1,64}$/;

const bad = (message: string): never => {
  throw capstanError('ERR_BAD_REQUEST', message);
};
const str = (v: unknown, max: number): v is string => typeof v === 'string' && v.length <= max;

/** One event, checked field by field: anything else is a 400. */
export function parseRelayEvent(raw: unknown): RelayBootstrapEvent {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) bad('the body must be a JSON object');
  const o = raw as Record<string, unknown>;
  const keys = Object.keys(o).sort().join(',');
  if (keys === 'message,step') {
    if (!str(o.step, 16) || !STEPS.has(o.step)) bad('step must be connect, verify, copy or install');
    if (!str(o.message, 2000)) bad('message must be a string of at most 2000 characters');
    return { step: o.step as 'connect', message: o.message as string };
  }
  const inner = (k: string) => (o[k] && typeof o[k] === 'object' && !Array.isArray(o[k]) ? o[k] as Record<string, unknown> : bad(`${k} must be an object`));
  if (keys === 'host_key') {
    const h = inner('host_key');
    if (Object.keys(h).sort().join(',') !== 'algorithm,fingerprint' || !str(h.algorithm, 64) || !ALGORITHM.test(h.algorithm) || !str(h.fingerprint, 64) || !FINGERPRINT.test(h.fingerprint)) {
      bad('host_key must be {algorithm, fingerprint: "SHA256:…"}');
    }
    return { host_key: { algorithm: h.algorithm as string, fingerprint: h.fingerprint as string } };
  }
  if (keys === 'installed') {
    const i = inner('installed');
    if (Object.keys(i).sort().join(',') !== 'arch,os' || !str(i.os, 64) || !str(i.arch, 32) || !ARCH.test(i.arch)) bad('installed must be {os, arch}');
    return { installed: { os: i.os as string, arch: i.arch as string } };
  }
  if (keys === 'failed') {
    const f = inner('failed');
    // A code of the registry only: the task's reason is derived from it.
    if (Object.keys(f).sort().join(',') !== 'code,message' || !str(f.code, 64) || !Object.hasOwn(ERROR_CODES, f.code) || !str(f.message, 2000)) {
      bad('failed must be {code: <a Capstan error code>, message}');
    }
    return { failed: { code: f.code as string, message: f.message as string } };
  }
  return bad('the body must be one of {step, message}, {host_key}, {installed}, {failed}');
}

export interface BootstrapRelayRouteDeps {
  /** Absent: this server runs no bootstrap ([bootstrap] enabled = false): claims answer no task. */
  runner?: BootstrapRunner;
  authorizeRelay?: RelayAuthorizer;
}

export function bootstrapRelayRoutes(app: FastifyInstance, deps: BootstrapRelayRouteDeps): void {
  const relayId = async (id: string, authorization: string | string[] | undefined) => {
    if (!PROVIDER_ID.test(id) || id === 'server') bad('invalid relay id');
    if (deps.authorizeRelay) await deps.authorizeRelay(authorization, id);
    return id;
  };
  const base = `${RELAY_BOOTSTRAP_PATH}/:relay`;

  app.post<{ Params: { relay: string } }>(`${base}/claim`, async (req) => {
    const relay = await relayId(req.params.relay, req.headers.authorization);
    const body = await readJson(req, MAX_EVENT_BYTES) as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object' || Array.isArray(body)) bad('the body must be {limit, agent_url?}');
    const { limit, agent_url: agentUrl, ...rest } = body as Record<string, unknown>;
    if (Object.keys(rest).length) bad(`unknown fields: ${Object.keys(rest).join(', ')}`);
    if (typeof limit !== 'number' || !Number.isInteger(limit) || limit < 1) bad('limit must be a positive integer');
    if (agentUrl !== undefined && (!str(agentUrl, 2048) || !/^https?:\/\/[^\s]+$/.test(agentUrl))) bad('agent_url must be an http or https URL');
    if (!deps.runner) return { data: [] };
    return { data: await deps.runner.claimForRelay(relay, Math.min(limit as number, MAX_CLAIM), (agentUrl as string | undefined) ?? null) };
  });

  app.get<{ Params: { relay: string; arch: string } }>(`${base}/package/:arch`, async (req, reply) => {
    await relayId(req.params.relay, req.headers.authorization);
    if (!ARCH.test(req.params.arch)) bad('invalid architecture');
    if (!deps.runner) throw capstanError('ERR_BOOTSTRAP_DISABLED', 'this server runs no bootstrap ([bootstrap] enabled = false)');
    const pkg = await deps.runner.packageFor(req.params.arch);
    if (!pkg) throw capstanError('ERR_BOOTSTRAP_UNSUPPORTED_OS', `no agent package for architecture ${req.params.arch}`, { statusCode: 404 });
    // The digest goes first, in a header: the relay checks what it received against it.
    const hash = createHash('sha256');
    for await (const chunk of createReadStream(pkg.path)) hash.update(chunk as Buffer);
    return reply.type('application/vnd.debian.binary-package')
      .header('x-capstan-sha256', hash.digest('hex'))
      .header('x-capstan-package', basename(pkg.path))
      .send(createReadStream(pkg.path));
  });

  app.post<{ Params: { relay: string; job: string; node: string } }>(`${base}/tasks/:job/:node`, async (req) => {
    const relay = await relayId(req.params.relay, req.headers.authorization);
    const event = parseRelayEvent(await readJson(req, MAX_EVENT_BYTES));
    if (!deps.runner) throw capstanError('ERR_NOT_FOUND', `relay ${relay} runs no bootstrap task ${req.params.job}/${req.params.node}`);
    return { data: await deps.runner.relayEvent(relay, req.params.job, req.params.node, event) };
  });
}
