/**
 * Directive conditions: a small matcher language evaluated on the node (Choria-style),
 *   identity('^web') && !has_file('/etc/nologin') || fact('os.name') == 'debian'
 * Functions: identity(re), has_file(p), has_directory(p), has_command(c), fact(path); operators
 * `&&`, `||`, `!`, parentheses, and comparisons `==`, `!=`, `=~` between a function and a literal.
 * Parsed once into a tree (the server validates conditions when a directive is saved; the agent
 * evaluates them); a syntax error is ERR_CONDITION_SYNTAX with the position, never a crash.
 *
 * A technique call's `if` is a result condition: the same language plus repaired(call),
 * error(call), kept(call), ok(call) and skipped(call) over the outcomes of the calls before it.
 * `resultCondition` is the one function that decides it, for the agent that runs the calls and
 * for the server that checks what a run reported.
 */
import { capstanError } from '../errors.js';

export type Literal = string | number | boolean;
export type NodeFn = 'identity' | 'has_file' | 'has_directory' | 'has_command' | 'fact';
export type ResultFn = 'repaired' | 'error' | 'kept' | 'ok' | 'skipped';
export type FnName = NodeFn | ResultFn;

/** What a call came to: success without change, a change, an error, or not run (condition or `if` false). */
export type CallOutcome = 'kept' | 'repaired' | 'error' | 'skipped';

export type Condition =
  | { op: 'and' | 'or'; left: Condition; right: Condition }
  | { op: 'not'; expr: Condition }
  | { op: 'call'; fn: FnName; arg: string }
  | { op: 'cmp'; cmp: '==' | '!=' | '=~'; fn: FnName; arg: string; value: Literal };

export interface ConditionEnv {
  /** Names the node answers to: node id, hostname, FQDN. */
  identities: string[];
  hasFile(path: string): boolean;
  hasDirectory(path: string): boolean;
  hasCommand(name: string): boolean;
  /** A fact by dotted path (e.g. "os.name"), or undefined. */
  fact(path: string): unknown;
}

const NODE_FNS = new Set<string>(['identity', 'has_file', 'has_directory', 'has_command', 'fact']);
export const RESULT_FNS: ReadonlySet<string> = new Set<ResultFn>(['repaired', 'error', 'kept', 'ok', 'skipped']);
const isResultFn = (fn: FnName): fn is ResultFn => RESULT_FNS.has(fn);
export const MAX_CONDITION_LENGTH = 4096;
const MAX_DEPTH = 64;

type Tok = { t: 'op' | 'str' | 'num' | 'ident'; v: string; pos: number };

function syntax(msg: string, pos: number): never {
  throw capstanError('ERR_CONDITION_SYNTAX', `condition: ${msg} at ${pos}`);
}

function tokenize(src: string): Tok[] {
  const out: Tok[] = [];
  let i = 0;
  while (i < src.length) {
    const c = src[i]!;
    if (/\s/.test(c)) {
      i++;
      continue;
    }
    const two = src.slice(i, i + 2);
    if (['&&', '||', '==', '!=', '=~'].includes(two)) {
      out.push({ t: 'op', v: two, pos: i });
      i += 2;
    } else if ('!(),'.includes(c)) {
      out.push({ t: 'op', v: c, pos: i });
      i++;
    } else if (c === "'" || c === '"') {
      let j = i + 1;
      let v = '';
      while (j < src.length && src[j] !== c) {
        if (src[j] === '\\' && j + 1 < src.length) j++;
        v += src[j];
        j++;
      }
      if (j >= src.length) syntax('unterminated string', i);
      out.push({ t: 'str', v, pos: i });
      i = j + 1;
    } else if (/[0-9-]/.test(c)) {
      const m = /^-?\d+(\.\d+)?/.exec(src.slice(i));
      if (!m) syntax(`unexpected '${c}'`, i);
      out.push({ t: 'num', v: m[0], pos: i });
      i += m[0].length;
    } else if (/[a-z_]/i.test(c)) {
      const m = /^[a-z_][a-z0-9_]*/i.exec(src.slice(i))!;
      out.push({ t: 'ident', v: m[0], pos: i });
      i += m[0].length;
    } else {
      syntax(`unexpected '${c}'`, i);
    }
  }
  return out;
}

