/**
 * Policies over HTTP.
 * - Admin (behind the bearer token): CRUD of directives, groups and rules under /api/1/. Every
 *   save regenerates the bundles of the nodes it affects before answering, so the next agent run
 *   sees it.
 * - Public: GET /api/1/keys/policy (the policy public key, to pin in agents' configuration) and
 *   GET /policies/<node-id>/rules, the signed bundle with its config id as ETag.
 */
import type { FastifyInstance, FastifyReply, FastifyRequest } from 'fastify';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import { signBundle, type PolicyBundle } from '@capstan/shared/policy/bundle';
import { etagMatches, readJson } from '@capstan/toolkit/http/app';
import { changesQuery } from '@capstan/toolkit/policy/changes';
import type { PolicyKind, Store } from '../../store/store.js';
import type { PolicyGenerator } from '../../policy/generate.js';
import type { PolicyKeyring } from '../../policy/key.js';
import { BUILTIN_GROUP_IDS, BUILTIN_GROUPS, checkId, parseDirective, parseGroup, parseRule } from '../../policy/model.js';
import { DEFAULT_PLAN_NODES, MAX_PLAN_NODES, parsePlanRequest, planPolicy } from '../../policy/plan.js';
import { listView } from '../node-view.js';
import { paging, type Query } from '../params.js';
import { sharedFolderRoutes } from '../../policy/shared-folder.js';
import { MAX_FILTER_VALUES } from '../../store/nodes/filters/query.js';

/**
 * May this request fetch this node's policy? The node identity layer fills this with its check
 * (token, or certificate until identities exist); the default allows, as before identities.
 */
export type AuthorizeNode = (req: FastifyRequest, nodeId: string | undefined) => Promise<void>;

export interface PolicyRouteDeps {
  store: Store;
  generator: PolicyGenerator;
  key: PolicyKeyring;
  authorizeNode?: AuthorizeNode;
  /** `[policy] shared_folder`: served at /rudder/relay-api/1/shared-folder/ (empty: every file 404). */
  sharedFolder?: string;
  /** `[policy] max_plan_size`: the largest body of POST /api/1/policy/plan (default 16 MiB). */
  maxPlanBytes?: number;
}

const PLURAL: Record<PolicyKind, string> = { directive: 'directives', group: 'groups', rule: 'rules' };

const notFound = (kind: PolicyKind, id: string) => capstanError('ERR_NOT_FOUND', `${kind} ${id} does not exist`);

/** A rule may only name directives and groups that exist. */
async function checkRefs(store: Store, rule: { directives: string[]; groups: string[] }): Promise<void> {
  for (const [kind, ids] of [['directive', rule.directives], ['group', rule.groups]] as const) {
    const known = new Set((await store.listPolicyObjects(kind)).map((o) => o.id));
    if (kind === 'group') BUILTIN_GROUP_IDS.forEach((id) => known.add(id));
    const missing = ids.filter((i) => !known.has(i));
    if (missing.length) throw capstanError('ERR_BAD_REQUEST', `rule names unknown ${PLURAL[kind]}: ${missing.join(', ')}`, { details: { field: PLURAL[kind] } });
  }
}

/**
 * A static group may only name nodes the registry knows (as a job's static nodes): an unknown id
 * is a typo that would silently leave the node it meant out of the group's rules.
 */
async function checkGroupNodes(store: Store, group: { nodes?: string[] }): Promise<void> {
  const ids = group.nodes ?? [];
  const missing: string[] = [];
  for (let i = 0; i < ids.length; i += MAX_FILTER_VALUES) {
    const chunk = ids.slice(i, i + MAX_FILTER_VALUES);
    const known = new Set(await store.listNodeIds([{ key: 'id', values: chunk }]));
    missing.push(...chunk.filter((id) => !known.has(id)));
  }
  if (missing.length) {
    const shown = missing.slice(0, 10).join(', ') + (missing.length > 10 ? ` and ${missing.length - 10} more` : '');
    throw capstanError('ERR_BAD_REQUEST', `group names unknown nodes: ${shown}`, { details: { field: 'nodes' } });
  }
}

/** Rules naming a directive or group: such an object cannot be deleted from under them. */
async function referencedBy(store: Store, kind: 'directive' | 'group', id: string): Promise<string[]> {
  const field = kind === 'directive' ? 'directives' : 'groups';
  return (await store.listPolicyObjects('rule')).filter((r) => (r.body[field] as string[]).includes(id)).map((r) => r.id);
}

