/**
 * What a large plan costs in memory (POST /api/1/policy/plan, `[policy] plan_memory_limit`): a
 * SQLite fleet of `nodes` nodes filled in bulk, each with an inventory, a policy of templated
 * directives on every node, then one plan changing a 2 kB template every node renders, run in
 * this process with the given limit (0: none). Prints one JSON line: the answer (nodes listed,
 * or the refusal's code), the bytes the plan counted at most, its time and the process's peak
 * RSS, sampled every 10 ms, above the RSS before it. Run one process per measure:
 *
 *   node bench/dist/plan-memory.js --nodes 20000 --limit 268435456 --max-nodes 1000
 */
import { parseArgs } from 'node:util';
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { planPolicy, type PlanRequest } from '@capstan/server/policy/plan';
import { PlanMemory, planBounds } from '@capstan/server/policy/plan-memory';
import { NO_DEADLINE } from '@capstan/server/policy/deadline';
import { loadNodeData } from './policy.js';
import { loadSqlite } from './registry.js';
import { withSqlite, withSqliteStore } from './store.js';

const template = (tag: string) => `# ${tag}\n` + Array.from({ length: 40 }, (_, i) => `setting_${i} = {{node.hostname}}-{{facts.site.room}}-${i} # kept by capstan\n`).join('');

export async function benchPlanMemory(nodes: number, limit: number, maxNodes: number) {
  return withSqlite('capstan-plan-memory-', async (path) => {
    loadSqlite(path, nodes);
    loadNodeData(path, nodes);
    return withSqliteStore(path, async (store) => {
      const at = new Date().toISOString();
      const directive = (tag: string) => ({ id: 'conf', name: 'conf', method: 'file_content', mode: 'enforce', params: { path: '/etc/app.conf', content: template(tag) } });
      await store.putPolicyObject('directive', 'conf', directive('v1'), at);
      await store.putPolicyObject('directive', 'motd', { id: 'motd', name: 'motd', method: 'file_content', mode: 'enforce', params: { path: '/etc/motd', content: 'host {{node.hostname}}\n' } }, at);
      await store.putPolicyObject('group', 'all', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] }, at);
      await store.putPolicyObject('rule', 'base', { id: 'base', name: 'base', directives: ['conf', 'motd'], groups: ['all'] }, at);
      const generator = new PolicyGenerator({ store, log: silentLogger });
      const req: PlanRequest = { directives: [directive('v2') as PlanRequest['directives'][number]], groups: [], rules: [], techniques: [], properties: [], prune: false };
      global.gc?.();
      const base = process.memoryUsage().rss;
      let peak = base;
      const sampler = setInterval(() => (peak = Math.max(peak, process.memoryUsage().rss)), 10);
      const memory = new PlanMemory(limit > 0 ? limit : Number.POSITIVE_INFINITY);
      const started = performance.now();
      let answer: string;
      try {
        const plan = await planPolicy(store, generator, req, maxNodes, planBounds(NO_DEADLINE, memory));
        answer = `200: ${plan.nodes.length} of ${plan.nodes_total} nodes listed`;
      } catch (err) {
        answer = `${(err as { statusCode?: number }).statusCode} ${(err as { code?: string }).code}`;
      }
      const ms = Math.round(performance.now() - started);
      clearInterval(sampler);
      peak = Math.max(peak, process.memoryUsage().rss);
      return { nodes, limit, max_nodes: maxNodes, answer, ms, counted_peak_bytes: memory.peak, rss_before_mb: Math.round(base / 2 ** 20), rss_peak_mb: Math.round(peak / 2 ** 20), rss_growth_mb: Math.round((peak - base) / 2 ** 20) };
    });
  });
}

if (import.meta.url === `file://${process.argv[1]}`) {
  const { values } = parseArgs({ options: { nodes: { type: 'string', default: '20000' }, limit: { type: 'string', default: '0' }, 'max-nodes': { type: 'string', default: '1000' } } });
  console.log(JSON.stringify(await benchPlanMemory(Number(values.nodes), Number(values.limit), Number(values['max-nodes']))));
}