export interface ParseOptions {
  /** Allow the result functions (a technique call's `if`); elsewhere they are a syntax error. */
  results?: boolean;
}

export function parseCondition(src: string, opts: ParseOptions = {}): Condition {
  if (typeof src !== 'string') throw capstanError('ERR_CONDITION_SYNTAX', 'condition must be a string');
  if (src.length > MAX_CONDITION_LENGTH) throw capstanError('ERR_CONDITION_SYNTAX', `condition longer than ${MAX_CONDITION_LENGTH}`);
  const toks = tokenize(src);
  let p = 0;
  const peek = () => toks[p];
  const at = () => toks[p]?.pos ?? src.length;
  const eat = (v: string) => {
    if (peek()?.t === 'op' && peek()!.v === v) {
      p++;
      return true;
    }
    return false;
  };

  const or = (d: number): Condition => {
    let left = and(d);
    while (eat('||')) left = { op: 'or', left, right: and(d) };
    return left;
  };
  const and = (d: number): Condition => {
    let left = unary(d);
    while (eat('&&')) left = { op: 'and', left, right: unary(d) };
    return left;
  };
  const unary = (d: number): Condition => {
    if (d > MAX_DEPTH) syntax('nested too deeply', at());
    if (eat('!')) return { op: 'not', expr: unary(d + 1) };
    if (eat('(')) {
      const e = or(d + 1);
      if (!eat(')')) syntax("expected ')'", at());
      return e;
    }
    return call();
  };
  const call = (): Condition => {
    const name = peek();
    if (name?.t !== 'ident') syntax('expected a function such as has_file(…)', at());
    if (RESULT_FNS.has(name.v) && !opts.results) syntax(`${name.v}() reads a call's result: only a technique call's if takes it`, name.pos);
    if (!NODE_FNS.has(name.v) && !RESULT_FNS.has(name.v)) syntax(`unknown function ${name.v}`, name.pos);
    p++;
    if (!eat('(')) syntax("expected '('", at());
    const arg = peek();
    if (arg?.t !== 'str') syntax('expected a quoted string argument', at());
    p++;
    if (!eat(')')) syntax("expected ')'", at());
    const fn = name.v as FnName;
    if (fn === 'identity') checkRegex(arg.v, arg.pos);
    const cmpTok = peek();
    if (cmpTok?.t === 'op' && ['==', '!=', '=~'].includes(cmpTok.v)) {
      p++;
      const lit = peek();
      if (!lit || lit.t === 'op') syntax('expected a value to compare with', at());
      p++;
      let value: Literal;
      if (lit.t === 'num') value = Number(lit.v);
      else if (lit.t === 'ident' && (lit.v === 'true' || lit.v === 'false')) value = lit.v === 'true';
      else if (lit.t === 'str') value = lit.v;
      else syntax(`unexpected ${lit.v}`, lit.pos);
      if (cmpTok.v === '=~') checkRegex(String(value), lit.pos);
      return { op: 'cmp', cmp: cmpTok.v as '==' | '!=' | '=~', fn, arg: arg.v, value };
    }
    return { op: 'call', fn, arg: arg.v };
  };

  if (toks.length === 0) syntax('empty condition', 0);
  const tree = or(0);
  if (p !== toks.length) syntax(`unexpected '${toks[p]!.v}'`, toks[p]!.pos);
  return tree;
}

function checkRegex(re: string, pos: number): void {
  try {
    new RegExp(re);
  } catch {
    syntax(`invalid regular expression /${re}/`, pos);
  }
}

