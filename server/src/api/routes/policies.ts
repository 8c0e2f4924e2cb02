/**
 * Policies over HTTP.
 * - Admin (behind the bearer token): CRUD of directives, groups, rules and techniques under /api/1/. Every
 *   save regenerates the bundles of the nodes it affects before answering, so the next agent run
 *   sees it.
 * - Public: GET /api/1/keys/policy (the policy public key, to pin in agents' configuration) and
 *   GET /policies/<node-id>/rules, the signed bundle with its config id as ETag.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { etagMatches, readJson } from '@capstan/toolkit/http/app';
import { changesQuery } from '@capstan/toolkit/policy/changes';
import type { Reads } from '../../reads.js';
import type { BundleServer } from '../../policy/bundles.js';
import { parsePolicyObject, POLICY_PLURAL, type PolicyService } from '../../policy/service.js';
import { actorOf } from '../actor.js';
import type { PolicyKeyring } from '../../policy/key.js';
import { checkId, parseGroup } from '../../policy/model.js';
import { METHOD_SPECS } from '@capstan/shared/policy/methods';
import { MAX_FILTER_VALUES } from '../../registry/filters.js';
import { DEFAULT_PLAN_NODES, MAX_PLAN_NODES } from '../../policy/plan.js';
import { listView } from '../node-view.js';
import { intParam, paging, single, type Query } from '../params.js';
import { sharedFolderRoutes } from '../../policy/shared-folder.js';
import type { PlanBudget } from '../plan-budget.js';
import type { PlanBounds } from '../../policy/plan-memory.js';

/**
 * May this request fetch this node's policy? The node identity layer fills this with its check
 * (token, or certificate until identities exist); the default allows, as before identities.
 */
export type AuthorizeNode = (req: FastifyRequest, nodeId: string | undefined) => Promise<void>;

export interface PolicyRouteDeps {
  /** The door for policy changes (policy/service.ts): saves, deletes, plans. */
  service: PolicyService;
  /** Signed bundles for the nodes (policy/bundles.ts). */
  bundles: BundleServer;
  /** What the routes read: node records for the membership views. */
  reads: Pick<Reads, 'getNode' | 'listNodes' | 'listNodeIds' | 'getPolicyBundle'>;
  key: PolicyKeyring;
  authorizeNode?: AuthorizeNode;
  /** `[policy] shared_folder`: served at /rudder/relay-api/1/shared-folder/ (empty: every file 404). */
  sharedFolder?: string;
  /** `[policy] max_plan_size`: the largest body of POST /api/1/policy/plan (default 16 MiB). */
  maxPlanBytes?: number;
  /** `[policy] plan_time_limit`, `plan_memory_limit`, `plan_concurrency`, `plan_concurrency_total` (api/plan-budget.ts). */
  planBudget?: PlanBudget;
}

/**
 * Refused input names its field in the answer too: `{"error": {"code", "message", "field"}}`,
 * the field's path in the request body (`params.path`, `filter[0].key`, `directives`).
 */
export async function namingField(reply: FastifyReply, fn: () => Promise<FastifyReply>): Promise<FastifyReply> {
  try {
    return await fn();
  } catch (err) {
    const field = isCapstanError(err) ? err.details?.field : undefined;
    if (!isCapstanError(err) || typeof field !== 'string') throw err;
    // An expression's refusal keeps where it went wrong (a group's filter).
    const position = typeof err.details?.position === 'number' ? { position: err.details.position } : {};
    return reply.code(err.statusCode).send({ error: { code: err.code, message: err.message, field, ...position } });
  }
}

