/** Admin API: the node registry under /api/1/nodes. */
import { randomUUID } from 'node:crypto';
import type { FastifyInstance } from 'fastify';
import { decompress } from '@capstan/shared/envelope/codec';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import { parseRunInfo } from '@capstan/shared/runlog/name';
import { parseRunLog } from '@capstan/shared/runlog/parse';
import { certificateFingerprint, certificateNodeId } from '@capstan/shared/smime/identity';
import { readJson } from '@capstan/toolkit/http/app';
import type { ComplianceClock, NodeCreate, NodePatch, NodeRecord, Reads } from '../../reads.js';
import { NODE_STATES } from '../../registry/rules.js';
import { checkProperties } from '../../registry/open.js';
import type { NodeRegistry } from '../../registry/nodes.js';
import { shownLevel, type LevelView } from '../../registry/node-properties.js';
import { namingField } from './policies.js';
import { actorOf } from '../actor.js';
import { normaliseInventory } from '../../ingest/inventory-fields.js';
import { listView } from '../node-view.js';
import { bodyObject, boolParam, nodeListQuery, paging, single, timeParam, type Query } from '../params.js';

const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
// A DNS name, an IPv4 address or an IPv6 address (no spaces, no URL parts).
const HOST = /^[A-Za-z0-9][A-Za-z0-9.:_-]{0,252}$/;
/** Largest decompressed run log re-read for `reports=true` (the ingest limit bounds what is stored). */
const MAX_REREAD_BYTES = 512 * 1024 * 1024;

