/**
 * A parsed filter expression (shared/src/filter) as one SQL condition over `nodes n`, for both
 * stores. Every comparison is made two-valued (`col IS NOT NULL AND …`, or a subquery that is never unknown),
 * so `not` is plain negation and the SQL agrees with evaluateFilter() on nodes lacking a value.
 * Every literal is a bound parameter: nothing the user typed becomes SQL text.
 */
import type { FilterExpr } from '@capstan/shared/filter/parse';
import { versionKey } from '@capstan/shared/filter/version';
import { groupCondition, packageAtomKey, type Dialect } from './query.js';
import { vulnAffected, vulnCondition } from './vulns.js';

const LIKE_ESCAPE = '\\';

/** `*` → `%`, `?` → `_`; the LIKE wildcards and the escape character themselves are literal. */
export function globToLike(glob: string): string {
  return glob.replace(/[\\%_*?]/g, (c) => (c === '*' ? '%' : c === '?' ? '_' : LIKE_ESCAPE + c));
}

const asciiLower = (s: string) => s.replace(/[A-Z]/g, (c) => c.toLowerCase());

const TEXT_COLUMNS: Record<string, string> = {
  id: 'n.id', 'os.name': 'n.os_name', state: 'n.state', status: 'n.status', manager: 'n.manager', accepted: 'n.accepted',
};
const INVENTORY_TEXT: Record<string, string> = { 'os.kernel': 'os_kernel', arch: 'arch' };
const MIRROR: Record<string, string> = { '<': '>', '<=': '>=', '>': '<', '>=': '<=', '=': '=', '!=': '!=' };

/** The instant `seconds` before `now`, as the stores keep instants (ISO UTC, milliseconds). */
function before(now: Date, seconds: number): string {
  return new Date(now.getTime() - seconds * 1000).toISOString();
}