export function policyAdminRoutes(app: FastifyInstance, deps: PolicyRouteDeps): void {
  const { service } = deps;

  // A new active policy key, endorsed by the previous one (policy/service.ts).
  app.post('/api/1/keys/policy/rotate', async (req) => {
    const r = await service.rotateKey(actorOf(req));
    return { data: { key_id: r.key_id, previous_key_id: r.previous_key_id, endorsement: r.endorsement } };
  });
  // Policy as code: what making the server match these objects would change, and for which
  // nodes (server/src/policy/plan.ts). Read only; the client applies with PUT and DELETE.
  app.post<{ Querystring: { max_nodes?: string } }>('/api/1/policy/plan', async (req, reply) => namingField(reply, async () => {
    const max = req.query.max_nodes === undefined ? DEFAULT_PLAN_NODES : Number(req.query.max_nodes);
    if (!(max >= 1 && max <= MAX_PLAN_NODES)) throw capstanError('ERR_BAD_REQUEST', `max_nodes must be an integer from 1 to ${MAX_PLAN_NODES}`);
    const actor = actorOf(req);
    const plan = (bounds?: PlanBounds) => async () => service.plan(await readJson(req, deps.maxPlanBytes ?? 16 * 1024 * 1024), max, bounds);
    return reply.send({ data: deps.planBudget ? await deps.planBudget.run(`${actor.kind}:${actor.name}`, (d) => plan(d)()) : await plan()() });
  }));

  for (const kind of ['directive', 'group', 'rule', 'technique', 'property'] as const) {
    const base = `/api/1/${POLICY_PLURAL[kind]}`;
    app.get(base, async () => {
      const list = await service.list(kind);
      return { data: list, total: list.length };
    });
    app.get<{ Params: { id: string } }>(`${base}/:id`, async (req) => ({ data: await service.get(kind, req.params.id) }));

    const answer = (r: Awaited<ReturnType<PolicyService['save']>>) => ({ data: r.object, regenerated: r.regenerated, ...(r.warnings && { warnings: r.warnings }) });
    app.post(base, async (req, reply) => namingField(reply, async () =>
      reply.code(201).send(answer(await service.save(kind, parsePolicyObject(kind, await service.withKeptSecrets(kind, await readJson(req))), actorOf(req), false)))));

    // PUT replaces the whole object, creating it when absent (201) — the path names the id.
    app.put<{ Params: { id: string } }>(`${base}/:id`, async (req, reply) => namingField(reply, async () => {
      // A property's name has its own alphabet (parseProperty checks it).
      if (kind !== 'property') checkId(req.params.id);
      // A group's secret property sent back as {"secret": true} keeps its saved value.
      const body = await service.withKeptSecrets(kind, await readJson(req), req.params.id);
      const r = await service.save(kind, parsePolicyObject(kind, body, req.params.id), actorOf(req), null);
      return reply.code(r.created ? 201 : 200).send(answer(r));
    }));

    app.delete<{ Params: { id: string } }>(`${base}/:id`, async (req, reply) => {
      await service.delete(kind, req.params.id, actorOf(req));
      return reply.code(204).send();
    });
  }
}


/** Members listed by a group preview, at most. */
export const PREVIEW_NODES = 20;

/**
 * What an admin needs to write policy: the methods with their parameters (GET /api/1/methods,
 * from the specs the server and the agent check with: shared/src/policy/params.ts), and the
 * members an unsaved group would have (GET /api/1/policy/group-preview: `q` an expression of the
 * filter language, `filter` JSON filters, `node` static members; checked as a save checks them,
 * refusals naming the field and, for an expression, the position). GETs: a preview asked at
 * every keystroke leaves no audit record.
 */
export function policyAuthoringRoutes(app: FastifyInstance, deps: Pick<PolicyRouteDeps, 'reads'>): void {
  const methods = [...METHOD_SPECS.values()].map((m) => ({
    name: m.name, audit_only: m.auditOnly === true, params: m.params ?? [], example: m.example ?? null,
  })).sort((a, b) => (a.name < b.name ? -1 : 1));
  app.get('/api/1/methods', async () => ({ data: methods, total: methods.length }));

  app.get<{ Querystring: Query }>('/api/1/policy/group-preview', async (req, reply) => namingField(reply, async () => {
    const list = (v: string | string[] | undefined) => (v === undefined ? [] : Array.isArray(v) ? v : [v]);
    const unknown = Object.keys(req.query).find((k) => !['q', 'filter', 'node', 'limit'].includes(k));
    if (unknown !== undefined) throw capstanError('ERR_BAD_REQUEST', `unknown parameter ${unknown}`);
    const limit = intParam(req.query, 'limit', PREVIEW_NODES, 100);
    const filter: unknown[] = list(req.query.filter).map((text, i) => {
      try {
        return JSON.parse(text) as unknown;
      } catch {
        throw capstanError('ERR_BAD_REQUEST', `filter[${i}] must be JSON {"key", "values", "exclude"}`, { details: { field: `filter[${i}]` } });
      }
    });
    const q = single(req.query, 'q');
    if (q !== undefined && q.trim() !== '') filter.push({ key: 'q', values: [q] });
    const nodes = list(req.query.node);
    const group = parseGroup({ id: 'preview', name: 'preview', ...(nodes.length > 0 && { nodes }), filter });
    const accepted = { key: 'accepted' as const, values: ['accepted'] };
    const members = new Set<string>();
    if (group.filter && group.filter.length > 0) for (const id of await deps.reads.listNodeIds([...group.filter, accepted])) members.add(id);
    for (let i = 0; i < (group.nodes ?? []).length; i += MAX_FILTER_VALUES) {
      for (const id of await deps.reads.listNodeIds([{ key: 'id', values: group.nodes!.slice(i, i + MAX_FILTER_VALUES) }, accepted])) members.add(id);
    }
    const first = [...members].sort().slice(0, limit);
    const rows = first.length === 0 ? [] : (await deps.reads.listNodes({ filters: [{ key: 'id', values: first }], sort: 'name', page: 1, per_page: first.length })).data;
    return reply.send({ data: rows.map(listView), total: members.size, unknown_nodes: nodes.length - (await countKnown(deps.reads, nodes)) });
  }));
}

