/**
 * In-memory evaluation of a filter over one node, with the same meaning as the SQL the server
 * compiles (server/src/store/nodes/filters/sql.ts): every comparison with no value to compare (no
 * fact, never ran) is false, and `not` is plain negation of that.
 */
import { addressKey, type FilterExpr, type FilterValue } from './parse.js';
import { propertyLeaves } from './properties.js';
import { compareVersions } from './version.js';

/** What a filter can see of a node. */
export interface FilterSubject {
  id: string;
  hostname: string;
  fqdn: string | null;
  os_name: string | null;
  os_version: string | null;
  os_kernel: string | null;
  arch: string | null;
  cpus: number | null;
  memory: number | null;
  addresses: string[];
  /** name → installed versions */
  packages: Record<string, string[]>;
  /** The node data `fact:` reads, flattened (policy/data.ts indexedFacts): dotted path → text. */
  facts: Record<string, string>;
  /** The node's own properties, JSON values by name (properties.ts says how a path reads them). */
  properties: Record<string, unknown>;
  tags: Record<string, string>;
  state: string;
  status: string;
  manager: string;
  accepted: string;
  groups: string[];
  last_run_at: string | null;
  last_inventory_at: string | null;
  /** Its unmuted vulnerability findings, one per advisory (absent: none). */
  vulns?: Array<{ advisory: string; cves: string[]; rating: string | null; kev: boolean }>;
}

/** A leaf of a facts object as text: strings as they are, anything else as its JSON. */
export function factText(v: unknown): string {
  return typeof v === 'string' ? v : JSON.stringify(v);
}

/** Limits on the facts kept queryable per node. */
export const FACT_LIMITS = { maxLeaves: 2000, maxDepth: 16, maxPathLength: 255, maxValueLength: 4096 } as const;

/**
 * Facts as dotted paths to leaves (`a.b.0.c`); arrays are indexed. Leaves beyond the limits are
 * left out of querying (the document keeps them), and so are keys no path can name (empty, or
 * holding a dot): `fact:a.b` must mean what a condition's `fact('a.b')` means (policy/data.ts).
 */
export function flattenFacts(facts: unknown): Array<[string, string]> {
  const out: Array<[string, string]> = [];
  const walk = (v: unknown, path: string, depth: number) => {
    if (out.length >= FACT_LIMITS.maxLeaves || path.length > FACT_LIMITS.maxPathLength) return;
    if (v !== null && typeof v === 'object' && depth < FACT_LIMITS.maxDepth) {
      const entries = Array.isArray(v) ? v.map((x, i) => [String(i), x] as const) : Object.entries(v);
      for (const [k, x] of entries) if (k !== '' && !k.includes('.')) walk(x, path === '' ? k : `${path}.${k}`, depth + 1);
      return;
    }
    if (path === '' || v === undefined) return;
    const text = factText(v);
    if (text.length <= FACT_LIMITS.maxValueLength && !text.includes('\u0000') && !path.includes('\u0000')) out.push([path, text]);
  };
  walk(facts, '', 0);
  return out;
}

/** A fact's number for ordering comparisons, or null when it is not one. */
export function factNumber(text: string): number | null {
  return /^-?\d{1,15}(\.\d{1,15})?$/.test(text) ? Number(text) : null;
}

/** `*` any run, `?` one character, case-insensitive (ASCII), every other character literal. */
export function globMatch(glob: string, text: string): boolean {
  const lower = (t: string) => t.replace(/[A-Z]/g, (c) => c.toLowerCase());
  const re = lower(glob).replace(/[.+^${}()|[\]\\*?]/g, (c) => (c === '*' ? '.*' : c === '?' ? '.' : `\\${c}`));
  return new RegExp(`^${re}$`, 'su').test(lower(text));
}

function compare(op: string, c: number): boolean {
  switch (op) {
    case '=': return c === 0;
    case '!=': return c !== 0;
    case '<': return c < 0;
    case '<=': return c <= 0;
    case '>': return c > 0;
    default: return c >= 0;
  }
}

const SEVERITY_RANK: Record<string, number> = { low: 1, medium: 2, high: 3, critical: 4 };

const cmp = (a: string, b: string) => (a < b ? -1 : a > b ? 1 : 0);

function textCompare(op: string, actual: string | null, value: FilterValue): boolean {
  return actual !== null && compare(op, cmp(actual, value.text));
}

