/**
 * Who may do what through the admin API, and the record of every write.
 *
 * ROUTE_ACCESS is the one table: each admin route (method + fastify route pattern) names the
 * least role that may call it, and each write its audit action (a stable dotted name) and where
 * its target is read from. One onRequest hook checks it after authentication; a route that is
 * not in the table is refused to everyone (deny by default, and a test lists every route).
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';
import { roleAllows, type Role } from './auth.js';

export interface RouteAccess {
  /** The least role that may call the route. */
  role: Role;
  /** Writes: the audit action. */
  action?: string;
  /** Where the audit target is read: a path parameter, or a field of the answer's `data`. */
  target?: { param: string } | { reply: string };
  /**
   * The body fields a lesser role may still send (an operator may change a node's state only):
   * `[role, fields]`; any other field needs `role` above.
   */
  lesser?: readonly [Role, readonly string[]];
}

const p = (param: string) => ({ param });
const r = (field: string) => ({ reply: field });
const view: RouteAccess = { role: 'viewer' };
const admin = (action: string, target?: RouteAccess['target']): RouteAccess => ({ role: 'admin', action, ...(target && { target }) });
const operator = (action: string, target?: RouteAccess['target']): RouteAccess => ({ role: 'operator', action, ...(target && { target }) });

function policyAccess(): Record<string, RouteAccess> {
  const out: Record<string, RouteAccess> = {};
  for (const [kind, plural] of [['directive', 'directives'], ['group', 'groups'], ['rule', 'rules'], ['technique', 'techniques'], ['property', 'properties']] as const) {
    out[`GET /api/1/${plural}`] = view;
    out[`GET /api/1/${plural}/:id`] = view;
    out[`POST /api/1/${plural}`] = admin(`${kind}.create`, r('id'));
    out[`PUT /api/1/${plural}/:id`] = admin(`${kind}.update`, p('id'));
    out[`DELETE /api/1/${plural}/:id`] = admin(`${kind}.delete`, p('id'));
  }
  return out;
}