export function compileFilter(expr: FilterExpr, d: Dialect, now: Date): string {
  const p = (v: unknown) => d.param(v);
  const pg = d.like === 'lower';
  const inv = (cond: string) => `n.id IN (SELECT ni.node_id FROM node_inventory ni WHERE ${cond})`;
  // `col IS NOT NULL AND col op x` is false, never unknown, on an empty column, and unlike
  // `(col op x) IS TRUE` it lets the planner use the column's statistics and indexes.
  const known = (column: string, cond: string) => `(${column} IS NOT NULL AND ${cond})`;
  switch (expr.kind) {
    case 'and':
    case 'or':
      return `(${expr.items.map((e) => compileFilter(e, d, now)).join(expr.kind === 'and' ? ' AND ' : ' OR ')})`;
    case 'not':
      return `NOT (${compileFilter(expr.expr, d, now)})`;
    case 'has': {
      const key = expr.key;
      if (expr.field === 'package') return packages(packageAtomKey(key, null, null), () => `pv.name = ${p(key)}`, d);
      if (expr.field === 'fact') {
        // The fact itself, or any leaf under it (fact:os is present when fact:os.family is).
        return `n.id IN (SELECT f.node_id FROM node_facts f WHERE f.path = ${p(key)} OR (f.path >= ${p(key + '.')} AND f.path < ${p(key + '/')}))`;
      }
      if (expr.field === 'property') {
        // A leaf at the path, or under it (shared/src/filter/properties.ts).
        return `n.id IN (SELECT pr.node_id FROM node_property_leaves pr WHERE pr.path = ${p(key)} OR (pr.path >= ${p(key + '.')} AND pr.path < ${p(key + '/')}))`;
      }
      if (expr.field === 'vuln') return vulnAffected(key, d, now);
      return `n.id IN (SELECT t.node_id FROM node_tags t WHERE t.key = ${p(key)})`;
    }
    default: break;
  }
  const { op, value } = expr;
  switch (expr.field) {
    case 'hostname':
    case 'fqdn': {
      const column = expr.field === 'hostname' ? 'n.hostname' : 'ni.fqdn';
      const like = pg
        ? `lower(${column}) LIKE ${p(asciiLower(globToLike(value.text)))} ESCAPE '${LIKE_ESCAPE}'`
        : `${column} LIKE ${p(globToLike(value.text))} ESCAPE '${LIKE_ESCAPE}'`;
      const cond = op === '=' ? like : `NOT (${like})`;
      return expr.field === 'hostname' ? known(column, cond) : inv(known(column, cond));
    }
    case 'os.version':
      return inv(`ni.os_version_key ${op === '!=' ? '<>' : op} ${p(versionKey(value.text))}`);
    case 'os.kernel':
    case 'arch':
      return inv(`ni.${INVENTORY_TEXT[expr.field]} ${op === '!=' ? '<>' : '='} ${p(value.text)}`);
    case 'cpus':
    case 'memory':
      return inv(`ni.${expr.field} ${op === '!=' ? '<>' : op} ${p(value.kind === 'number' ? value.number : 0)}`);
    case 'group': {
      const member = groupCondition(value.text, d);
      return op === '=' ? member : `NOT (${member})`;
    }
    case 'ip': {
      if (value.kind !== 'cidr') return '1 = 0';
      const inside = `n.id IN (SELECT a.node_id FROM node_addresses a WHERE a.address >= ${p(value.from)} AND a.address <= ${p(value.to)})`;
      return op === '=' ? inside : `NOT (${inside})`;
    }
    case 'last_run.age':
    case 'last_inventory.age': {
      const column = expr.field === 'last_run.age' ? 'n.last_run_at' : 'n.last_inventory_at';
      const at = before(now, value.kind === 'number' ? value.number : 0);
      return known(column, `${column} ${MIRROR[op] === '!=' ? '<>' : MIRROR[op]} ${p(at)}`);
    }
    case 'package': {
      const vk = versionKey(value.text);
      return packages(packageAtomKey(expr.key!, op, vk), () => `pv.name = ${p(expr.key)} AND pv.version_key ${op === '!=' ? '<>' : op} ${p(vk)}`, d);
    }
    case 'vuln.kev':
    case 'vuln.severity':
    case 'vuln.count':
      return vulnCondition(expr.field, op, value, d, now);
    case 'fact': {
      // The key's parameter first: SQLite's placeholders are positional.
      const path = p(expr.key);
      const cond = value.kind === 'number'
        ? `f.num ${op === '!=' ? '<>' : op} ${p(value.number)}`
        : `f.value ${op === '!=' ? '<>' : '='} ${p(value.text)}`;
      return `n.id IN (SELECT f.node_id FROM node_facts f WHERE f.path = ${path} AND ${cond})`;
    }
    case 'property': {
      // As facts: text for = and !=, the leaf's number for ordering.
      const path = p(expr.key);
      const cond = value.kind === 'number'
        ? `pr.num ${op === '!=' ? '<>' : op} ${p(value.number)}`
        : `pr.value ${op === '!=' ? '<>' : '='} ${p(value.text)}`;
      return `n.id IN (SELECT pr.node_id FROM node_property_leaves pr WHERE pr.path = ${path} AND ${cond})`;
    }
    case 'tag':
      return `n.id IN (SELECT t.node_id FROM node_tags t WHERE t.key = ${p(expr.key)} AND t.value ${op === '!=' ? '<>' : '='} ${p(value.text)})`;
    default: {
      const column = TEXT_COLUMNS[expr.field];
      if (!column) return '1 = 0';
      return known(column, `${column} ${op === '!=' ? '<>' : '='} ${p(value.text)}`);
    }
  }
}

/** Nodes with an installed package version matching `cond` (over `package_versions pv`). */
function packages(atom: string, condition: () => string, d: Dialect): string {
  const ids = d.packageIds?.get(atom);
  if (ids !== undefined) {
    // Looked up before the query: the planner sees the array, and so how many nodes match.
    return ids.length === 0 ? '1 = 0' : `n.id IN (SELECT ni.node_id FROM node_inventory ni WHERE ni.packages && ${d.param(ids)}::integer[])`;
  }
  const cond = condition();
  if (d.like === 'lower') {
    // One GIN probe per matching version id (there are few) instead of one row per node.
    return `n.id IN (SELECT ni.node_id FROM node_inventory ni WHERE ni.packages && ARRAY(SELECT pv.id FROM package_versions pv WHERE ${cond}))`;
  }
  // The node's own inventory key: the postings' integers are tested without a lookup per match.
  return `(n.inventory_key IS NOT NULL AND n.inventory_key IN (
    SELECT np.node_key FROM node_packages np WHERE np.package_id IN (SELECT pv.id FROM package_versions pv WHERE ${cond})))`;
}
