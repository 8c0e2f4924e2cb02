/**
 * Admin API: compliance per node, globally (over any node filter), per rule, directive and policy
 * group, and exported node by node. Numbers are the shared computation's (the agent prints the
 * same for the same run), judged against each node's current policy, with `applying` and
 * `no_answer` decided at the moment of the request (registry/compliance.ts). Relays and nodes
 * without an agent are summed apart. Every answer carries the counts per state, their
 * percentages and the compliance percentage; lists are also CSV (`?format=csv`, `Accept: text/csv`).
 */
import type { FastifyInstance, FastifyReply } from 'fastify';
import { MAX_AGE_LIMIT_S, type AggregateCache } from '../../console/cache.js';
import { COMPLIANCE_STATES, percentages, zeroCounts, type ComplianceCounts, type ComplianceState } from '@capstan/shared/compliance/compute';
import { capstanError } from '@capstan/shared/errors';
import { complianceClock, complianceView, withPercent, type ComplianceSettings } from '../../registry/compliance.js';
import { loadModel } from '../../policy/content.js';
import type { NodeComplianceRow, Reads } from '../../reads.js';
import { exportFormat, sendRows } from '../export.js';
import { filtersFrom, intParam, paging, single, type Query } from '../params.js';
import { mustGet } from './nodes.js';

export interface ComplianceRouteDeps {
  store: Reads;
  settings: ComplianceSettings;
  now?: () => Date;
  /** Recent copies of the fleet-wide aggregates, for requests that allow one (`max_age`). */
  cache?: AggregateCache;
}

/**
 * `max_age=<seconds>`: the caller takes a copy up to that old (console/cache.ts); the answer's
 * `X-Capstan-As-Of` header says when it was computed. Absent: computed now.
 */
export async function maybeCached<T>(deps: { cache?: AggregateCache }, q: Query, reply: FastifyReply, key: string, compute: () => Promise<T>): Promise<T> {
  if (q.max_age === undefined || !deps.cache) return compute();
  const maxAge = intParam(q, 'max_age', 60, MAX_AGE_LIMIT_S);
  const got = await deps.cache.get(key, maxAge * 1000, compute);
  reply.header('x-capstan-as-of', got.as_of);
  return got.value;
}

/** Nodes read per page of a streamed export. */
export const EXPORT_PAGE = 1000;

/** The columns every compliance CSV ends with: the percentage, the item total, then each state. */
const countColumns = <T>(counts: (r: T) => ComplianceCounts) => [
  ['compliance', (r: T) => percentages(counts(r)).compliance] as const,
  ['items', (r: T) => percentages(counts(r)).total] as const,
  ...COMPLIANCE_STATES.map((s) => [s, (r: T) => counts(r)[s]] as const),
];