export const ROUTE_ACCESS: Readonly<Record<string, RouteAccess>> = {
  // Nodes
  'GET /api/1/nodes': view,
  'GET /api/1/nodes/pending': view,
  'GET /api/1/nodes/:id': view,
  'GET /api/1/nodes/:id/inventory': view,
  'GET /api/1/nodes/:id/history': view,
  'GET /api/1/nodes/:id/runs': view,
  'GET /api/1/nodes/:id/compliance': view,
  'GET /api/1/nodes/:id/host-key': view,
  'GET /api/1/nodes/:id/claim': view,
  'GET /api/1/nodes/:id/policy': view,
  'GET /api/1/nodes/:id/properties': view,
  'GET /api/1/nodes/:id/properties/effective': view,
  'GET /api/1/nodes/:id/properties/own': view,
  'GET /api/1/node-properties': view,
  'GET /api/1/nodes/:id/inventory/history': view,
  'GET /api/1/groups/:id/nodes': view,
  'GET /api/1/software': view,
  'PUT /api/1/nodes/:id/properties': admin('node.properties.update', p('id')),
  'PUT /api/1/nodes/:id/properties/own': admin('node.own_properties.update', p('id')),
  'POST /api/1/nodes': admin('node.create', r('id')),
  'POST /api/1/nodes/:id/accept': operator('node.accept', p('id')),
  'POST /api/1/nodes/:id/refuse': operator('node.refuse', p('id')),
  'PATCH /api/1/nodes/:id': { ...admin('node.update', p('id')), lesser: ['operator', ['state']] },
  'DELETE /api/1/nodes/:id': admin('node.delete', p('id')),
  'DELETE /api/1/nodes/:id/host-key': admin('node.host_key.clear', p('id')),
  'POST /api/1/nodes/:id/claim/confirm': admin('node.claim.confirm', p('id')),
  'POST /api/1/nodes/:id/identity/renew': admin('node.identity.renew', p('id')),
  'POST /api/1/groups/:group/identity/renew': admin('group.identity.renew', p('group')),
  // Compliance, changes, lifecycle, status
  'GET /api/1/compliance': view,
  'GET /api/1/compliance/nodes': view,
  'GET /api/1/compliance/rules': view,
  'GET /api/1/compliance/directives': view,
  'GET /api/1/compliance/groups': view,
  'GET /api/1/compliance/rules/:id/nodes': view,
  'GET /api/1/changes': view,
  'GET /api/1/changes/histogram': view,
  'GET /api/1/findings': view,
  // Vulnerabilities: viewers read, operators mute, admins refresh the feeds.
  'GET /api/1/vulnerabilities': view,
  'GET /api/1/vulnerabilities/fixes': view,
  'GET /api/1/vulnerabilities/feeds': view,
  'POST /api/1/vulnerabilities/feeds/refresh': admin('vulnerability.feeds.refresh'),
  'GET /api/1/vulnerabilities/mutes': view,
  'POST /api/1/vulnerabilities/mutes': operator('vulnerability.mute.create', r('id')),
  'DELETE /api/1/vulnerabilities/mutes/:id': operator('vulnerability.mute.delete', p('id')),
  'GET /api/1/vulnerabilities/:id': view,
  'GET /api/1/vulnerabilities/:id/plan': view,
  'GET /api/1/nodes/:id/vulnerabilities': view,
  'GET /api/1/nodes/:id/score': view,
  'GET /api/1/score': view,
  // The event stream, and who is told of it
  'GET /api/1/events': view,
  'GET /api/1/subscriptions': view,
  'GET /api/1/subscriptions/:id': view,
  'POST /api/1/subscriptions': admin('subscription.create', r('id')),
  'PATCH /api/1/subscriptions/:id': admin('subscription.update', p('id')),
  'DELETE /api/1/subscriptions/:id': admin('subscription.delete', p('id')),
  'GET /api/1/deliveries': view,
  'GET /api/1/deliveries/:id': view,
  'POST /api/1/deliveries/:id/retry': operator('delivery.retry', p('id')),
  'GET /api/1/lifecycle': view,
  'GET /api/1/system/status': view,
  // The console's read endpoints
  'GET /api/1/compliance/history': view,
  'GET /api/1/compliance/worst-nodes': view,
  'GET /api/1/nodes/:id/identity': view,
  // Policy
  ...policyAccess(),
  // Read only though a POST (the desired objects are its body): what GETs show, so any role;
  // recorded like every POST (a review pipeline's plans are in the audit log too).
  'POST /api/1/policy/plan': { role: 'viewer', action: 'policy.plan' },
  'POST /api/1/keys/policy/rotate': admin('policy_key.rotate'),
  // What writing policy needs: the methods' parameters, an unsaved group's members.
  'GET /api/1/methods': view,
  // Change requests: an operator may propose (an admin reviews and deploys); all steps audited.
  'GET /api/1/change-requests': view,
  'GET /api/1/change-requests/:id': view,
  'GET /api/1/change-requests/:id/nodes/:node': view,
  'POST /api/1/change-requests': operator('change_request.propose', r('id')),
  'POST /api/1/change-requests/:id/approve': admin('change_request.approve', p('id')),
  'POST /api/1/change-requests/:id/reject': admin('change_request.reject', p('id')),
  'POST /api/1/change-requests/:id/deploy': admin('change_request.deploy', p('id')),
  'GET /api/1/policy/group-preview': view,
  // Node identity keys
  'GET /api/1/keys': view,
  'POST /api/1/keys/rotate': admin('key.rotate', r('kid')),
  'DELETE /api/1/keys/:kid': admin('key.delete', p('kid')),
  // Jobs (remote runs and bootstrap)
  'GET /api/1/jobs': view,
  'GET /api/1/jobs/:id': view,
  'GET /api/1/jobs/:id/tasks/:node': view,
  'GET /api/1/jobs/:id/tasks/:node/output': view,
  'POST /api/1/jobs': operator('job.create', r('id')),
  'POST /api/1/jobs/:id/cancel': operator('job.cancel', p('id')),
  // Patch campaigns (upgrades in waves, docs/campaigns.md)
  'GET /api/1/campaigns': view,
  'GET /api/1/campaigns/:id': view,
  'GET /api/1/campaigns/:id/report': view,
  'POST /api/1/campaigns': operator('campaign.create', r('id')),
  'POST /api/1/campaigns/:id/cancel': operator('campaign.cancel', p('id')),
  // SSH credentials of bootstrap jobs
  'GET /api/1/credentials': view,
  'GET /api/1/credentials/:id': view,
  'POST /api/1/credentials': admin('credential.create', r('id')),
  'DELETE /api/1/credentials/:id': admin('credential.delete', p('id')),
  // Managers
  'GET /api/1/managers': view,
  'GET /api/1/managers/:id': view,
  'POST /api/1/managers': admin('manager.create', r('id')),
  'PUT /api/1/managers/:id': admin('manager.update', p('id')),
  'DELETE /api/1/managers/:id': admin('manager.delete', p('id')),
  'POST /api/1/managers/:id/test': admin('manager.test', p('id')),
  'POST /api/1/managers/:id/poll': admin('manager.poll', p('id')),
  // Admins and the audit log
  'GET /api/1/whoami': view,
  'GET /api/1/admins': view,
  'GET /api/1/admins/:name': view,
  'POST /api/1/admins': admin('admin.create', r('name')),
  'DELETE /api/1/admins/:name': admin('admin.revoke', p('name')),
  'POST /api/1/admins/:name/token': admin('admin.token', p('name')),
  'GET /api/1/audit': view,
};

