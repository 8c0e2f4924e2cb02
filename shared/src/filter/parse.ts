/**
 * The node filter language: one grammar for every place that chooses nodes (the node list,
 * compliance and changes scopes, groups, jobs, exports, the CLI). docs/filters.md is its
 * reference. The parser turns text into a checked tree; the server compiles the tree to SQL and
 * `evaluate.ts` evaluates it in memory, and the two must agree (a property test holds them to it).
 *
 *   expr   := and ("or" and)*
 *   and    := unary ("and" unary)*
 *   unary  := "not" unary | "(" expr ")" | atom
 *   atom   := field [op value]          op: = != < <= > >= in
 *
 * A bad expression answers ERR_FILTER_SYNTAX with the offending character position.
 */
import { capstanError } from '../errors.js';

export type CompareOp = '=' | '!=' | '<' | '<=' | '>' | '>=';

/** How a field's values are read and compared. */
export type FilterFieldType = 'glob' | 'text' | 'version' | 'integer' | 'bytes' | 'cidr' | 'age' | 'keyed' | 'package' | 'fact' | 'vuln' | 'flag' | 'severity';

export const FIELDS: Record<string, FilterFieldType> = {
  hostname: 'glob', fqdn: 'glob', id: 'text',
  'os.name': 'text', 'os.version': 'version', 'os.kernel': 'text', arch: 'text',
  cpus: 'integer', memory: 'bytes', ip: 'cidr',
  state: 'text', status: 'text', manager: 'text', group: 'text', accepted: 'text',
  'last_run.age': 'age', 'last_inventory.age': 'age',
  // Vulnerabilities (docs/vulnerabilities.md): over a node's unmuted findings.
  'vuln.kev': 'flag', 'vuln.severity': 'severity', 'vuln.count': 'integer',
};
/** Fields followed by `:<name>`; a bare one tests presence. */
export const KEYED: Record<string, FilterFieldType> = { package: 'package', fact: 'fact', property: 'fact', tag: 'keyed', vuln: 'vuln' };

/** `vuln.severity`'s values, in order (a number each: low 1 … critical 4). */
export const VULN_SEVERITIES = ['low', 'medium', 'high', 'critical'] as const;

/** A typed literal. `cidr` is an address range as two 32-hex-digit IPv6 (IPv4-mapped) keys. */
export type FilterValue =
  | { kind: 'text'; text: string }
  | { kind: 'number'; text: string; number: number }
  | { kind: 'cidr'; text: string; from: string; to: string };

export type FilterExpr =
  | { kind: 'and' | 'or'; items: FilterExpr[] }
  | { kind: 'not'; expr: FilterExpr }
  | { kind: 'has'; field: string; key: string; position: number }
  | { kind: 'compare'; field: string; key?: string; op: CompareOp; value: FilterValue; position: number };

/** Limits on one expression: its length, nesting and number of comparisons. */
export const FILTER_LIMITS = { maxLength: 4096, maxDepth: 32, maxAtoms: 64, maxKeyLength: 255 } as const;

interface Token {
  kind: 'word' | 'string' | 'op' | '(' | ')' | 'end';
  text: string;
  position: number;
}

function fail(position: number, message: string): never {
  throw capstanError('ERR_FILTER_SYNTAX', `filter, at position ${position}: ${message}`, { details: { position } });
}