/** The outcomes of the calls run so far: a call's id (or a loop's id, for all its items) → its outcome. */
export type Outcomes = ReadonlyMap<string, CallOutcome>;

function resultValue(fn: ResultFn, outcome: CallOutcome | undefined): boolean {
  switch (fn) {
    case 'repaired': return outcome === 'repaired';
    case 'error': return outcome === 'error';
    case 'kept': return outcome === 'kept';
    case 'ok': return outcome === 'kept' || outcome === 'repaired';
    case 'skipped': return outcome === 'skipped';
  }
}

/** A function's value; `unknown` stands for a node function asked without a node to ask. */
const UNKNOWN = Symbol('unknown');

function callValue(fn: FnName, arg: string, env: ConditionEnv | null, outcomes: Outcomes | null): unknown {
  if (isResultFn(fn)) return resultValue(fn, outcomes?.get(arg));
  if (env === null) return UNKNOWN;
  switch (fn) {
    case 'identity': {
      const re = new RegExp(arg);
      return env.identities.some((id) => re.test(id));
    }
    case 'has_file':
      return env.hasFile(arg);
    case 'has_directory':
      return env.hasDirectory(arg);
    case 'has_command':
      return env.hasCommand(arg);
    case 'fact':
      return env.fact(arg);
  }
}

/** Kleene's three-valued logic: null is "depends on what the node would answer". */
function evaluate3(c: Condition, env: ConditionEnv | null, outcomes: Outcomes | null): boolean | null {
  switch (c.op) {
    case 'and': {
      const l = evaluate3(c.left, env, outcomes);
      if (l === false) return false;
      const r = evaluate3(c.right, env, outcomes);
      return r === false ? false : l === null || r === null ? null : true;
    }
    case 'or': {
      const l = evaluate3(c.left, env, outcomes);
      if (l === true) return true;
      const r = evaluate3(c.right, env, outcomes);
      return r === true ? true : l === null || r === null ? null : false;
    }
    case 'not': {
      const v = evaluate3(c.expr, env, outcomes);
      return v === null ? null : !v;
    }
    case 'call': {
      const v = callValue(c.fn, c.arg, env, outcomes);
      if (v === UNKNOWN) return null;
      return v !== undefined && v !== null && v !== false && v !== '' && v !== 0;
    }
    case 'cmp': {
      const v = callValue(c.fn, c.arg, env, outcomes);
      if (v === UNKNOWN) return null;
      if (c.cmp === '=~') return v !== undefined && v !== null && new RegExp(String(c.value)).test(String(v));
      // Facts are often strings holding numbers ("12"): compare as text when the literal is text.
      const same = typeof c.value === 'string' ? String(v) === c.value : v === c.value || String(v) === String(c.value);
      return c.cmp === '==' ? same : !same;
    }
  }
}

/** A node condition on the node: true or false. Result functions, if any, see no outcome. */
export function evaluateCondition(c: Condition, env: ConditionEnv): boolean {
  return evaluate3(c, env, null) === true;
}

/**
 * A technique call's `if` (a result condition) over the outcomes of the calls before it: the one
 * decision the agent acts on and the server checks reports against. With the node's `env` the
 * answer is true or false; without it (the server, which cannot ask the node) a condition that
 * depends on a node function answers null, "either is right".
 */
export function resultCondition(cond: Condition | string, outcomes: Outcomes, env?: ConditionEnv): boolean | null {
  const tree = typeof cond === 'string' ? parseCondition(cond, { results: true }) : cond;
  return evaluate3(tree, env ?? null, outcomes);
}

/** The call ids a condition's result functions name, in order of appearance. */
export function resultRefs(c: Condition): string[] {
  switch (c.op) {
    case 'and':
    case 'or':
      return [...resultRefs(c.left), ...resultRefs(c.right)];
    case 'not':
      return resultRefs(c.expr);
    default:
      return isResultFn(c.fn) ? [c.arg] : [];
  }
}
