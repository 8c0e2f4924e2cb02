/**
 * Named admins and the audit log over HTTP: create (the token is shown once), list, show,
 * revoke, new token, whoami, and GET /api/1/audit. Who may call which is in ../access.ts.
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import type { Reads } from '../../reads.js';
import { adminView, type AdminService } from '../../admins/service.js';
import { actorOf } from '../actor.js';
import { bodyObject, paging, single, timeParam, type Query } from '../params.js';

export interface AdminRouteDeps {
  admins: Reads['admins'];
  /** The door for named admins (admins/service.ts). */
  service: AdminService;
}

const bad = (message: string) => capstanError('ERR_BAD_REQUEST', message);

export function adminRoutes(app: FastifyInstance, deps: AdminRouteDeps): void {
  const { admins, service } = deps;
  const unknown = (name: string) => capstanError('ERR_NOT_FOUND', `admin ${name} does not exist`);

  app.get('/api/1/whoami', async (req) => {
    const p = req.principal!;
    return { data: { name: p.name, role: p.role, expires_at: p.expiresAt ?? null } };
  });

  app.post('/api/1/admins', async (req, reply) => {
    const body = bodyObject(await readJson(req), ['name', 'role', 'expires']);
    const a = await service.create(body, actorOf(req));
    return reply.code(201).send({ data: { name: a.name, role: a.role, created_at: a.created_at, expires_at: a.expires_at, token: a.token } });
  });

  // Admins are few (people and pipelines): listed whole, paged here.
  app.get<{ Querystring: Query }>('/api/1/admins', async (req) => {
    const { page, per_page } = paging(req.query);
    const list = (await admins.listAdmins()).map(adminView);
    return { data: list.slice((page - 1) * per_page, page * per_page), total: list.length, page, per_page };
  });

  app.get<{ Params: { name: string } }>('/api/1/admins/:name', async (req) => {
    const a = await admins.getAdmin(req.params.name);
    if (!a) throw unknown(req.params.name);
    return { data: adminView(a) };
  });

  app.delete<{ Params: { name: string } }>('/api/1/admins/:name', async (req, reply) => {
    await service.revoke(req.params.name, actorOf(req));
    return reply.code(204).send();
  });

  app.post<{ Params: { name: string } }>('/api/1/admins/:name/token', async (req, reply) => {
    bodyObject((await readJson(req)) ?? {}, []);
    const a = await service.newToken(req.params.name, actorOf(req));
    return reply.code(201).send({ data: { name: a.name, role: a.role, created_at: a.created_at, expires_at: a.expires_at, token: a.token } });
  });

  app.get<{ Querystring: Query }>('/api/1/audit', async (req) => {
    const q = req.query;
    const result = single(q, 'result');
    if (result !== undefined && result !== 'ok' && result !== 'error') throw bad('result must be ok or error');
    const text = (n: string) => single(q, n);
    const from = timeParam(q, 'from');
    const to = timeParam(q, 'to');
    const admin = text('admin');
    const actor = text('actor');
    const action = text('action');
    const target = text('target');
    const { page, per_page } = paging(q);
    const { rows, total } = await admins.listAudit({
      ...(from !== undefined && { from }), ...(to !== undefined && { to }), ...(admin !== undefined && { admin }), ...(actor !== undefined && { actor }),
      ...(action !== undefined && { action }), ...(target !== undefined && { target }),
      ...(result !== undefined && { result: result as 'ok' | 'error' }), page, per_page,
    });
    return { data: rows, total, page, per_page };
  });
}
