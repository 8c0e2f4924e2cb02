/**
 * An edited shared-folder template reaches the nodes that use it: every `[policy]
 * template_check_interval` the server checks the files of the templates in use (one stat each)
 * and regenerates the accepted members of the groups whose rules hold a directive naming a
 * changed one — those nodes only. Their config ids change with the rendered content; nodes
 * that do not use the template are not rendered. The periodic regeneration would find the change
 * too (every node's digest counts the templates it uses), later.
 */
import type { Logger } from '@capstan/shared/log';
import type { Store } from '../store/store.js';
import { loadModel } from './content.js';
import type { PolicyGenerator } from './generate.js';
import { repeatAfter } from './periodic.js';
import { directiveSources } from './shared-templates.js';

/** The accepted nodes a rule reaches with a directive (or its technique's call) rendering one of `sources`. */
export async function templateUsers(generator: PolicyGenerator, store: Pick<Store, 'listPolicyObjects'>, sources: ReadonlySet<string>): Promise<Set<string>> {
  const model = await loadModel(store);
  const directives = new Set<string>();
  for (const d of model.directives.values()) if (directiveSources(d, model).some((s) => sources.has(s))) directives.add(d.id);
  const groups = new Set<string>();
  for (const r of model.rules.values()) if (r.directives.some((d) => directives.has(d))) r.groups.forEach((g) => groups.add(g));
  const nodes = new Set<string>();
  for (const g of [...groups].sort()) for (const n of (await generator.groupMembers(g)) ?? []) nodes.add(n);
  return nodes;
}

/**
 * One check: the templates changed since they were last seen, and the nodes regenerated for them
 * (waited for). Nothing changed: nothing is read but the files' stats.
 */
export async function regenerateTemplateUsers(generator: PolicyGenerator, store: Pick<Store, 'listPolicyObjects'>): Promise<{ sources: string[]; nodes: number }> {
  const sources = await generator.templates.changed();
  if (sources.length === 0) return { sources, nodes: 0 };
  const nodes = await templateUsers(generator, store, new Set(sources));
  for (const n of nodes) generator.touch(n);
  await generator.settled();
  return { sources, nodes: nodes.size };
}

/** regenerateTemplateUsers every `intervalMs`, the next one `intervalMs` after the previous one ended. */
export function watchTemplates(generator: PolicyGenerator, store: Pick<Store, 'listPolicyObjects'>, log: Logger, intervalMs: number): { stop(): Promise<void> } {
  return repeatAfter(() => regenerateTemplateUsers(generator, store).then(
    (r) => r.sources.length > 0 && log.info({ templates: r.sources, nodes: r.nodes }, 'shared-folder templates changed: their nodes regenerated'),
    (err: unknown) => log.warn({ err }, 'checking the shared-folder templates failed'),
  ), intervalMs);
}
