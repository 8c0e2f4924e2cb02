/**
 * Checks and conversions of what callers hand the store, done once for both backends before
 * any SQL runs. Bad input gets a permanent ERR_BAD_REQUEST here; letting the database refuse it
 * would give each backend its own answer (Postgres refuses U+0000 in text, SQLite stores it).
 */
import { createHash } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';
import type { ChangeInput, ExpectedComponent, NodeCreate, NodePatch, NodeUpsertFromInventory, RunInsert } from './store.js';
import { packOutcomes } from './runs/outcomes.js';
import { toUtcIso } from './time.js';

/**
 * Refuse U+0000 anywhere in `value`: its strings, and the keys and items of its objects, arrays
 * and maps, however deep (Buffers, dates and functions are not text). PostgreSQL cannot store it
 * in text, and SQLite can: refused here, it is refused alike by both. `path` names the value in
 * the error; the fields of an object are named by their path from it.
 */
export function refuseNul(value: unknown, path = ''): void {
  const at = nulAt(value, 0);
  if (at === null) return;
  // The path is spelled only for the error: a clean value of 100,000 entries builds none.
  const name = at.reduceRight((p, k) => (p ? `${p}.${k}` : k), path);
  throw capstanError('ERR_BAD_REQUEST', `${name || 'a value'} contains a NUL character`);
}

/**
 * Where `value` holds U+0000: null when nowhere, else the keys leading to it, innermost first (a
 * key holding it names the value it is a key of).
 */
function nulAt(value: unknown, depth: number): string[] | null {
  if (typeof value === 'string') return value.includes('\u0000') ? [] : null;
  if (value === null || typeof value !== 'object' || depth >= MAX_DEPTH) return null;
  if (Array.isArray(value)) {
    for (let i = 0; i < value.length; i++) {
      const at = nulAt(value[i], depth + 1);
      if (at) return (at.push(String(i)), at);
    }
    return null;
  }
  const entries = value instanceof Map ? value.entries() : isPlain(value) ? Object.entries(value) : [];
  for (const [k, v] of entries) {
    if (nulAt(k, depth + 1)) return [];
    const at = nulAt(v, depth + 1);
    if (at) return (at.push(String(k)), at);
  }
  return null;
}

/** Deeper than this, a value is not what a caller hands the store; the database has the last word. */
const MAX_DEPTH = 32;

const isPlain = (v: object) => {
  const proto = Object.getPrototypeOf(v) as unknown;
  return proto === Object.prototype || proto === null;
};

/** Paging values come from query strings; reject nonsense instead of computing negative offsets. */
export function checkPaging(page: number, perPage: number): { limit: number; offset: number } {
  if (!Number.isSafeInteger(page) || page < 1) throw capstanError('ERR_BAD_REQUEST', 'page must be an integer ≥ 1');
  if (!Number.isSafeInteger(perPage) || perPage < 1) throw capstanError('ERR_BAD_REQUEST', 'per_page must be an integer ≥ 1');
  return { limit: perPage, offset: (page - 1) * perPage };
}

/**
 * Serialise a document for a JSON column; a value JSON cannot carry is bad input, not a store
 * failure. `nul: false` for columns that are jsonb in Postgres, which refuses an escaped
 * \u0000 (one preceded by an even number of backslashes, i.e. not a literal "\\u0000").
 */
export function toJson(value: unknown, field: string, opts: { nul?: boolean } = {}): string {
  let text: string | undefined;
  try {
    text = JSON.stringify(value ?? null);
  } catch (err) {
    throw capstanError('ERR_BAD_REQUEST', `${field} is not serialisable as JSON`, { cause: err });
  }
  if (opts.nul === false && text !== undefined && /(^|[^\\])(\\\\)*\\u0000/.test(text)) {
    throw capstanError('ERR_BAD_REQUEST', `${field} contains a NUL character`);
  }
  return text ?? 'null';
}