/** How many of `ids` the registry knows (in any state): a static member it does not know is a typo. */
async function countKnown(reads: Pick<Reads, 'listNodeIds'>, ids: string[]): Promise<number> {
  let n = 0;
  for (let i = 0; i < ids.length; i += MAX_FILTER_VALUES) n += (await reads.listNodeIds([{ key: 'id', values: ids.slice(i, i + MAX_FILTER_VALUES) }])).length;
  return n;
}

/** GET /api/1/groups/<id>/nodes and GET /api/1/nodes/<id>/policy: membership as the generator sees it. */
export function policyMembershipRoutes(app: FastifyInstance, deps: Pick<PolicyRouteDeps, 'reads' | 'service'>): void {
  const { reads: store } = deps;
  const generator = deps.service.generator;
  app.get<{ Params: { id: string }; Querystring: Query }>('/api/1/groups/:id/nodes', async (req) => {
    const { page, per_page } = paging(req.query, 100);
    const ids = await generator.groupMembers(req.params.id);
    if (ids === null) throw capstanError('ERR_NOT_FOUND', `group ${req.params.id} does not exist`);
    const slice = ids.slice((page - 1) * per_page, page * per_page);
    const nodes = slice.length === 0 ? [] : (await store.listNodes({ filters: [{ key: 'id', values: slice }], sort: 'id', page: 1, per_page: slice.length })).data;
    return { data: nodes.map(listView), total: ids.length, page, per_page };
  });
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/policy', async (req) => {
    const node = await store.getNode(req.params.id);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${req.params.id} is unknown`);
    const bundle = await store.getPolicyBundle(node.id);
    return {
      data: {
        node_id: node.id, accepted: node.accepted, config_id: bundle?.config_id ?? null, ...(await generator.explain(node.id)),
        // Why the last generation left this node's previous bundle in place (a conflict, a template error).
        problem: await generator.problemOf(node.id),
      },
    };
  });
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/properties/effective', async (req) => {
    const e = await deps.service.effective(req.params.id);
    if (!e) throw capstanError('ERR_NODE_UNKNOWN', `node ${req.params.id} is unknown`);
    return { data: e };
  });
}

export function policyNodeRoutes(app: FastifyInstance, deps: PolicyRouteDeps): void {
  const { key, bundles } = deps;
  const generator = deps.service.generator;
  const authorize = deps.authorizeNode ?? (async () => undefined);

  // Behind the same switch as policy downloads (identity.require_token): a token of any node.
  const authorizeNode = deps.authorizeNode;
  sharedFolderRoutes(app, deps.sharedFolder ?? '', authorizeNode ? (req) => authorizeNode(req, undefined) : undefined);

  // Push hints for relays (toolkit/src/policy/changes.ts): node ids only, like the relay nodes
  // list; the bundles themselves stay behind the node's authorization.
  app.get<{ Querystring: Record<string, string | undefined> }>('/rudder/relay-api/1/policies/changes', async (req, reply) => {
    const { since, waitMs } = changesQuery(req.query);
    const ac = new AbortController();
    reply.raw.on('close', () => ac.abort());
    return { data: await generator.changes.since(since, waitMs, ac.signal) };
  });
  // Long polls would hold a shutdown for their whole wait: answer them first.
  app.addHook('preClose', async () => generator.changes.close());

  // The endorsements let an agent that pinned an older key reach this one (shared/src/policy/keys.ts).
  app.get('/api/1/keys/policy', async () => {
    const k = key.current();
    return { data: { key_id: k.keyId, algorithm: 'ed25519', public_key: k.publicKeyPem, endorsements: k.endorsements } };
  });

  app.get<{ Params: { id: string } }>('/policies/:id/rules', async (req, reply) => {
    await authorize(req, req.params.id);
    const answer = await bundles.forNode(req.params.id);
    reply.header('etag', answer.etag).header('cache-control', 'no-cache');
    if (etagMatches(req.headers['if-none-match'], answer.etag)) return reply.code(304).send();
    return reply.type('application/json').send(answer.text());
  });
}
