/**
 * Policy generation benchmark (target: 100,000 nodes regenerate in ≤ 10 s). A SQLite
 * registry of `nodes` nodes is filled in bulk (registry.ts's fleet), a model of a few rules over
 * static and dynamic groups is saved, and then timed: the first generation of every node, a
 * second pass with nothing to change, and one directive change reaching its rule's nodes.
 */
import { silentLogger } from '@capstan/shared';
import { PolicyGenerator } from '@capstan/server/policy/generate';
import { loadSqlite } from './registry.js';
import { withSqlite, withSqliteStore } from './store.js';

export interface PolicyBenchResult {
  nodes: number;
  first_ms: number;
  first_changed: number;
  unchanged_ms: number;
  directive_change_ms: number;
  directive_change_nodes: number;
  target_ms: number;
  ok: boolean;
}

export const POLICY_TARGET_MS = 10_000;

export async function benchPolicy(opts: { nodes?: number; log?: (line: string) => void } = {}): Promise<PolicyBenchResult> {
  const nodes = opts.nodes ?? 100_000;
  const log = opts.log ?? (() => undefined);
  return withSqlite('capstan-policy-bench-', async (path) => {
    loadSqlite(path, nodes);
    return withSqliteStore(path, async (store) => {
      const at = new Date().toISOString();
      for (let d = 0; d < 10; d++) {
        await store.putPolicyObject('directive', `d${d}`, { id: `d${d}`, name: `d${d}`, method: 'file_content', mode: 'enforce', params: { path: `/etc/capstan-${d}`, content: `value ${d}\n` } }, at);
      }
      await store.putPolicyObject('group', 'all', { id: 'all', name: 'all', filter: [{ key: 'accepted', values: ['accepted'] }] }, at);
      await store.putPolicyObject('group', 'prod', { id: 'prod', name: 'prod', filter: [{ key: 'tag:env', values: ['prod'] }] }, at);
      await store.putPolicyObject('group', 'web', { id: 'web', name: 'web', filter: [{ key: 'hostname', values: ['web-*'] }] }, at);
      await store.putPolicyObject('group', 'canary', { id: 'canary', name: 'canary', filter: [{ key: 'group', values: ['canary'] }] }, at);
      await store.putPolicyObject('rule', 'base', { id: 'base', name: 'base', directives: ['d0', 'd1', 'd2', 'd3'], groups: ['all'] }, at);
      await store.putPolicyObject('rule', 'prod', { id: 'prod', name: 'prod', directives: ['d4', 'd5'], groups: ['prod'] }, at);
      await store.putPolicyObject('rule', 'web', { id: 'web', name: 'web', directives: ['d6', 'd7'], groups: ['web'] }, at);
      await store.putPolicyObject('rule', 'canary', { id: 'canary', name: 'canary', directives: ['d8', 'd9'], groups: ['canary'] }, at);
      const gen = new PolicyGenerator({ store, log: silentLogger });
      log(`policy bench: ${nodes} nodes loaded`);
      const first = await gen.regenerateAll();
      log(`policy bench: first generation ${first.ms.toFixed(0)} ms (${first.changed} bundles)`);
      const again = await gen.regenerateAll();
      log(`policy bench: unchanged pass ${again.ms.toFixed(0)} ms`);
      const change = await gen.change('directive', 'd6', () =>
        store.putPolicyObject('directive', 'd6', { id: 'd6', name: 'd6', method: 'file_content', mode: 'enforce', params: { path: '/etc/capstan-6', content: 'changed\n' } }, new Date().toISOString()));
      log(`policy bench: one directive change ${change.stats.ms.toFixed(0)} ms (${change.stats.changed} of ${nodes} nodes)`);
      return {
        nodes, first_ms: Math.round(first.ms), first_changed: first.changed, unchanged_ms: Math.round(again.ms),
        directive_change_ms: Math.round(change.stats.ms), directive_change_nodes: change.stats.changed,
        target_ms: POLICY_TARGET_MS, ok: first.ms <= POLICY_TARGET_MS,
      };
    });
  });
}
