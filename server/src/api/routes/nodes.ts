/** Admin API: the node registry under /api/1/nodes. */
import type { FastifyInstance } from 'fastify';
import {
  capstanError, certificateFingerprint, certificateNodeId, decompress, parseRunInfo, parseRunLog, readJson,
} from '@capstan/shared';
import type { Acceptance, NodeRecord, NodeStatus, Store } from '../../store/store.js';

const ACCEPTANCE = new Set(['pending', 'accepted', 'refused']);
const STATUS = new Set(['unknown', 'reachable', 'unreachable']);
const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

function intParam(v: unknown, name: string, dflt: number, max: number): number {
  if (v === undefined) return dflt;
  if (typeof v !== 'string' || !/^\d{1,9}$/.test(v) || Number(v) < 1 || Number(v) > max) {
    throw capstanError('ERR_BAD_REQUEST', `${name} must be an integer from 1 to ${max}`);
  }
  return Number(v);
}

function one(v: unknown, name: string, allowed: Set<string>): string | undefined {
  if (v === undefined) return undefined;
  if (typeof v !== 'string' || !allowed.has(v)) throw capstanError('ERR_BAD_REQUEST', `${name} must be one of ${[...allowed].join(', ')}`);
  return v;
}

async function mustGet(store: Store, id: string): Promise<NodeRecord> {
  const node = await store.getNode(id);
  if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${id} is unknown`);
  return node;
}

/** Nodes as the API shows them: the pinned certificate only on the single-node view. */
function listView(n: NodeRecord): Omit<NodeRecord, 'certificate'> {
  const { certificate: _omit, ...rest } = n;
  return rest;
}

export function nodeRoutes(app: FastifyInstance, store: Store): void {
  app.get<{ Querystring: Record<string, string> }>('/api/1/nodes', async (req) => {
    const q = req.query;
    const page = intParam(q.page, 'page', 1, 1_000_000);
    const perPage = intParam(q.per_page, 'per_page', 100, 1000);
    const res = await store.listNodes({
      accepted: one(q.accepted, 'accepted', ACCEPTANCE) as Acceptance | undefined,
      status: one(q.status, 'status', STATUS) as NodeStatus | undefined,
      hostname: q.hostname,
      page,
      per_page: perPage,
    });
    return { data: res.data.map(listView), total: res.total, page, per_page: perPage };
  });

  app.get<{ Querystring: Record<string, string> }>('/api/1/nodes/pending', async (req) => {
    const page = intParam(req.query.page, 'page', 1, 1_000_000);
    const perPage = intParam(req.query.per_page, 'per_page', 100, 1000);
    const res = await store.listNodes({ accepted: 'pending', page, per_page: perPage });
    return { data: res.data.map(listView), total: res.total, page, per_page: perPage };
  });

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id', async (req) => ({ data: await mustGet(store, req.params.id) }));

  for (const [verb, acceptance] of [['accept', 'accepted'], ['refuse', 'refused']] as const) {
    app.post<{ Params: { id: string } }>(`/api/1/nodes/:id/${verb}`, async (req) => {
      const node = await mustGet(store, req.params.id);
      if (acceptance === 'accepted' && !node.certificate) {
        throw capstanError('ERR_CERTIFICATE', `node ${node.id} has sent no certificate yet`);
      }
      const updated = await store.setAcceptance(node.id, acceptance, new Date().toISOString());
      return { data: listView(updated!) };
    });
  }

  app.post('/api/1/nodes', async (req, reply) => {
    const body = (await readJson(req)) as Record<string, unknown> | undefined;
    if (!body || typeof body !== 'object') throw capstanError('ERR_BAD_REQUEST', 'body must be a JSON object');
    const id = body.id;
    if (typeof id !== 'string' || !NODE_ID.test(id)) throw capstanError('ERR_BAD_REQUEST', 'id must be a node id ([A-Za-z0-9._-], up to 128)');
    const hostname = body.hostname ?? body.host;
    if (typeof hostname !== 'string' || hostname.length === 0 || hostname.length > 253) {
      throw capstanError('ERR_BAD_REQUEST', 'hostname must be a non-empty string');
    }
    let certificate: string | null = null;
    if (body.certificate !== undefined) {
      if (typeof body.certificate !== 'string') throw capstanError('ERR_BAD_REQUEST', 'certificate must be a PEM string');
      if (certificateNodeId(body.certificate) !== id) throw capstanError('ERR_CERTIFICATE', 'certificate subject UID does not match id');
      certificate = body.certificate;
    }
    const node = await store.createNode({
      id,
      hostname,
      certificate,
      certificate_fingerprint: certificate ? certificateFingerprint(certificate) : null,
    });
    return reply.code(201).send({ data: listView(node) });
  });

  app.patch<{ Params: { id: string } }>('/api/1/nodes/:id', async (req) => {
    const node = await mustGet(store, req.params.id);
    const body = (await readJson(req)) as Record<string, unknown> | undefined;
    const state = body?.state;
    if (typeof state !== 'string' || !/^[a-z][a-z_-]{0,31}$/.test(state)) throw capstanError('ERR_BAD_REQUEST', 'state must be a lowercase word');
    if (node.state === 'terminated' && state !== 'terminated') throw capstanError('ERR_CONFLICT', 'terminated is final');
    return { data: listView((await store.setState(node.id, state, new Date().toISOString()))!) };
  });

  app.delete<{ Params: { id: string } }>('/api/1/nodes/:id', async (req, reply) => {
    if (!(await store.deleteNode(req.params.id))) throw capstanError('ERR_NODE_UNKNOWN', `node ${req.params.id} is unknown`);
    return reply.code(204).send();
  });

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/inventory', async (req) => {
    await mustGet(store, req.params.id);
    const inv = await store.getInventory(req.params.id);
    if (!inv) throw capstanError('ERR_NOT_FOUND', `node ${req.params.id} has sent no inventory`);
    return { data: inv };
  });

  app.get<{ Params: { id: string }; Querystring: Record<string, string> }>('/api/1/nodes/:id/runs', async (req) => {
    await mustGet(store, req.params.id);
    const page = intParam(req.query.page, 'page', 1, 1_000_000);
    const perPage = intParam(req.query.per_page, 'per_page', 20, 200);
    const withReports = req.query.reports === 'true' || req.query.reports === '1';
    const res = await store.listRuns(req.params.id, page, perPage);
    const data = await Promise.all(
      res.data.map(async (run) => {
        if (!withReports) return run;
        // Report-level reads re-parse the stored, verified run log (DESIGN.md Storage).
        const compressed = await store.getRunLog(run.id);
        const text = compressed ? await decompress(compressed, 'zstd', { maxBytes: 512 * 1024 * 1024 }) : Buffer.alloc(0);
        const info = parseRunInfo(run.file_name);
        return { ...run, reports: parseRunLog(text, { node_id: run.node_id, timestamp: info.timestamp }, { maxReports: Number.MAX_SAFE_INTEGER }).reports };
      }),
    );
    return { data, total: res.total, page, per_page: perPage };
  });

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/compliance', async (req) => {
    const node = await mustGet(store, req.params.id);
    const last = (await store.listRuns(node.id, 1, 1)).data[0];
    if (!last) return { data: { node_id: node.id, run: null, compliance: null, components: [] } };
    const ok = last.outcomes.filter((o) => ['result_success', 'result_repaired', 'audit_compliant', 'result_na', 'audit_na'].includes(o.outcome)).length;
    const total = last.outcomes.length;
    return {
      data: {
        node_id: node.id,
        run: { started_at: last.started_at, config_id: last.config_id },
        compliance: total === 0 ? null : Math.round((ok / total) * 10000) / 100,
        components: last.outcomes,
      },
    };
  });
}