const routeKey = (req: FastifyRequest) => `${req.method === 'HEAD' ? 'GET' : req.method} ${req.routeOptions.url ?? ''}`;

/** The table entry of a request's route (undefined: not in the table, so refused). */
export const accessOf = (req: FastifyRequest): RouteAccess | undefined => ROUTE_ACCESS[routeKey(req)];

const forbidden = (req: FastifyRequest, needed: Role, what: string) =>
  capstanError('ERR_FORBIDDEN', `${req.principal!.name} has role ${req.principal!.role}; ${what} needs role ${needed}`);

/** The role check: run after authentication has set `req.principal`. */
export async function checkAccess(req: FastifyRequest): Promise<void> {
  const principal = req.principal;
  if (!principal) throw capstanError('ERR_UNAUTHORIZED', 'missing bearer token');
  const a = accessOf(req);
  if (!a) throw capstanError('ERR_FORBIDDEN', `${routeKey(req)} is in no role's list`);
  if (roleAllows(principal.role, a.role)) return;
  const lesser = a.lesser;
  if (!lesser || !roleAllows(principal.role, lesser[0])) throw forbidden(req, a.role, routeKey(req));
  // Read the body here (readJson keeps it for the route): only the lesser role's fields may be set.
  const body = await readJson(req);
  const fields = body && typeof body === 'object' && !Array.isArray(body) ? Object.keys(body) : [];
  const extra = fields.filter((f) => !lesser[1].includes(f));
  if (extra.length) throw forbidden(req, a.role, `${routeKey(req)} setting ${extra.join(', ')}`);
}

/** Dotted names for writes missing from the table (refused anyway): still one record each. */
const fallbackAction = (req: FastifyRequest) => `unlisted.${req.method.toLowerCase()}`;

export interface AuditDeps {
  /** The domain's audit log: the one writer of records (audit/log.ts). */
  audit: AuditLog;
}

/** The error code of an error answer (`{"error":{"code"}}`), if any. */
function errorCode(payload: unknown): string | null {
  if (typeof payload !== 'string' || payload.length > 65536) return null;
  try {
    const code = (JSON.parse(payload) as { error?: { code?: unknown } }).error?.code;
    return typeof code === 'string' ? code : null;
  } catch {
    return null;
  }
}

function replyTarget(payload: unknown, field: string): string | null {
  if (typeof payload !== 'string' || payload.length > 1 << 20) return null;
  try {
    const v = (JSON.parse(payload) as { data?: Record<string, unknown> }).data?.[field];
    return typeof v === 'string' ? v : null;
  } catch {
    return null;
  }
}

/**
 * Record every write (any method but GET and HEAD) before its answer leaves: each change the
 * domain made for it (with the object before and after), or, when it made none (a refused
 * request, a plan), the request itself; with its status and error code.
 */
export function installAudit(app: FastifyInstance, deps: AuditDeps): void {
  app.addHook('onSend', async (req, reply, payload) => {
    if (req.method === 'GET' || req.method === 'HEAD') return payload;
    const a = accessOf(req);
    const status = reply.statusCode;
    const error = status >= 400 ? errorCode(payload) : null;
    const actor: Actor = req.actor ?? {
      kind: 'admin', name: req.principal?.name ?? '', ...(req.principal && { role: req.principal.role }),
      request: { method: req.method, path: req.url.length > 2048 ? req.url.slice(0, 2048) : req.url, address: req.ip },
    };
    const changes = actor.pending ?? [];
    delete actor.pending;
    if (changes.length === 0) {
      const params = (req.params ?? {}) as Record<string, string | undefined>;
      let target: string | null = null;
      const t = a?.target;
      if (t && 'param' in t) target = params[t.param] ?? null;
      else if (t && status < 300) target = replyTarget(payload, t.reply);
      changes.push({ action: a?.action ?? fallbackAction(req), target });
    }
    // An unauthenticated request has no admin: the record says so (admin null).
    const who = req.principal ? actor : { ...actor, name: '' };
    for (const c of changes) await deps.audit.write(who, c, status, error);
    return payload;
  });
}