/** An inventory ready to write: its time normalised, its document serialised. */
export function checkInventory(inv: NodeUpsertFromInventory): { receivedAt: string; document: string } {
  const { inventory: _doc, auto_accept: _rule, ...fields } = inv;
  refuseNul(fields);
  // The document may carry \u0000 (json in Postgres, text in SQLite both keep it as sent).
  return { receivedAt: toUtcIso(inv.received_at, 'received_at'), document: toJson(inv.inventory, 'inventory') };
}

/** A run ready to write: times normalised, summaries serialised (outcomes also packed, runs/outcomes.ts). */
export function checkRun(run: RunInsert): { startedUtc: string; receivedAt: string; counts: string; packed: Buffer; changes: ChangeInput[] } {
  const { log_compressed: _log, log_text: _t, counts: _c, outcomes: _o, outcomes_packed: _p, outcomes_json: _j, changes: _ch, findings: _f, against: _a, ...fields } = run;
  refuseNul(fields);
  // Postgres keeps it in an int4; no run comes near that many reports.
  if (!Number.isInteger(run.report_count) || run.report_count < 0 || run.report_count > 0x7fffffff) {
    throw capstanError('ERR_BAD_REQUEST', 'report_count must be an integer in 0..2^31-1');
  }
  if (run.log_text !== undefined ? !Buffer.isBuffer(run.log_text) : !Buffer.isBuffer(run.log_compressed)) {
    throw capstanError('ERR_BAD_REQUEST', 'a run needs log_text or log_compressed as a Buffer');
  }
  if (run.outcomes_packed !== undefined && !Buffer.isBuffer(run.outcomes_packed)) {
    throw capstanError('ERR_BAD_REQUEST', 'outcomes_packed must be a Buffer');
  }
  if (run.outcomes_json !== undefined && !Buffer.isBuffer(run.outcomes_json)) {
    throw capstanError('ERR_BAD_REQUEST', 'outcomes_json must be a Buffer');
  }
  if (run.findings !== undefined && !Array.isArray(run.findings)) throw capstanError('ERR_BAD_REQUEST', 'findings must be an array');
  if (run.outcomes === undefined && run.outcomes_json === undefined) {
    throw capstanError('ERR_BAD_REQUEST', 'a run needs its outcomes, or outcomes_json');
  }
  const a = run.against;
  if (a !== undefined && (!Number.isSafeInteger(a.base_id) || !Buffer.isBuffer(a.log) || !Buffer.isBuffer(a.outcomes))) {
    throw capstanError('ERR_BAD_REQUEST', 'against must be { base_id: integer, log: Buffer, outcomes: Buffer }');
  }
  return {
    startedUtc: toUtcIso(run.started_at, 'started_at'),
    receivedAt: toUtcIso(run.received_at, 'received_at'),
    counts: toJson(run.counts, 'counts', { nul: false }),
    // Packed, outcomes no longer go into a jsonb column: a NUL in them is stored as sent.
    packed: run.outcomes_packed ?? packOutcomes(run.outcomes_json ?? toJson(run.outcomes, 'outcomes')),
    changes: (run.changes ?? []).map((c) => checkChange(c, run.started_at)),
  };
}

/** A keep-last duration in seconds (policy groups' compliance expiration); undefined: leave it as stored. */
export function checkKeepLast(v: number | undefined): number | undefined {
  if (v === undefined) return undefined;
  if (!Number.isSafeInteger(v) || v < 0 || v > 0x7fffffff) throw capstanError('ERR_BAD_REQUEST', 'keep_last_s must be an integer in 0..2^31-1');
  return v;
}

/** What a run log says is what it says: a NUL (lossy UTF-8) becomes U+FFFD instead of refusing the run. */
const noNul = (v: unknown) => (typeof v === 'string' ? v.replace(/\u0000/g, '\ufffd') : '');