const WORD = /[A-Za-z0-9._:/*?+~@%\-\[\]]/;

function tokenize(text: string): Token[] {
  const out: Token[] = [];
  let i = 0;
  while (i < text.length) {
    const c = text[i]!;
    if (c === ' ' || c === '\t' || c === '\n' || c === '\r') { i++; continue; }
    if (c === '(' || c === ')') { out.push({ kind: c, text: c, position: i }); i++; continue; }
    const two = text.slice(i, i + 2);
    if (two === '!=' || two === '<=' || two === '>=') { out.push({ kind: 'op', text: two, position: i }); i += 2; continue; }
    if (c === '=' || c === '<' || c === '>') { out.push({ kind: 'op', text: c, position: i }); i++; continue; }
    if (c === '"' || c === "'") {
      // A quoted literal: any character; the quote and the backslash are escaped by a backslash.
      const start = i++;
      let value = '';
      for (;;) {
        if (i >= text.length) fail(start, 'unterminated string');
        const d = text[i]!;
        if (d === c) { i++; break; }
        if (d === '\\') {
          const e = text[i + 1];
          if (e === undefined) fail(i, 'unterminated string');
          value += e;
          i += 2;
          continue;
        }
        value += d;
        i++;
      }
      out.push({ kind: 'string', text: value, position: start });
      continue;
    }
    if (!WORD.test(c)) fail(i, `unexpected character ${JSON.stringify(c)}`);
    const start = i;
    while (i < text.length && WORD.test(text[i]!)) i++;
    out.push({ kind: 'word', text: text.slice(start, i), position: start });
  }
  out.push({ kind: 'end', text: '', position: text.length });
  return out;
}

const UNITS: Record<string, number> = {
  '': 1, b: 1, k: 1024, kib: 1024, m: 1024 ** 2, mib: 1024 ** 2, g: 1024 ** 3, gib: 1024 ** 3, t: 1024 ** 4, tib: 1024 ** 4,
  kb: 1e3, mb: 1e6, gb: 1e9, tb: 1e12,
};
const DURATIONS: Record<string, number> = { s: 1, m: 60, h: 3600, d: 86400, w: 604800 };
/**
 * The largest value of each numeric type, so that no literal reaches a database column it does not
 * fit (PostgreSQL's `integer` for counts, `bigint` for sizes) or a time before year 0: a count up
 * to 2^31 - 1, a size up to 2^53 bytes (8 PiB), an age up to 100 years.
 */
export const FILTER_NUMBER_LIMITS = { integer: 2 ** 31 - 1, bytes: Number.MAX_SAFE_INTEGER, age: 100 * 365.25 * 86400 } as const;

/** `10.0.0.0/8`, `2001:db8::/32` or one address → the range of 128-bit keys it covers. */
export function parseCidr(text: string): { from: string; to: string } | null {
  const slash = text.indexOf('/');
  const addr = slash < 0 ? text : text.slice(0, slash);
  const key = addressKey(addr);
  if (key === null) return null;
  const v4 = !addr.includes(':');
  const max = v4 ? 32 : 128;
  let bits = max;
  if (slash >= 0) {
    const b = text.slice(slash + 1);
    if (!/^\d{1,3}$/.test(b) || Number(b) > max) return null;
    bits = Number(b);
  }
  const prefix = (v4 ? 96 : 0) + bits;
  const bin = [...key].map((h) => parseInt(h, 16).toString(2).padStart(4, '0')).join('');
  const toHex = (b: string) => b.match(/.{4}/g)!.map((n) => parseInt(n, 2).toString(16)).join('');
  return { from: toHex(bin.slice(0, prefix).padEnd(128, '0')), to: toHex(bin.slice(0, prefix).padEnd(128, '1')) };
}

/** An IPv4 or IPv6 address as 32 hex digits (IPv4 as ::ffff:a.b.c.d), or null. */
export function addressKey(addr: string): string | null {
  const a = addr.replace(/%.*$/, '').toLowerCase();
  const v4 = /^(\d{1,3})\.(\d{1,3})\.(\d{1,3})\.(\d{1,3})$/.exec(a);
  if (v4) {
    const parts = v4.slice(1).map(Number);
    if (parts.some((p) => p > 255)) return null;
    return '00000000000000000000ffff' + parts.map((p) => p.toString(16).padStart(2, '0')).join('');
  }
  if (!/^[0-9a-f:.]+$/.test(a) || a.length < 2) return null;
  let head = a;
  const dotted = /:(\d{1,3}(?:\.\d{1,3}){3})$/.exec(a);
  if (dotted) {
    // A trailing dotted quad (::ffff:192.0.2.1) is the last two groups.
    const k = addressKey(dotted[1]!);
    if (k === null) return null;
    head = `${a.slice(0, dotted.index)}:${k.slice(24, 28)}:${k.slice(28)}`;
  }
  const halves = head.split('::');
  if (halves.length > 2) return null;
  const groups = (s: string) => (s === '' ? [] : s.split(':'));
  const left = groups(halves[0]!);
  const right = halves.length === 2 ? groups(halves[1]!) : [];
  const want = 8;
  const fill = halves.length === 2 ? want - left.length - right.length : 0;
  if (fill < 0 || (halves.length === 1 && left.length !== want) || (halves.length === 2 && fill < 1)) return null;
  const all = [...left, ...Array<string>(fill).fill('0'), ...right];
  if (all.some((g) => !/^[0-9a-f]{1,4}$/.test(g))) return null;
  const hex = all.map((g) => g.padStart(4, '0')).join('');
  return hex;
}

function typedValue(type: FilterFieldType, op: CompareOp, tok: Token): FilterValue {
  const text = tok.text;
  const number = (n: number): FilterValue => ({ kind: 'number', text, number: n });
  switch (type) {
    case 'integer': {
      if (!/^\d{1,15}$/.test(text)) fail(tok.position, 'expected a whole number');
      if (Number(text) > FILTER_NUMBER_LIMITS.integer) fail(tok.position, `expected a whole number of at most ${FILTER_NUMBER_LIMITS.integer}`);
      return number(Number(text));
    }
    case 'bytes': {
      const m = /^(\d{1,15}(?:\.\d{1,6})?)\s*([A-Za-z]*)$/.exec(text);
      const unit = m ? UNITS[m[2]!.toLowerCase()] : undefined;
      if (!m || unit === undefined) fail(tok.position, 'expected a size such as 512MiB, 4GiB or 8GB');
      const bytes = Math.round(Number(m[1]) * unit);
      if (bytes > FILTER_NUMBER_LIMITS.bytes) fail(tok.position, 'expected a size of at most 8 PiB');
      return number(bytes);
    }
    case 'age': {
      const m = /^(\d{1,9})([smhdw])$/.exec(text);
      if (!m) fail(tok.position, 'expected a duration such as 30m, 2h or 7d');
      const seconds = Number(m[1]) * DURATIONS[m[2]!]!;
      if (seconds > FILTER_NUMBER_LIMITS.age) fail(tok.position, 'expected a duration of at most 100 years (5217w)');
      return number(seconds);
    }
    case 'cidr': {
      if (op !== '=' && op !== '!=') fail(tok.position, 'ip compares with =, != or in');
      const range = parseCidr(text);
      if (!range) fail(tok.position, 'expected an address or a CIDR range such as 10.0.0.0/8');
      return { kind: 'cidr', text, ...range };
    }
    case 'fact':
      if (op !== '=' && op !== '!=') {
        if (!/^-?\d{1,15}(\.\d{1,15})?$/.test(text)) fail(tok.position, 'a fact or property is ordered against a number only');
        return number(Number(text));
      }
      return { kind: 'text', text };
    case 'version':
    case 'package':
      return { kind: 'text', text };
    case 'vuln':
      return fail(tok.position, 'vuln:<id> takes no operator: it is true when the node is affected');
    case 'flag':
      if (op !== '=' && op !== '!=') fail(tok.position, `${op} does not apply here: use = or !=`);
      if (text !== 'true' && text !== 'false') fail(tok.position, 'expected true or false');
      return { kind: 'text', text };
    case 'severity': {
      const rank = (VULN_SEVERITIES as readonly string[]).indexOf(text.toLowerCase());
      if (rank < 0) fail(tok.position, `expected a severity: ${VULN_SEVERITIES.join(', ')}`);
      return number(rank + 1);
    }
    default:
      if (op !== '=' && op !== '!=') fail(tok.position, `${op} does not apply here: use = or !=`);
      return { kind: 'text', text };
  }
}

class Parser {
  private i = 0;
  private atoms = 0;
  constructor(private readonly tokens: Token[]) {}

  private peek(): Token { return this.tokens[this.i]!; }
  private next(): Token { return this.tokens[this.i++]!; }
  private keyword(word: string): boolean {
    const t = this.peek();
    return t.kind === 'word' && t.text.toLowerCase() === word;
  }

  parse(): FilterExpr {
    const e = this.or(0);
    const t = this.peek();
    if (t.kind !== 'end') fail(t.position, t.kind === ')' ? 'unbalanced )' : `expected and, or or the end, got ${JSON.stringify(t.text)}`);
    return e;
  }

  private or(depth: number): FilterExpr {
    const items = [this.and(depth)];
    while (this.keyword('or')) { this.next(); items.push(this.and(depth)); }
    return items.length === 1 ? items[0]! : { kind: 'or', items };
  }

  private and(depth: number): FilterExpr {
    const items = [this.unary(depth)];
    while (this.keyword('and')) { this.next(); items.push(this.unary(depth)); }
    return items.length === 1 ? items[0]! : { kind: 'and', items };
  }

  private unary(depth: number): FilterExpr {
    const t = this.peek();
    if (depth > FILTER_LIMITS.maxDepth) fail(t.position, `nested deeper than ${FILTER_LIMITS.maxDepth}`);
    if (this.keyword('not')) { this.next(); return { kind: 'not', expr: this.unary(depth + 1) }; }
    if (t.kind === '(') {
      this.next();
      const e = this.or(depth + 1);
      const close = this.next();
      if (close.kind !== ')') fail(close.position, 'expected )');
      return e;
    }
    return this.atom();
  }

  private atom(): FilterExpr {
    const t = this.next();
    if (t.kind !== 'word') fail(t.position, t.kind === 'end' ? 'expected a field' : `expected a field, got ${JSON.stringify(t.text)}`);
    if (++this.atoms > FILTER_LIMITS.maxAtoms) fail(t.position, `more than ${FILTER_LIMITS.maxAtoms} comparisons`);
    const colon = t.text.indexOf(':');
    const name = (colon < 0 ? t.text : t.text.slice(0, colon)).toLowerCase();
    let type: FilterFieldType | undefined;
    let key: string | undefined;
    if (colon >= 0) {
      type = KEYED[name];
      key = t.text.slice(colon + 1);
      if (type === undefined) fail(t.position, `unknown field ${JSON.stringify(name)} (keyed fields: ${Object.keys(KEYED).join(', ')})`);
    } else {
      type = FIELDS[name];
      if (type === undefined) fail(t.position, `unknown field ${JSON.stringify(t.text)}`);
    }
    if (key !== undefined) {
      // A key that needs other characters is quoted right after the colon: fact:"a b".
      if (key === '' && this.peek().kind === 'string' && this.peek().position === t.position + t.text.length) key = this.next().text;
      if (key === '' || key.length > FILTER_LIMITS.maxKeyLength) fail(t.position + colon + 1, `${name}: needs a name of 1 to ${FILTER_LIMITS.maxKeyLength} characters`);
    }
    const opTok = this.peek();
    const isIn = opTok.kind === 'word' && opTok.text.toLowerCase() === 'in';
    if (opTok.kind !== 'op' && !isIn) {
      if (key === undefined) fail(opTok.position, `${t.text} needs an operator and a value`);
      return { kind: 'has', field: name, key, position: t.position };
    }
    this.next();
    if (isIn && type !== 'cidr') fail(opTok.position, 'in applies to ip only');
    const op = (isIn ? '=' : opTok.text) as CompareOp;
    const v = this.next();
    if (v.kind !== 'word' && v.kind !== 'string') fail(v.position, 'expected a value');
    const value = typedValue(type, op, v);
    return { kind: 'compare', field: name, ...(key !== undefined && { key }), op, value, position: t.position };
  }
}

/** Parse a filter expression (ERR_FILTER_SYNTAX with `details.position` when it is not one). */
export function parseFilter(text: string): FilterExpr {
  if (typeof text !== 'string') fail(0, 'must be a string');
  if (text.length > FILTER_LIMITS.maxLength) fail(FILTER_LIMITS.maxLength, `longer than ${FILTER_LIMITS.maxLength} characters`);
  const nul = text.indexOf('\u0000');
  if (nul >= 0) fail(nul, 'NUL character');
  if (text.trim() === '') fail(0, 'empty expression');
  return new Parser(tokenize(text)).parse();
}