export function complianceRoutes(app: FastifyInstance, deps: ComplianceRouteDeps): void {
  const { store } = deps;
  const clock = () => complianceClock(deps.settings, (deps.now ?? (() => new Date()))());

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/compliance', async (req) => {
    const node = await mustGet(store, req.params.id);
    const base = await store.getComplianceBase(node.id);
    if (!base) throw capstanError('ERR_NODE_UNKNOWN', `node ${node.id} is unknown`);
    return { data: complianceView(base, clock()) };
  });

  app.get<{ Querystring: Query }>('/api/1/compliance', async (req, reply) => {
    const filters = filtersFrom(req.query, ['max_age']);
    const agg = await maybeCached(deps, req.query, reply, `global:${JSON.stringify(filters)}`, () => store.complianceSummary(filters, clock()));
    return {
      data: {
        nodes: agg.nodes, nodes_with_data: agg.nodes_with_data, ...withPercent(agg.counts),
        relays: { nodes: agg.relays.nodes, ...withPercent(agg.relays.counts) },
        agentless: { nodes: agg.agentless.nodes, ...withPercent(agg.agentless.counts) },
      },
    };
  });

  for (const by of ['rule', 'directive'] as const) {
    app.get<{ Querystring: Query }>(`/api/1/compliance/${by}s`, async (req, reply) => {
      const format = exportFormat(req);
      const rows = await maybeCached(deps, req.query, reply, `by-${by}`, () => store.complianceByRule(by, clock()));
      const keys = by === 'rule' ? [['rule_id', (r: typeof rows[number]) => r.rule_id] as const]
        : [['rule_id', (r: typeof rows[number]) => r.rule_id] as const, ['directive_id', (r: typeof rows[number]) => r.directive_id] as const];
      return sendRows(reply, format, `compliance-${by}s`, [...keys, ['nodes', (r) => r.nodes], ...countColumns<typeof rows[number]>((r) => r.counts)],
        async function* () { yield rows; }, (r) => ({ ...r, ...withPercent(r.counts) }));
    });
  }

  // A rule's nodes (or one directive's), each with its counts for that rule alone, worst first:
  // the drill-down from a rule to the nodes that fail it. Always computed at the moment asked.
  app.get<{ Params: { id: string }; Querystring: Query }>('/api/1/compliance/rules/:id/nodes', async (req) => {
    const { page, per_page } = paging(req.query, 50);
    const directive = single(req.query, 'directive');
    const state = single(req.query, 'state');
    if (state !== undefined && !(COMPLIANCE_STATES as readonly string[]).includes(state)) {
      throw capstanError('ERR_BAD_REQUEST', `state must be one of ${COMPLIANCE_STATES.join(', ')}`);
    }
    const order = single(req.query, 'order');
    if (order !== undefined && order !== 'asc' && order !== 'desc') throw capstanError('ERR_BAD_REQUEST', 'order must be asc or desc');
    const res = await store.targetNodes({
      rule_id: req.params.id, ...(directive !== undefined && { directive_id: directive }), ...(state !== undefined && { state: state as ComplianceState }),
      ...(order !== undefined && { order }), page, per_page,
    }, clock());
    return { data: res.data.map((r) => ({ ...r, ...withPercent(r.counts) })), total: res.total, page, per_page };
  });

  // Policy groups: every accepted member at its policy's last generation, in whatever state
  // (RUDDER's group compliance), from the kept group counters (store/compliance/kept.ts).
  app.get<{ Querystring: Query }>('/api/1/compliance/groups', async (req, reply) => {
    const format = exportFormat(req);
    const rows = await maybeCached(deps, req.query, reply, 'by-group', async () => {
      const [model, kept] = await Promise.all([loadModel(store), store.complianceByGroup(clock())]);
      const byId = new Map(kept.map((r) => [r.group_id, r]));
      return [...model.groups.values()].sort((a, b) => (a.id < b.id ? -1 : 1)).map((g) => {
        const r = byId.get(g.id);
        return { group_id: g.id, name: g.name, nodes: r?.nodes ?? 0, counts: r?.counts ?? zeroCounts(), relays: r?.relays ?? 0, agentless: r?.agentless ?? 0 };
      });
    });
    return sendRows(reply, format, 'compliance-groups',
      [['group_id', (r) => r.group_id], ['name', (r) => r.name], ['nodes', (r) => r.nodes], ['relays', (r) => r.relays],
        ['agentless', (r) => r.agentless], ...countColumns<typeof rows[number]>((r) => r.counts)],
      async function* () { yield rows; }, (r) => ({ ...r, ...withPercent(r.counts) }));
  });

  // Every accepted node (filters as GET /api/1/nodes), streamed in node id order.
  app.get<{ Querystring: Query }>('/api/1/compliance/nodes', async (req, reply) => {
    const format = exportFormat(req);
    const filters = filtersFrom(req.query, ['format']);
    const at = clock();
    async function* pages(): AsyncGenerator<NodeComplianceRow[]> {
      let after: string | null = null;
      for (;;) {
        const page = await store.complianceNodes(after, EXPORT_PAGE, at, filters);
        if (page.length === 0) return;
        yield page;
        if (page.length < EXPORT_PAGE) return;
        after = page[page.length - 1]!.node_id;
      }
    }
    return sendRows<NodeComplianceRow>(reply, format, 'compliance-nodes',
      [['node_id', (r) => r.node_id], ['hostname', (r) => r.hostname], ['class', (r) => r.class], ['status', (r) => r.status],
        ['state', (r) => r.state], ['last_run_at', (r) => r.last_run_at], ['policy_config_id', (r) => r.policy_config_id],
        ...countColumns<NodeComplianceRow>((r) => r.counts)],
      pages, (r) => ({ ...r, ...withPercent(r.counts) }));
  });
}