/** A change ready to write: text fields without NUL, its time in UTC (the run's start when unreadable). */
function checkChange(c: ChangeInput, runStart: string): ChangeInput {
  let at: string;
  try {
    at = toUtcIso(c.at, 'at');
  } catch {
    at = toUtcIso(runStart, 'started_at');
  }
  return {
    rule_id: noNul(c.rule_id), directive_id: noNul(c.directive_id), component: noNul(c.component), key_value: noNul(c.key_value),
    event_type: noNul(c.event_type), message: noNul(c.message), at,
    diff: c.diff === null || c.diff === undefined ? null : noNul(c.diff), diff_truncated: c.diff_truncated === true,
  };
}

// Limits on what an admin or a provider may attach to a node (explicit, as every input limit).
export const MAX_TAGS = 64;
export const MAX_GROUPS = 64;
export const MAX_EXPECTED_COMPONENTS = 10_000;
const TAG_KEY = /^[^=\u0000-\u001f\u007f]{1,128}$/;
const NO_CONTROL = /^[^\u0000-\u001f\u007f]*$/;

function text(value: unknown, field: string, max: number, opts: { empty?: boolean } = {}): string {
  if (typeof value !== 'string') throw capstanError('ERR_BAD_REQUEST', `${field} must be a string`);
  if (value.length > max) throw capstanError('ERR_BAD_REQUEST', `${field} is longer than ${max}`);
  if (!opts.empty && value.length === 0) throw capstanError('ERR_BAD_REQUEST', `${field} must not be empty`);
  if (!NO_CONTROL.test(value)) throw capstanError('ERR_BAD_REQUEST', `${field} contains a control character`);
  return value;
}

/** Tags: one value per key; keys without `=` (the filter syntax `tag:<key>=<value>` needs that). Sorted by key. */
export function checkTags(tags: unknown): Record<string, string> {
  if (!tags || typeof tags !== 'object' || Array.isArray(tags)) throw capstanError('ERR_BAD_REQUEST', 'tags must be an object of strings');
  const entries = Object.entries(tags as Record<string, unknown>);
  if (entries.length > MAX_TAGS) throw capstanError('ERR_BAD_REQUEST', `at most ${MAX_TAGS} tags`);
  for (const [k, v] of entries) {
    if (!TAG_KEY.test(k)) throw capstanError('ERR_BAD_REQUEST', 'tag keys must be 1 to 128 characters, without "=" or control characters');
    text(v, `tag ${k}`, 256, { empty: true });
  }
  return Object.fromEntries(entries.sort(([a], [b]) => (a < b ? -1 : a > b ? 1 : 0))) as Record<string, string>;
}

/** Group ids, deduplicated and sorted. */
export function checkGroups(groups: unknown): string[] {
  if (!Array.isArray(groups)) throw capstanError('ERR_BAD_REQUEST', 'groups must be an array of group ids');
  if (groups.length > MAX_GROUPS) throw capstanError('ERR_BAD_REQUEST', `at most ${MAX_GROUPS} groups`);
  return [...new Set(groups.map((g) => text(g, 'group id', 128)))].sort();
}

/** A manual or discovered node, checked alike for both backends. */
export function checkNodeCreate(n: NodeCreate): NodeCreate {
  const out: NodeCreate = { ...n };
  for (const f of ['name', 'address', 'manager', 'region', 'source_id', 'account_id', 'state'] as const) {
    if (n[f] !== undefined && n[f] !== null) text(n[f], f, 255);
  }
  const cloud = [n.source_id, n.region, n.account_id].filter((v) => v !== undefined && v !== null).length;
  if (n.source_id != null && cloud !== 3) {
    throw capstanError('ERR_BAD_REQUEST', 'a cloud identity needs source_id, region and account_id together');
  }
  if (n.account_id != null && n.source_id == null) throw capstanError('ERR_BAD_REQUEST', 'account_id needs a source_id');
  if (n.tags !== undefined) out.tags = checkTags(n.tags);
  if (n.groups !== undefined) out.groups = checkGroups(n.groups);
  checkRelay(n.relay, n.certificate ?? null);
  checkPolicyServer(n.policy_server);
  return out;
}

