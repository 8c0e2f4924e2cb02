/**
 * Named admins and the audit log over HTTP: create (the token is shown once), list, show,
 * revoke, new token, whoami, and GET /api/1/audit. Who may call which is in ../access.ts.
 */
import type { FastifyInstance } from 'fastify';
import { parseDuration } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import type { AdminRecord, AdminRole, AdminStore } from '../../reads.js';
import { ADMIN_ROLES } from '../../reads.js';
import { parseRfc3339 } from '../../reads.js';
import { BOOTSTRAP_ADMIN, newToken, tokenDigest } from '../auth.js';
import { bodyObject, paging, single, timeParam, type Query } from '../params.js';

export interface AdminRouteDeps {
  admins: AdminStore;
  now?: () => Date;
}

/** Admin names: what a CLI flag and a log line carry without quoting. */
const NAME = /^[a-z0-9][a-z0-9._@-]{0,63}$/;
/** The longest lifetime a token may be given (`expires`): 10 years. */
const MAX_LIFETIME_MS = 10 * 365 * 86_400_000;

const bad = (message: string, field?: string) => capstanError('ERR_BAD_REQUEST', message, field ? { details: { field } } : {});

/** `expires`: an RFC 3339 time or a duration from now (`90d`, `12h`), in the future, at most 10 years ahead. */
export function parseExpires(v: unknown, now: Date): string | null {
  if (v === undefined || v === null) return null;
  if (typeof v !== 'string') throw bad('expires must be an RFC 3339 time or a duration such as 90d', 'expires');
  const at = parseRfc3339(v);
  const ms = at !== undefined ? at - now.getTime() : parseDuration(v);
  if (ms === null || /^\d+$/.test(v.trim())) throw bad('expires must be an RFC 3339 time or a duration such as 90d', 'expires');
  if (ms <= 0) throw bad('expires must be in the future', 'expires');
  if (ms > MAX_LIFETIME_MS) throw bad('expires must be at most 10 years ahead', 'expires');
  return new Date(now.getTime() + ms).toISOString();
}

function checkName(name: unknown): string {
  if (typeof name !== 'string' || !NAME.test(name)) {
    throw bad('name must be 1 to 64 characters: lowercase letters, digits, ".", "_", "@", "-", starting with a letter or digit', 'name');
  }
  return name;
}

const view = (a: AdminRecord) => ({
  name: a.name, role: a.role, created_at: a.created_at, expires_at: a.expires_at, revoked_at: a.revoked_at, last_used_at: a.last_used_at,
});

export function adminRoutes(app: FastifyInstance, deps: AdminRouteDeps): void {
  const { admins } = deps;
  const now = deps.now ?? (() => new Date());
  const unknown = (name: string) => capstanError('ERR_NOT_FOUND', `admin ${name} does not exist`);

  app.get('/api/1/whoami', async (req) => {
    const p = req.principal!;
    return { data: { name: p.name, role: p.role, expires_at: p.expiresAt ?? null } };
  });

  app.post('/api/1/admins', async (req, reply) => {
    const body = bodyObject(await readJson(req), ['name', 'role', 'expires']);
    const name = checkName(body.name);
    if (name === BOOTSTRAP_ADMIN) throw capstanError('ERR_CONFLICT', `${BOOTSTRAP_ADMIN} is the bootstrap admin's reserved name`);
    if (typeof body.role !== 'string' || !ADMIN_ROLES.includes(body.role as AdminRole)) throw bad(`role must be one of ${ADMIN_ROLES.join(', ')}`, 'role');
    const at = now();
    const expires = parseExpires(body.expires, at);
    const token = newToken();
    const a = await admins.createAdmin({ name, role: body.role as AdminRole, token_digest: tokenDigest(token), created_at: at.toISOString(), expires_at: expires });
    return reply.code(201).send({ data: { name: a.name, role: a.role, created_at: a.created_at, expires_at: a.expires_at, token } });
  });

  // Admins are few (people and pipelines): listed whole, paged here.
  app.get<{ Querystring: Query }>('/api/1/admins', async (req) => {
    const { page, per_page } = paging(req.query);
    const list = (await admins.listAdmins()).map(view);
    return { data: list.slice((page - 1) * per_page, page * per_page), total: list.length, page, per_page };
  });

  app.get<{ Params: { name: string } }>('/api/1/admins/:name', async (req) => {
    const a = await admins.getAdmin(req.params.name);
    if (!a) throw unknown(req.params.name);
    return { data: view(a) };
  });

  app.delete<{ Params: { name: string } }>('/api/1/admins/:name', async (req, reply) => {
    const name = req.params.name;
    if (name === BOOTSTRAP_ADMIN) throw capstanError('ERR_CONFLICT', `the bootstrap admin is revoked by replacing the admin.token file`);
    if (!(await admins.revokeAdmin(name, now().toISOString()))) {
      throw (await admins.getAdmin(name)) ? capstanError('ERR_CONFLICT', `admin ${name} is revoked already`) : unknown(name);
    }
    return reply.code(204).send();
  });

  app.post<{ Params: { name: string } }>('/api/1/admins/:name/token', async (req, reply) => {
    const name = req.params.name;
    if (name === BOOTSTRAP_ADMIN) throw capstanError('ERR_CONFLICT', `the bootstrap admin's token is the admin.token file`);
    bodyObject((await readJson(req)) ?? {}, []);
    const token = newToken();
    const a = await admins.replaceToken(name, tokenDigest(token));
    if (!a) throw (await admins.getAdmin(name)) ? capstanError('ERR_CONFLICT', `admin ${name} is revoked`) : unknown(name);
    return reply.code(201).send({ data: { name: a.name, role: a.role, created_at: a.created_at, expires_at: a.expires_at, token } });
  });

  app.get<{ Querystring: Query }>('/api/1/audit', async (req) => {
    const q = req.query;
    const result = single(q, 'result');
    if (result !== undefined && result !== 'ok' && result !== 'error') throw bad('result must be ok or error');
    const text = (n: string) => single(q, n);
    const from = timeParam(q, 'from');
    const to = timeParam(q, 'to');
    const admin = text('admin');
    const action = text('action');
    const target = text('target');
    const { page, per_page } = paging(q);
    const { rows, total } = await admins.listAudit({
      ...(from !== undefined && { from }), ...(to !== undefined && { to }), ...(admin !== undefined && { admin }),
      ...(action !== undefined && { action }), ...(target !== undefined && { target }),
      ...(result !== undefined && { result: result as 'ok' | 'error' }), page, per_page,
    });
    return { data: rows, total, page, per_page };
  });
}