/**
 * Refused input names its field in the answer too: `{"error": {"code", "message", "field"}}`,
 * the field's path in the request body (`params.path`, `filter[0].key`, `directives`).
 */
async function namingField(reply: FastifyReply, fn: () => Promise<FastifyReply>): Promise<FastifyReply> {
  try {
    return await fn();
  } catch (err) {
    const field = isCapstanError(err) ? err.details?.field : undefined;
    if (!isCapstanError(err) || typeof field !== 'string') throw err;
    return reply.code(err.statusCode).send({ error: { code: err.code, message: err.message, field } });
  }
}

function parse(kind: PolicyKind, body: unknown, pathId?: string): Record<string, unknown> {
  const obj = kind === 'directive' ? parseDirective(body, pathId) : kind === 'group' ? parseGroup(body, pathId) : parseRule(body, pathId);
  return obj as unknown as Record<string, unknown>;
}

export function policyAdminRoutes(app: FastifyInstance, deps: PolicyRouteDeps): void {
  const { store, generator } = deps;

  // A new active policy key, endorsed by the previous one. Bundles are signed when served, so
  // the next fetch of every node carries the new signature and the endorsement chain.
  app.post('/api/1/keys/policy/rotate', async () => {
    const r = await deps.key.rotate();
    return { data: { key_id: r.key_id, previous_key_id: r.previous_key_id, endorsement: r.endorsement } };
  });
  // Policy as code: what making the server match these objects would change, and for which
  // nodes (server/src/policy/plan.ts). Read only; the client applies with PUT and DELETE.
  app.post<{ Querystring: { max_nodes?: string } }>('/api/1/policy/plan', async (req, reply) => namingField(reply, async () => {
    const max = req.query.max_nodes === undefined ? DEFAULT_PLAN_NODES : Number(req.query.max_nodes);
    if (!(max >= 1 && max <= MAX_PLAN_NODES)) throw capstanError('ERR_BAD_REQUEST', `max_nodes must be an integer from 1 to ${MAX_PLAN_NODES}`);
    const plan = parsePlanRequest(await readJson(req, deps.maxPlanBytes ?? 16 * 1024 * 1024));
    for (const [i, g] of plan.groups.entries()) {
      try {
        await checkGroupNodes(store, g);
      } catch (err) {
        if (isCapstanError(err)) throw capstanError('ERR_BAD_REQUEST', `groups[${i}]: ${err.message}`, { details: { field: `groups[${i}].nodes` } });
        throw err;
      }
    }
    return reply.send({ data: await planPolicy(store, generator, plan, max) });
  }));

  for (const kind of ['directive', 'group', 'rule'] as const) {
    const base = `/api/1/${PLURAL[kind]}`;
    const view = (o: { body: Record<string, unknown>; updated_at: string }) => ({ ...o.body, updated_at: o.updated_at });

    // The built-in groups are listed first, marked `builtin: true`.
    const builtins = kind === 'group' ? BUILTIN_GROUPS.map((g) => ({ ...g, builtin: true })) : [];

    app.get(base, async () => {
      const list = [...builtins, ...(await store.listPolicyObjects(kind)).map(view)];
      return { data: list, total: list.length };
    });

    app.get<{ Params: { id: string } }>(`${base}/:id`, async (req) => {
      const builtin = builtins.find((g) => g.id === req.params.id);
      if (builtin) return { data: builtin };
      const o = await store.getPolicyObject(kind, req.params.id);
      if (!o) throw notFound(kind, req.params.id);
      return { data: view(o) };
    });

    const save = async (body: Record<string, unknown>, mustExist: boolean | null) => {
      const id = body.id as string;
      // References are checked inside the generator's queue, so a concurrent delete cannot slip between.
      const { result, stats } = await generator.change(kind, id, async () => {
        if (kind === 'rule') await checkRefs(store, body as { directives: string[]; groups: string[] });
        if (kind === 'group') await checkGroupNodes(store, body as { nodes?: string[] });
        const exists = (await store.getPolicyObject(kind, id)) !== null;
        if (mustExist === false && exists) throw capstanError('ERR_CONFLICT', `${kind} ${id} already exists`);
        if (mustExist === true && !exists) throw notFound(kind, id);
        await store.putPolicyObject(kind, id, body, new Date().toISOString());
        return store.getPolicyObject(kind, id);
      });
      return { data: view(result!), regenerated: { nodes: stats.nodes, changed: stats.changed } };
    };

    app.post(base, async (req, reply) => namingField(reply, async () => reply.code(201).send(await save(parse(kind, await readJson(req)), false))));

    // PUT replaces the whole object, creating it when absent (201) — the path names the id.
    app.put<{ Params: { id: string } }>(`${base}/:id`, async (req, reply) => namingField(reply, async () => {
      checkId(req.params.id);
      const body = parse(kind, await readJson(req), req.params.id);
      const existed = (await store.getPolicyObject(kind, req.params.id)) !== null;
      const out = await save(body, null);
      return reply.code(existed ? 200 : 201).send(out);
    }));

    app.delete<{ Params: { id: string } }>(`${base}/:id`, async (req, reply) => {
      const id = req.params.id;
      if (kind === 'group' && BUILTIN_GROUP_IDS.has(id)) throw capstanError('ERR_CONFLICT', `${id} is a built-in group: it cannot be deleted`);
      const { result } = await generator.change(kind, id, async () => {
        if (kind !== 'rule') {
          const rules = await referencedBy(store, kind, id);
          if (rules.length) throw capstanError('ERR_CONFLICT', `${kind} ${id} is used by rules: ${rules.join(', ')}`);
        }
        return store.deletePolicyObject(kind, id);
      });
      if (!result) throw notFound(kind, id);
      return reply.code(204).send();
    });
  }
}