/**
 * A relay renews its token by a request signed with its node key, checked against the pinned
 * certificate: a relay without one could never get a token.
 */
function checkRelay(relay: unknown, certificate: string | null): void {
  if (relay === undefined) return;
  if (typeof relay !== 'boolean') throw capstanError('ERR_BAD_REQUEST', 'relay must be true or false');
  if (relay && !certificate) throw capstanError('ERR_CERTIFICATE', 'a relay needs its certificate (the relay\'s UID=<node id> certificate, made at its first start)');
}

/** A policy server is named by its node id (null or absent: the root). */
function checkPolicyServer(v: unknown): void {
  if (v === undefined || v === null) return;
  if (typeof v !== 'string' || !/^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/.test(v)) {
    throw capstanError('ERR_BAD_REQUEST', 'policy_server must be the node id of a relay or of the server');
  }
}

export function checkPatch(p: NodePatch): NodePatch {
  const out: NodePatch = { ...p };
  if (p.state !== undefined) text(p.state, 'state', 32);
  if (p.name !== undefined) text(p.name, 'name', 255);
  if (p.address !== undefined && p.address !== null) text(p.address, 'address', 255);
  if (p.region !== undefined && p.region !== null) text(p.region, 'region', 255);
  if (p.tags !== undefined) out.tags = checkTags(p.tags);
  if (p.groups !== undefined) out.groups = checkGroups(p.groups);
  if (p.relay !== undefined && typeof p.relay !== 'boolean') throw capstanError('ERR_BAD_REQUEST', 'relay must be true or false');
  checkPolicyServer(p.policy_server);
  return out;
}

/** A config id as checkExpectations checks it. */
export function checkConfigId(configId: string): void {
  text(configId, 'config_id', 255);
}

/** Expected components of one config: checked, deduplicated, serialised. */
/**
 * Expectations checked: the components (deduplicated, each with its three fields only), their
 * JSON, and the digest that names that list where it is stored once for every node and config
 * expecting it (expectation_lists, migration 30).
 */
export interface CheckedExpectations {
  items: ExpectedComponent[];
  json: string;
  digest: string;
}

/** The name of an expectation list: the SHA-256 of its JSON, base64url. */
export const expectationsDigest = (json: string) => createHash('sha256').update(json).digest('base64url');

export function checkExpectations(configId: string, items: ExpectedComponent[]): CheckedExpectations {
  checkConfigId(configId);
  if (!Array.isArray(items)) throw capstanError('ERR_BAD_REQUEST', 'expectations must be an array');
  if (items.length > MAX_EXPECTED_COMPONENTS) throw capstanError('ERR_BAD_REQUEST', `at most ${MAX_EXPECTED_COMPONENTS} expected components`);
  const seen = new Set<string>();
  const out: ExpectedComponent[] = [];
  for (const it of items) {
    if (!it || typeof it !== 'object') throw capstanError('ERR_BAD_REQUEST', 'an expected component must be an object');
    const e = { rule_id: text(it.rule_id, 'rule_id', 255), directive_id: text(it.directive_id, 'directive_id', 255), component: text(it.component, 'component', 1024, { empty: true }) };
    const k = `${e.rule_id}\u0000${e.directive_id}\u0000${e.component}`;
    if (seen.has(k)) continue;
    seen.add(k);
    out.push(e);
  }
  const json = toJson(out, 'expectations', { nul: false });
  // Frozen: the nodes of a batch sharing the list are judged against it, and the judge keeps the
  // index of a frozen list (shared compute.ts) rather than making one per node.
  return { items: Object.freeze(out) as ExpectedComponent[], json, digest: expectationsDigest(json) };
}
