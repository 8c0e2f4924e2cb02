/** What both backends share for policy objects and bundles: the input checks before writing, the row decoder. */
import { capstanError } from '@capstan/shared/errors';
import type { RowCodec } from '../row-codec.js';
import type { ExpectedComponent } from '../compliance/types.js';
import { checkConfigId, checkExpectations, type CheckedExpectations } from '../input.js';
import { toUtcIso } from '../time.js';
import type { PolicyBundleRecord, PolicyKind, PolicyObjectRecord, PolicyWrite } from './types.js';

const KINDS: ReadonlySet<string> = new Set(['directive', 'group', 'rule', 'technique', 'property']);

export function checkPolicyKey(kind: PolicyKind, id: string): void {
  if (!KINDS.has(kind)) throw capstanError('ERR_BAD_REQUEST', `unknown policy object kind ${String(kind)}`);
  if (typeof id !== 'string' || id.length === 0 || id.includes('\u0000')) throw capstanError('ERR_BAD_REQUEST', 'policy object id must be a non-empty string without NUL');
}

/** The JSON text of a body; a NUL anywhere would be refused by PostgreSQL's jsonb. */
export function policyBodyJson(body: Record<string, unknown>): string {
  if (!body || typeof body !== 'object' || Array.isArray(body)) throw capstanError('ERR_BAD_REQUEST', 'policy object body must be an object');
  const text = JSON.stringify(body);
  if (text.includes('\\u0000')) throw capstanError('ERR_BAD_REQUEST', 'policy object must not contain NUL characters');
  return text;
}

/** String.prototype.isWellFormed (ES2024, in Node 20): no UTF-16 surrogate without its pair. */
const wellFormed = (s: string) => (s as string & { isWellFormed(): boolean }).isWellFormed();

export function checkBundleRecord(b: PolicyBundleRecord): void {
  for (const f of ['node_id', 'config_id', 'generated_at', 'bundle'] as const) {
    if (typeof b[f] !== 'string' || b[f].length === 0 || b[f].includes('\u0000')) throw capstanError('ERR_BAD_REQUEST', `bundle ${f} must be a non-empty string without NUL`);
  }
  // A lone surrogate has no UTF-8 form: SQLite would store U+FFFD in its place and PostgreSQL
  // refuse the batch, so both refuse it here (a generated bundle escapes it: JSON.stringify).
  if (!wellFormed(b.bundle)) throw capstanError('ERR_BAD_REQUEST', 'bundle must be well-formed text (a UTF-16 surrogate without its pair)');
}

export function policyFromRow(r: Record<string, unknown>, codec: RowCodec): PolicyObjectRecord {
  return { kind: r.kind as PolicyKind, id: r.id as string, body: codec.json(r.body) as Record<string, unknown>, updated_at: codec.time(r.updated_at)! };
}

/** A generation's write checked, as both stores' putPolicies take it. */
export interface CheckedPolicyWrite {
  bundle: PolicyBundleRecord;
  /** generated_at as stored (UTC ISO). */
  when: string;
  expected: CheckedExpectations;
  expectationsOnly: boolean;
}

/**
 * The input checks of putPolicies, for a whole generation's batch. Its nodes share a handful of
 * expectation lists (templated ones, each with its config id) and one generation time: each list
 * is checked once, each config id and time once per item or once per value.
 */
export function checkPolicyWrites(items: readonly PolicyWrite[]): CheckedPolicyWrite[] {
  const memo = new Map<ExpectedComponent[], CheckedExpectations>();
  const times = new Map<string, string>();
  return items.map((it) => {
    checkBundleRecord(it.bundle);
    let expected = memo.get(it.expected);
    if (!expected) memo.set(it.expected, (expected = checkExpectations(it.bundle.config_id, it.expected)));
    else checkConfigId(it.bundle.config_id);
    let when = times.get(it.bundle.generated_at);
    if (when === undefined) times.set(it.bundle.generated_at, (when = toUtcIso(it.bundle.generated_at, 'generated_at')));
    return { bundle: it.bundle, when, expected, expectationsOnly: it.expectationsOnly === true };
  });
}