/** Whether `node` matches `expr`; `now` is the instant ages are measured from. */
export function evaluateFilter(expr: FilterExpr, node: FilterSubject, now: Date): boolean {
  switch (expr.kind) {
    case 'and': return expr.items.every((e) => evaluateFilter(e, node, now));
    case 'or': return expr.items.some((e) => evaluateFilter(e, node, now));
    case 'not': return !evaluateFilter(expr.expr, node, now);
    case 'has': {
      const key = expr.key;
      if (expr.field === 'package') return (node.packages[key] ?? []).length > 0;
      if (expr.field === 'fact') return key in node.facts || Object.keys(node.facts).some((p) => p.startsWith(`${key}.`));
      if (expr.field === 'property') return propertyLeaves(node.properties).some((l) => l.path === key || l.path.startsWith(`${key}.`));
      if (expr.field === 'vuln') return (node.vulns ?? []).some((v) => v.advisory === key || v.cves.includes(key));
      return key in node.tags;
    }
    default: break;
  }
  const { op, value } = expr;
  const num = (n: number | null) => n !== null && value.kind === 'number' && compare(op, Math.sign(n - value.number));
  switch (expr.field) {
    case 'hostname': return op === '=' ? globMatch(value.text, node.hostname) : !globMatch(value.text, node.hostname);
    case 'fqdn': return node.fqdn !== null && (op === '=' ? globMatch(value.text, node.fqdn) : !globMatch(value.text, node.fqdn));
    case 'id': return textCompare(op, node.id, value);
    case 'os.name': return textCompare(op, node.os_name, value);
    case 'os.kernel': return textCompare(op, node.os_kernel, value);
    case 'arch': return textCompare(op, node.arch, value);
    case 'state': return textCompare(op, node.state, value);
    case 'status': return textCompare(op, node.status, value);
    case 'manager': return textCompare(op, node.manager, value);
    case 'accepted': return textCompare(op, node.accepted, value);
    case 'os.version': return node.os_version !== null && compare(op, compareVersions(node.os_version, value.text));
    case 'cpus': return num(node.cpus);
    case 'memory': return num(node.memory);
    case 'group': return op === '=' ? node.groups.includes(value.text) : !node.groups.includes(value.text);
    case 'ip': {
      if (value.kind !== 'cidr') return false;
      const inside = node.addresses.some((a) => {
        const k = addressKey(a);
        return k !== null && k >= value.from && k <= value.to;
      });
      return op === '=' ? inside : !inside;
    }
    case 'last_run.age':
    case 'last_inventory.age': {
      const at = expr.field === 'last_run.age' ? node.last_run_at : node.last_inventory_at;
      if (at === null || value.kind !== 'number') return false;
      // Compared on whole milliseconds, as the stores compare instants.
      const threshold = now.getTime() - value.number * 1000;
      const t = Date.parse(at);
      return compare(op, Math.sign(threshold - t));
    }
    case 'package':
      return (node.packages[expr.key!] ?? []).some((v) => compare(op, compareVersions(v, value.text)));
    case 'vuln.kev': {
      const kev = (node.vulns ?? []).some((v) => v.kev);
      return op === '=' ? kev === (value.text === 'true') : kev !== (value.text === 'true');
    }
    case 'vuln.severity':
      return (node.vulns ?? []).some((v) => {
        const rank = SEVERITY_RANK[v.rating ?? ''];
        return rank !== undefined && value.kind === 'number' && compare(op, Math.sign(rank - value.number));
      });
    case 'vuln.count':
      return num(new Set((node.vulns ?? []).map((v) => v.advisory)).size);
    case 'fact': {
      const f = node.facts[expr.key!];
      if (f === undefined) return false;
      if (value.kind === 'number') return num(factNumber(f));
      return compare(op, cmp(f, value.text));
    }
    case 'property':
      // A path names one leaf, unless a name holding a dot meets an object's key: then any of them.
      return propertyLeaves(node.properties).some((l) => l.path === expr.key
        && (value.kind === 'number' ? num(l.num) : compare(op, cmp(l.value, value.text))));
    case 'tag': {
      const p = node.tags[expr.key!];
      return p !== undefined && compare(op, cmp(p, value.text));
    }
    default: return false;
  }
}