/** GET /api/1/groups/<id>/nodes and GET /api/1/nodes/<id>/policy: membership as the generator sees it. */
export function policyMembershipRoutes(app: FastifyInstance, deps: Pick<PolicyRouteDeps, 'store' | 'generator'>): void {
  const { store, generator } = deps;
  app.get<{ Params: { id: string }; Querystring: Query }>('/api/1/groups/:id/nodes', async (req) => {
    const { page, per_page } = paging(req.query, 100);
    const ids = await generator.groupMembers(req.params.id);
    if (ids === null) throw notFound('group', req.params.id);
    const slice = ids.slice((page - 1) * per_page, page * per_page);
    const nodes = slice.length === 0 ? [] : (await store.listNodes({ filters: [{ key: 'id', values: slice }], sort: 'id', page: 1, per_page: slice.length })).data;
    return { data: nodes.map(listView), total: ids.length, page, per_page };
  });
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/policy', async (req) => {
    const node = await store.getNode(req.params.id);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${req.params.id} is unknown`);
    const bundle = await store.getPolicyBundle(node.id);
    return { data: { node_id: node.id, accepted: node.accepted, config_id: bundle?.config_id ?? null, ...(await generator.explain(node.id)) } };
  });
}

export function policyNodeRoutes(app: FastifyInstance, deps: PolicyRouteDeps): void {
  const { store, generator, key } = deps;
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
    const nodeId = req.params.id;
    await authorize(req, nodeId);
    const node = await store.getNode(nodeId);
    // Unknown, pending and refused nodes get nothing, and cannot tell which they are.
    if (!node || node.accepted !== 'accepted') throw capstanError('ERR_NOT_FOUND', `no policy for node ${nodeId}`);
    let rec = await store.getPolicyBundle(nodeId);
    // Accepted outside this process (CLI, another server): generate it now rather than 404.
    if (!rec) {
      await generator.nodeChanged(nodeId);
      rec = await store.getPolicyBundle(nodeId);
    }
    if (!rec) throw capstanError('ERR_NOT_FOUND', `no policy for node ${nodeId}`);
    // The signing key is part of the ETag: after a rotation, caches must not keep answering 304
    // for a copy signed by the old key (an agent that pins only the new key would refuse it).
    const k = key.current();
    const etag = `"${rec.config_id}.${k.keyId.slice(0, 8)}"`;
    reply.header('etag', etag).header('cache-control', 'no-cache');
    if (etagMatches(req.headers['if-none-match'], etag)) return reply.code(304).send();
    const bundle = JSON.parse(rec.bundle) as PolicyBundle;
    return reply.type('application/json').send(JSON.stringify(signBundle(bundle, k.privateKeyPem, { includePublicKey: true, endorsements: k.endorsements })));
  });
}
