/**
 * Admin API: compliance per node, globally (over any node filter), per rule and per directive.
 * Numbers are expected-vs-received (registry/compliance.ts); every answer carries the counts per
 * category, their percentages and the compliance percentage.
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared';
import { computeCompliance, groupItems, percentages } from '../../registry/compliance.js';
import type { ComplianceBase, ComplianceCounts, Store } from '../../store/store.js';
import { filtersFrom, type Query } from '../params.js';
import { mustGet } from './nodes.js';

export const withPercent = (counts: ComplianceCounts) => ({ counts, ...percentages(counts) });

/** One node's compliance as the API and `capstan-server nodes compliance <id>` show it. */
export function complianceView(base: ComplianceBase) {
  const result = computeCompliance(base.expected, base.outcomes);
  const summary = withPercent(result.counts);
  return {
    node_id: base.node_id,
    policy_config_id: base.policy_config_id,
    run: base.run,
    /** False when the run's config id has no stored expectations: only received outcomes count. */
    expected: base.expected !== null && base.expected.length > 0,
    compliance: summary.compliance,
    summary,
    rules: groupItems(result.items, 'rule').map((g) => ({ rule_id: g.rule_id, ...withPercent(g.counts) })),
    directives: groupItems(result.items, 'directive').map((g) => ({ rule_id: g.rule_id, directive_id: g.directive_id, ...withPercent(g.counts) })),
    components: result.items,
  };
}

export function complianceRoutes(app: FastifyInstance, store: Store): void {
  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/compliance', async (req) => {
    const node = await mustGet(store, req.params.id);
    const base = await store.getComplianceBase(node.id);
    if (!base) throw capstanError('ERR_NODE_UNKNOWN', `node ${node.id} is unknown`);
    return { data: complianceView(base) };
  });

  app.get<{ Querystring: Query }>('/api/1/compliance', async (req) => {
    const agg = await store.complianceSummary(filtersFrom(req.query, []));
    return { data: { nodes: agg.nodes, nodes_with_data: agg.nodes_with_data, ...withPercent(agg.counts) } };
  });

  for (const by of ['rule', 'directive'] as const) {
    app.get(`/api/1/compliance/${by}s`, async () => {
      const rows = await store.complianceByRule(by);
      return { data: rows.map((r) => ({ ...r, ...withPercent(r.counts) })), total: rows.length };
    });
  }
}