export async function mustGet(store: Reads, id: string): Promise<NodeRecord> {
  const node = await store.getNode(id);
  if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${id} is unknown`);
  return node;
}

/** POST /api/1/nodes/<id>/accept: `{fingerprint?}`, the certificate to pin (required when the node sent two). */
function acceptBody(raw: unknown): string | undefined {
  if (raw === undefined) return undefined;
  const body = bodyObject(raw, ['fingerprint']);
  const fp = optionalString(body, 'fingerprint');
  if (fp !== undefined && !/^[0-9A-Fa-f:\s]{64,95}$/.test(fp)) throw capstanError('ERR_BAD_REQUEST', 'fingerprint must be a sha256 fingerprint (64 hex digits)', { details: { field: 'fingerprint' } });
  return fp;
}

function optionalString(body: Record<string, unknown>, name: string): string | undefined {
  const v = body[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'string') throw capstanError('ERR_BAD_REQUEST', `${name} must be a string`);
  return v;
}

function optionalBoolean(body: Record<string, unknown>, name: string): boolean | undefined {
  const v = body[name];
  if (v === undefined) return undefined;
  if (typeof v !== 'boolean') throw capstanError('ERR_BAD_REQUEST', `${name} must be true or false`);
  return v;
}

/**
 * POST /api/1/nodes: `{host, name?, tags?, groups?, id?}` (by address) or `{id, hostname,
 * certificate?}`; `relay: true` (with the certificate) registers a relay; `policy_server` names
 * the relay it is under (a sub-relay's upstream relay; default: the server).
 */
function createBody(raw: unknown): NodeCreate {
  const body = bodyObject(raw, ['id', 'hostname', 'host', 'name', 'certificate', 'tags', 'groups', 'region', 'relay', 'policy_server']);
  const host = optionalString(body, 'host');
  if (host !== undefined && !HOST.test(host)) throw capstanError('ERR_BAD_REQUEST', 'host must be a DNS name or an IP address');
  // The first API's hostname is a label as an agent reports it, checked as loosely as before.
  const hostname = optionalString(body, 'hostname') ?? host;
  if (hostname === undefined || hostname.length === 0 || hostname.length > 253) {
    throw capstanError('ERR_BAD_REQUEST', 'host (or hostname) is required, up to 253 characters');
  }
  const id = optionalString(body, 'id') ?? (host !== undefined ? randomUUID() : undefined);
  if (id === undefined || !NODE_ID.test(id)) throw capstanError('ERR_BAD_REQUEST', 'id must be a node id ([A-Za-z0-9._-], up to 128)');
  const certificate = optionalString(body, 'certificate');
  if (certificate !== undefined && certificateNodeId(certificate) !== id) {
    throw capstanError('ERR_CERTIFICATE', 'certificate subject UID does not match id');
  }
  const name = optionalString(body, 'name');
  const region = optionalString(body, 'region');
  const relay = optionalBoolean(body, 'relay');
  if (relay && certificate === undefined) {
    throw capstanError('ERR_CERTIFICATE', 'a relay needs its certificate (its UID=<node id> certificate: capstan-relayd --identity prints it)');
  }
  return {
    id,
    hostname,
    ...(host !== undefined && { address: host }),
    ...(name !== undefined && { name }),
    ...(region !== undefined && { region }),
    ...(body.tags !== undefined && { tags: body.tags as Record<string, string> }),
    ...(body.groups !== undefined && { groups: body.groups as string[] }),
    certificate: certificate ?? null,
    certificate_fingerprint: certificate ? certificateFingerprint(certificate) : null,
    ...(relay !== undefined && { relay }),
    ...(body.policy_server !== undefined && { policy_server: policyServer(body.policy_server) }),
  };
}

/** The relay (node id) a node talks to; null: directly under the server. */
function policyServer(v: unknown): string | null {
  if (v === null) return null;
  if (typeof v !== 'string' || !NODE_ID.test(v)) throw capstanError('ERR_BAD_REQUEST', 'policy_server must be the node id of a relay or of the server, or null');
  return v;
}

/** PATCH /api/1/nodes/<id>: `{state?, name?, address?, region?, tags?, groups?, relay?, policy_server?}`. */
function patchBody(raw: unknown): NodePatch {
  const body = bodyObject(raw, ['state', 'name', 'address', 'region', 'tags', 'groups', 'relay', 'policy_server']);
  if (Object.keys(body).length === 0) throw capstanError('ERR_BAD_REQUEST', 'nothing to change');
  const state = optionalString(body, 'state');
  if (state !== undefined && !NODE_STATES.includes(state)) {
    throw capstanError('ERR_BAD_REQUEST', `state must be one of ${NODE_STATES.join(', ')}`, { details: { field: 'state' } });
  }
  const patch: NodePatch = {};
  if (state !== undefined) patch.state = state;
  const name = optionalString(body, 'name');
  if (name !== undefined) patch.name = name;
  for (const f of ['address', 'region'] as const) {
    if (body[f] === null) patch[f] = null;
    else if (body[f] !== undefined) patch[f] = optionalString(body, f)!;
  }
  if (body.tags !== undefined) patch.tags = body.tags as Record<string, string>;
  if (body.groups !== undefined) patch.groups = body.groups as string[];
  const relay = optionalBoolean(body, 'relay');
  if (relay !== undefined) patch.relay = relay;
  if (body.policy_server !== undefined) patch.policy_server = policyServer(body.policy_server);
  return patch;
}

/**
 * `clock`: the moment compliance is judged at, for `sort=compliance` (registry/compliance.ts);
 * absent, the stored counts are compared as they are.
 */
export function nodeRoutes(app: FastifyInstance, store: Reads, nodes: NodeRegistry, log: Logger, clock?: () => ComplianceClock): void {
  app.get<{ Querystring: Query }>('/api/1/nodes', async (req) => {
    const q = nodeListQuery(req.query);
    if (q.sort === 'compliance' && clock) {
      const c = clock();
      q.compliance_at = { silent_before: c.now_s - c.silence_s, applying_after: c.now_s - c.applying_s };
    }
    const res = await store.listNodes(q);
    return { data: res.data.map(listView), total: res.total, totals: res.totals, page: q.page, per_page: q.per_page };
  });

  app.get<{ Querystring: Query }>('/api/1/nodes/pending', async (req) => {
    const q = nodeListQuery(req.query);
    const res = await store.listNodes({ ...q, filters: [...(q.filters ?? []), { key: 'accepted', values: ['pending'] }] });
    return { data: res.data.map(listView), total: res.total, totals: res.totals, page: q.page, per_page: q.per_page };
  });

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id', async (req) => ({ data: await mustGet(store, req.params.id) }));

  // Changes go through the registry (registry/nodes.ts), which carries out their effects.
  app.post<{ Params: { id: string } }>('/api/1/nodes/:id/accept', async (req) => {
    const fingerprint = acceptBody(await readJson(req));
    return { data: listView(await nodes.accept(req.params.id, actorOf(req), { ...(fingerprint !== undefined && { fingerprint }) })) };
  });

  app.post<{ Params: { id: string } }>('/api/1/nodes/:id/refuse', async (req) => {
    return { data: listView(await nodes.refuse(req.params.id, actorOf(req))) };
  });

  app.post('/api/1/nodes', async (req, reply) => {
    const node = await nodes.create(createBody(await readJson(req)), actorOf(req));
    return reply.code(201).send({ data: listView(node) });
  });

  app.patch<{ Params: { id: string } }>('/api/1/nodes/:id', async (req) => {
    const patch = patchBody(await readJson(req));
    return { data: listView(await nodes.patch(req.params.id, patch, actorOf(req))) };
  });

  app.delete<{ Params: { id: string } }>('/api/1/nodes/:id', async (req, reply) => {
    await nodes.remove(req.params.id, actorOf(req));
    return reply.code(204).send();
  });

  // Package versions across the fleet, with how many nodes have each.
  app.get<{ Querystring: Query }>('/api/1/software', async (req) => {
    const name = single(req.query, 'name') ?? '*';
    const { page, per_page } = paging(req.query, 100);
    const res = await store.listSoftware(name, page, per_page);
    return { data: res.data, total: res.total, page, per_page };
  });

  // Admin-set properties (`property:<key>` in filters): GET reads the plain ones, with the names
  // of the secret ones beside (never their values); PUT replaces the plain ones (the secrets stay,
  // but those it names).
  const plainAnswer = (view: LevelView) => ({
    data: Object.fromEntries(Object.entries(view).filter(([, p]) => p.secret !== true).map(([k, p]) => [k, p.value!])),
    secrets: Object.keys(view).filter((k) => view[k]!.secret === true),
  });
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/properties', async (req) => plainAnswer(await nodes.ownProperties(req.params.id)));
  app.put<{ Params: { id: string } }>('/api/1/nodes/:id/properties', async (req) => {
    await nodes.setProperties(req.params.id, checkProperties(await readJson(req)), actorOf(req));
    return plainAnswer(await nodes.ownProperties(req.params.id));
  });
  // The same, plain and secret, in the form of the other levels (registry/node-properties.ts):
  // `{"properties": {"<name>": {"value", "secret"?}}}`, a secret shown (and kept) as {"secret": true}.
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/properties/own', async (req) => ({ data: { id: req.params.id, properties: await nodes.ownProperties(req.params.id) } }));
  app.put<{ Params: { id: string } }>('/api/1/nodes/:id/properties/own', async (req, reply) => namingField(reply, async () => {
    const body = bodyObject(await readJson(req), ['id', 'properties']);
    if (body.id !== undefined && body.id !== req.params.id) throw capstanError('ERR_BAD_REQUEST', 'id in the body differs from the one in the path', { details: { field: 'id' } });
    const properties = await nodes.setOwnProperties(req.params.id, body.properties ?? {}, actorOf(req));
    return reply.send({ data: { id: req.params.id, properties } });
  }));
  // Every node with properties of its own, in id order (`capstan policy export`): secrets as {"secret": true}.
  app.get<{ Querystring: Query }>('/api/1/node-properties', async (req) => {
    const { page, per_page } = paging(req.query, 100);
    const res = await store.listNodeProperties(page, per_page);
    const data = res.data.map((r) => ({ id: r.node_id, properties: shownLevel(r.properties, r.secrets) }));
    return { data, total: res.total, page, per_page };
  });

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/inventory', async (req) => {
    await mustGet(store, req.params.id);
    const inv = await store.getInventory(req.params.id);
    if (!inv) throw capstanError('ERR_NOT_FOUND', `node ${req.params.id} has sent no inventory`);
    // Stored before its fields were checked at ingest: checked again here, whatever it holds.
    const doc = inv.inventory;
    return { data: doc && typeof doc === 'object' && !Array.isArray(doc) ? { ...inv, inventory: normaliseInventory(doc as Record<string, unknown>).doc } : { ...inv, inventory: {} } };
  });

  // What changed between the node's inventories: packages, addresses, kernel (newest first).
  app.get<{ Params: { id: string }; Querystring: Query }>('/api/1/nodes/:id/inventory/history', async (req) => {
    await mustGet(store, req.params.id);
    const { page, per_page } = paging(req.query, 100);
    const res = await store.inventoryHistory(req.params.id, page, per_page);
    return { data: res.data, total: res.total, page, per_page };
  });

  app.get<{ Params: { id: string }; Querystring: Query }>('/api/1/nodes/:id/history', async (req) => {
    await mustGet(store, req.params.id);
    const { page, per_page } = paging(req.query, 100);
    const res = await store.getHistory(req.params.id, page, per_page);
    return { data: res.data, total: res.total, page, per_page };
  });

  app.get<{ Params: { id: string }; Querystring: Query }>('/api/1/nodes/:id/runs', async (req) => {
    await mustGet(store, req.params.id);
    const { page, per_page } = paging(req.query, 20);
    const withReports = boolParam(req.query, 'reports') === true;
    const from = timeParam(req.query, 'from');
    const to = timeParam(req.query, 'to');
    const res = await store.listRuns(req.params.id, page, per_page, { ...(from && { from }), ...(to && { to }) });
    const data = await Promise.all(
      res.data.map(async (run) => {
        if (!withReports) return run;
        // Report-level reads re-parse the stored, verified run log (DESIGN.md Storage).
        let text: Buffer;
        try {
          text = (await store.getRunLogText(run.id, MAX_REREAD_BYTES)) ?? Buffer.alloc(0);
        } catch (err) {
          // One damaged stored log must not refuse the page: that run is listed without its reports.
          if (!isCapstanError(err) || err.code !== 'ERR_RUN_UNREADABLE') throw err;
          log.warn({ node: run.node_id, run: run.id, reason: err.message }, "a run's stored log cannot be read: listed without its reports");
          return { ...run, reports: [], reports_unreadable: err.message };
        }
        const info = parseRunInfo(run.file_name);
        return { ...run, reports: parseRunLog(text, { node_id: run.node_id, timestamp: info.timestamp }, { maxReports: Number.MAX_SAFE_INTEGER }).reports };
      }),
    );
    return { data, total: res.total, page, per_page };
  });
}
