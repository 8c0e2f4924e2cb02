/**
 * The few admin-API calls the simulator and the benchmarks make (DESIGN.md admin API): list nodes
 * page by page, accept a pending node, register an accepted node with its certificate.
 */
import type { SimIdentity } from './identities.js';

export interface AdminTarget {
  url: string;
  token: string;
  timeoutMs?: number;
}

export interface ListedNode {
  id: string;
  accepted: 'pending' | 'accepted' | 'refused';
  last_run_at: string | null;
}

/** Pages the API serves at most (GET /api/1/nodes per_page ≤ 1000). */
const PER_PAGE = 1000;
/** Bound on pages walked for one listing: 10 million nodes. */
const MAX_PAGES = 10_000;

export class AdminError extends Error {
  constructor(message: string, readonly status: number, readonly code: string) {
    super(message);
  }
}

export async function adminCall(t: AdminTarget, method: string, path: string, body?: unknown): Promise<{ status: number; json: unknown }> {
  const res = await fetch(`${t.url.replace(/\/+$/, '')}${path}`, {
    method,
    headers: { authorization: `Bearer ${t.token}`, ...(body !== undefined ? { 'content-type': 'application/json' } : {}) },
    body: body === undefined ? undefined : JSON.stringify(body),
    signal: AbortSignal.timeout(t.timeoutMs ?? 30_000),
  });
  const text = await res.text();
  let json: unknown = null;
  try {
    json = text ? JSON.parse(text) : null;
  } catch {
    throw new AdminError(`${method} ${path}: answer is not JSON (${res.status})`, res.status, 'ERR_BAD_ANSWER');
  }
  return { status: res.status, json };
}

function failure(what: string, r: { status: number; json: unknown }): AdminError {
  const e = (r.json as { error?: { code?: string; message?: string } } | null)?.error;
  return new AdminError(`${what}: ${r.status} ${e?.code ?? ''} ${e?.message ?? ''}`.trim(), r.status, e?.code ?? `HTTP_${r.status}`);
}

/**
 * Every node matching `query` (e.g. `accepted=pending`), walking the pages in id order: a node's
 * id never changes, so a page boundary cannot move under a node the way a name or status could
 * while the fleet is writing.
 */
export async function listNodes(t: AdminTarget, query = ''): Promise<ListedNode[]> {
  const out: ListedNode[] = [];
  const seen = new Set<string>();
  for (let page = 1; page <= MAX_PAGES; page++) {
    const r = await adminCall(t, 'GET', `/api/1/nodes?sort=id&per_page=${PER_PAGE}&page=${page}${query ? `&${query}` : ''}`);
    if (r.status !== 200) throw failure('list nodes', r);
    const body = r.json as { data: ListedNode[]; total: number };
    // A node inserted before the page boundary meanwhile shifts the next page by one: counted
    // twice, the listing would stop before its last page.
    for (const n of body.data) {
      if (seen.has(n.id)) continue;
      seen.add(n.id);
      out.push({ id: n.id, accepted: n.accepted, last_run_at: n.last_run_at });
    }
    if (body.data.length < PER_PAGE || out.length >= body.total) return out;
  }
  throw new AdminError(`list nodes: more than ${MAX_PAGES} pages`, 0, 'ERR_LIMIT');
}

/** Ids one request names at most (the node list's filter values, MAX_FILTER_VALUES). */
const IDS_PER_REQUEST = 100;

/**
 * The nodes of `ids` the server holds, asked 100 ids a request (each found by key), `parallel`
 * requests at a time: the simulator's own fleet without an offset page or a count of the whole
 * registry, which at 300,000 nodes made each fleet-wide listing a load of its own on the server.
 */
export async function listNodesByIds(t: AdminTarget, ids: readonly string[], parallel = 4): Promise<ListedNode[]> {
  const chunks: string[][] = [];
  for (let i = 0; i < ids.length; i += IDS_PER_REQUEST) chunks.push(ids.slice(i, i + IDS_PER_REQUEST));
  const out: ListedNode[] = [];
  await eachLimited(chunks, parallel, async (chunk) => {
    const r = await adminCall(t, 'GET', `/api/1/nodes?per_page=${IDS_PER_REQUEST}&${chunk.map((id) => `id=${encodeURIComponent(id)}`).join('&')}`);
    if (r.status !== 200) throw failure('list nodes by id', r);
    for (const n of (r.json as { data: ListedNode[] }).data) out.push({ id: n.id, accepted: n.accepted, last_run_at: n.last_run_at });
  });
  return out;
}

/** How many nodes a listing query matches (its total), asking for one. */
export async function countNodes(t: AdminTarget, query = ''): Promise<number> {
  const r = await adminCall(t, 'GET', `/api/1/nodes?per_page=1&page=1${query ? `&${query}` : ''}`);
  if (r.status !== 200) throw failure('count nodes', r);
  return (r.json as { total: number }).total;
}

/** One node by id, or null when the server has none. */
export async function getNode(t: AdminTarget, id: string): Promise<Record<string, unknown> | null> {
  const r = await adminCall(t, 'GET', `/api/1/nodes/${encodeURIComponent(id)}`);
  if (r.status === 404) return null;
  if (r.status !== 200) throw failure(`get ${id}`, r);
  return (r.json as { data: Record<string, unknown> }).data;
}

export async function acceptNode(t: AdminTarget, id: string): Promise<void> {
  const r = await adminCall(t, 'POST', `/api/1/nodes/${encodeURIComponent(id)}/accept`);
  if (r.status !== 200) throw failure(`accept ${id}`, r);
}

/** POST /api/1/nodes with the certificate: an accepted node, pinned. An existing node is fine. */
export async function registerNode(t: AdminTarget, id: SimIdentity): Promise<'created' | 'exists'> {
  const r = await adminCall(t, 'POST', '/api/1/nodes', { id: id.nodeId, hostname: id.hostname, certificate: id.certPem });
  if (r.status === 201) return 'created';
  const code = (r.json as { error?: { code?: string } } | null)?.error?.code;
  if (r.status === 409 || code === 'ERR_NODE_EXISTS') return 'exists';
  throw failure(`register ${id.nodeId}`, r);
}

/** Run `fn` over `items` with at most `limit` at a time; resolves when all are done. */
export async function eachLimited<T>(items: readonly T[], limit: number, fn: (item: T, i: number) => Promise<void>): Promise<void> {
  let next = 0;
  await Promise.all(
    Array.from({ length: Math.max(1, Math.min(limit, items.length)) }, async () => {
      while (next < items.length) {
        const i = next++;
        await fn(items[i]!, i);
      }
    }),
  );
}
