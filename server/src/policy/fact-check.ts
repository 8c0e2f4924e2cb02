/**
 * A directive whose condition reads a fact none of its nodes has is silently not applicable on
 * all of them: likely a misspelt path (`fact('role')` where the inventory says `facts.role`, or a
 * fact no node reports yet). `policy diff` and the save of a directive say so, as warnings: the
 * change is still made (a fact may be rolled out after its policy).
 *
 * Whether a node has a fact is the filter language's bare `fact:<path>` (docs/filters.md), which
 * reads the same node data as conditions.
 */
import { parseCondition, type Condition } from '@capstan/shared/policy/condition';
import type { Directive } from '@capstan/shared/policy/bundle';
import type { NodeFilter, Store } from '../store/store.js';

export interface FactWarning {
  kind: 'directive';
  id: string;
  field: 'condition';
  fact: string;
  message: string;
}

/** An `id` filter's largest list (the node list's own limit). */
const ID_CHUNK = 100;
/** Paths the filter language can name (anything else is not checked). */
const FACT_PATH = /^[A-Za-z0-9_-]+(\.[A-Za-z0-9_-]+)*$/;

/** The fact paths a condition reads, each once. */
export function conditionFacts(c: Condition): string[] {
  const out = new Set<string>();
  const walk = (x: Condition): void => {
    switch (x.op) {
      case 'and':
      case 'or':
        walk(x.left);
        walk(x.right);
        return;
      case 'not':
        walk(x.expr);
        return;
      default:
        if (x.fn === 'fact') out.add(x.arg);
    }
  };
  walk(c);
  return [...out];
}

/**
 * Facts that `directive`'s condition reads and none of `nodes` has (nodes: the ids it reaches, or
 * filters choosing them). Nothing when it reaches no node: there is nobody to say it of.
 */
export async function missingFacts(store: Pick<Store, 'listNodeIds'>, directive: Directive, nodes: string[] | NodeFilter[]): Promise<FactWarning[]> {
  if (!directive.condition || nodes.length === 0) return [];
  let facts: string[];
  try {
    facts = conditionFacts(parseCondition(directive.condition)).filter((f) => FACT_PATH.test(f));
  } catch {
    return []; // a condition that does not parse was refused at save already
  }
  if (facts.length === 0) return [];
  // Filters that choose nobody (yet) reach no node: nothing to say of a fact then.
  if (typeof nodes[0] !== 'string' && (await store.listNodeIds(nodes as NodeFilter[])).length === 0) return [];
  const out: FactWarning[] = [];
  for (const fact of facts) {
    const has: NodeFilter = { key: 'q', values: [`fact:${fact}`] };
    let found = false;
    if (typeof nodes[0] === 'string') {
      const ids = nodes as string[];
      for (let i = 0; i < ids.length && !found; i += ID_CHUNK) {
        found = (await store.listNodeIds([{ key: 'id', values: ids.slice(i, i + ID_CHUNK) }, has])).length > 0;
      }
    } else {
      found = (await store.listNodeIds([...(nodes as NodeFilter[]), has])).length > 0;
    }
    if (!found) {
      out.push({
        kind: 'directive', id: directive.id, field: 'condition', fact,
        message: `condition reads fact('${fact}'), which none of the nodes this directive reaches has: it is not applicable on any of them (a misspelt path? custom facts are also under facts.<name>)`,
      });
    }
  }
  return out;
}
