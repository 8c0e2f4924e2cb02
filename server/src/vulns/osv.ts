/**
 * One OSV advisory (https://ossf.github.io/osv-schema/), validated and reduced to what matching,
 * severity and incremental updates need. Bad input is ERR_OSV_INVALID naming the field; the
 * caller skips that entry and goes on (feed.ts). Fields the schema makes optional stay optional;
 * unknown fields are ignored, as the schema asks of readers of older versions.
 *
 * What is checked beyond types, because matching relies on it: each event has exactly one of
 * introduced, fixed, last_affected and limit; a range has at least one `introduced` and not both
 * `fixed` and `last_affected`; `modified` (and `published`, `withdrawn`) are RFC 3339 times.
 */
import { capstanError } from '@capstan/shared/errors';
import { cvssScore, type CvssScore, type Rating } from './cvss.js';
import { parseEcosystem, type Ecosystem } from './ecosystems.js';

export interface OsvEvent {
  introduced?: string;
  fixed?: string;
  last_affected?: string;
  limit?: string;
}

export interface OsvRange {
  type: 'ECOSYSTEM' | 'SEMVER' | 'GIT';
  events: OsvEvent[];
}

/** One severity as the feed gave it, with its score when Capstan computes one. */
export interface Severity {
  type: string;
  /** The vector (CVSS types) or the word (`Ubuntu`: negligible, low, medium, high, critical). */
  value: string;
  cvss?: CvssScore;
  rating: Rating | null;
  /** Why no score could be had (ERR_CVSS_VECTOR). */
  error?: string;
}

export interface Affected {
  /** As written in the feed, e.g. `Debian:12`, `Ubuntu:22.04:LTS`. */
  ecosystem: string;
  /** Parsed; null for an ecosystem Capstan does not match (kept, never indexed). */
  eco: Ecosystem | null;
  name: string;
  purl?: string;
  ranges: OsvRange[];
  versions: string[];
  severity: Severity[];
  ecosystem_specific?: unknown;
  database_specific?: unknown;
}

export interface Advisory {
  id: string;
  /** As written; `modifiedKey` orders them. */
  modified: string;
  published?: string;
  withdrawn?: string;
  aliases: string[];
  /** Schema 1.7's `upstream` and `related`: where ALSA and Alpine entries give the CVE. */
  upstream: string[];
  related: string[];
  summary?: string;
  severity: Severity[];
  affected: Affected[];
  database_specific?: unknown;
}

/** Bounds on one entry's parts (beyond its byte size): each far above what real feeds publish. */
export const OSV_LIMITS = { maxAffected: 10_000, maxRanges: 1_000, maxEvents: 10_000, maxVersions: 200_000, maxIds: 10_000, maxString: 4_096 } as const;

const RFC3339 = /^(\d{4}-\d{2}-\d{2})T(\d{2}:\d{2}:\d{2})(?:\.(\d{1,9}))?(Z|[+-]\d{2}:\d{2})$/i;

/**
 * A string whose order is the instants' order, to the nanosecond (feeds write up to nine
 * fraction digits, more than a JS Date keeps): UTC, nine fraction digits. Null if not RFC 3339.
 */
export function modifiedKey(t: string): string | null {
  const m = RFC3339.exec(t);
  if (!m) return null;
  const ms = Date.parse(`${m[1]}T${m[2]}${m[4]!.toUpperCase()}`);
  if (!Number.isFinite(ms)) return null;
  return `${new Date(ms).toISOString().slice(0, 19)}.${(m[3] ?? '').padEnd(9, '0')}Z`;
}

type Json = Record<string, unknown>;

class Reader {
  constructor(readonly id: string | undefined) {}
  fail(field: string, why: string): never {
    throw capstanError('ERR_OSV_INVALID', `${this.id ? `${this.id}: ` : ''}${field} ${why}`, { details: { id: this.id, field } });
  }
  string(o: Json, k: string, path: string, required = false): string | undefined {
    const v = o[k];
    if (v === undefined || v === null) return required ? this.fail(path, 'is required') : undefined;
    if (typeof v !== 'string') this.fail(path, 'must be a string');
    if (required && v === '') this.fail(path, 'must not be empty');
    if (v.length > OSV_LIMITS.maxString && path !== 'summary') this.fail(path, `is longer than ${OSV_LIMITS.maxString} characters`);
    return v;
  }
  time(o: Json, k: string, required = false): string | undefined {
    const v = this.string(o, k, k, required);
    if (v !== undefined && modifiedKey(v) === null) this.fail(k, 'must be an RFC 3339 time');
    return v;
  }
  array(o: Json, k: string, path: string, max: number): unknown[] {
    const v = o[k];
    if (v === undefined || v === null) return [];
    if (!Array.isArray(v)) this.fail(path, 'must be an array');
    if (v.length > max) this.fail(path, `has more than ${max} items`);
    return v;
  }
  strings(o: Json, k: string, path: string, max: number): string[] {
    return this.array(o, k, path, max).map((s, i) => (typeof s === 'string' && s.length <= OSV_LIMITS.maxString ? s : this.fail(`${path}[${i}]`, 'must be a string')));
  }
  object(v: unknown, path: string): Json {
    if (!v || typeof v !== 'object' || Array.isArray(v)) this.fail(path, 'must be an object');
    return v as Json;
  }
}

const EVENT_KINDS = ['introduced', 'fixed', 'last_affected', 'limit'] as const;

function readSeverity(r: Reader, o: Json, path: string): Severity[] {
  return r.array(o, 'severity', path, 16).map((s, i) => {
    const so = r.object(s, `${path}[${i}]`);
    const type = r.string(so, 'type', `${path}[${i}].type`, true)!;
    const value = r.string(so, 'score', `${path}[${i}].score`, true)!;
    if (type === 'CVSS_V3' || type === 'CVSS_V4') {
      try {
        const cvss = cvssScore(value);
        return { type, value, cvss, rating: cvss.rating };
      } catch (err) {
        return { type, value, rating: null, error: (err as { code?: string }).code ?? 'ERR_CVSS_VECTOR' };
      }
    }
    // Ubuntu's priority words; `negligible` is below low, shown as low.
    const word = type === 'Ubuntu' ? value.toLowerCase() : '';
    const rating = word === 'negligible' ? 'low' : (['low', 'medium', 'high', 'critical'] as const).find((x) => x === word) ?? null;
    return { type, value, rating };
  });
}

function readRange(r: Reader, v: unknown, path: string): OsvRange {
  const o = r.object(v, path);
  const type = r.string(o, 'type', `${path}.type`, true);
  if (type !== 'ECOSYSTEM' && type !== 'SEMVER' && type !== 'GIT') r.fail(`${path}.type`, 'must be ECOSYSTEM, SEMVER or GIT');
  const events = r.array(o, 'events', `${path}.events`, OSV_LIMITS.maxEvents).map((e, i) => {
    const eo = r.object(e, `${path}.events[${i}]`);
    const kinds = EVENT_KINDS.filter((k) => eo[k] !== undefined);
    if (kinds.length !== 1) r.fail(`${path}.events[${i}]`, 'must have exactly one of introduced, fixed, last_affected, limit');
    const value = r.string(eo, kinds[0]!, `${path}.events[${i}].${kinds[0]}`, true)!;
    return { [kinds[0]!]: value } as OsvEvent;
  });
  if (!events.some((e) => e.introduced !== undefined)) r.fail(`${path}.events`, 'has no introduced event');
  if (events.some((e) => e.fixed !== undefined) && events.some((e) => e.last_affected !== undefined)) r.fail(`${path}.events`, 'has both fixed and last_affected');
  return { type: type as OsvRange['type'], events };
}

/** Validate one parsed OSV document; ERR_OSV_INVALID (details.field) when it is not one. */
export function readAdvisory(doc: unknown): Advisory {
  const pre = doc && typeof doc === 'object' && !Array.isArray(doc) ? (doc as Json) : null;
  const r = new Reader(typeof pre?.id === 'string' ? pre.id.slice(0, 200) : undefined);
  const o = r.object(doc, 'document');
  const id = r.string(o, 'id', 'id', true)!;
  if (id.length > 255 || /[\s\u0000-\u001f]/.test(id)) r.fail('id', 'must be at most 255 characters without spaces or controls');
  const affected = r.array(o, 'affected', 'affected', OSV_LIMITS.maxAffected).map((a, i): Affected => {
    const path = `affected[${i}]`;
    const ao = r.object(a, path);
    const pkg = r.object(ao.package, `${path}.package`);
    const ecosystem = r.string(pkg, 'ecosystem', `${path}.package.ecosystem`, true)!;
    const name = r.string(pkg, 'name', `${path}.package.name`, true)!;
    const purl = r.string(pkg, 'purl', `${path}.package.purl`);
    return {
      ecosystem, eco: parseEcosystem(ecosystem), name, ...(purl !== undefined && { purl }),
      ranges: r.array(ao, 'ranges', `${path}.ranges`, OSV_LIMITS.maxRanges).map((x, j) => readRange(r, x, `${path}.ranges[${j}]`)),
      versions: r.strings(ao, 'versions', `${path}.versions`, OSV_LIMITS.maxVersions),
      severity: readSeverity(r, ao, `${path}.severity`),
      ...(ao.ecosystem_specific !== undefined && { ecosystem_specific: ao.ecosystem_specific }),
      ...(ao.database_specific !== undefined && { database_specific: ao.database_specific }),
    };
  });
  const out: Advisory = {
    id,
    modified: r.time(o, 'modified', true)!,
    aliases: r.strings(o, 'aliases', 'aliases', OSV_LIMITS.maxIds),
    upstream: r.strings(o, 'upstream', 'upstream', OSV_LIMITS.maxIds),
    related: r.strings(o, 'related', 'related', OSV_LIMITS.maxIds),
    severity: readSeverity(r, o, 'severity'),
    affected,
  };
  const published = r.time(o, 'published');
  const withdrawn = r.time(o, 'withdrawn');
  const summary = r.string(o, 'summary', 'summary');
  if (published !== undefined) out.published = published;
  if (withdrawn !== undefined) out.withdrawn = withdrawn;
  if (summary !== undefined) out.summary = summary.slice(0, OSV_LIMITS.maxString);
  if (o.database_specific !== undefined) out.database_specific = o.database_specific;
  return out;
}

/** Parse and validate one entry's bytes; bad JSON is ERR_OSV_INVALID too. */
export function parseAdvisory(text: string): Advisory {
  let doc: unknown;
  try {
    doc = JSON.parse(text);
  } catch (err) {
    throw capstanError('ERR_OSV_INVALID', `not JSON: ${(err as Error).message}`, { details: { field: 'json' } });
  }
  return readAdvisory(doc);
}

/** Every CVE id the advisory is known by: its id, aliases, upstream and related ids. */
export function cveIds(a: Advisory): string[] {
  const all = [a.id, ...a.aliases, ...a.upstream, ...a.related].filter((x) => /^CVE-\d{4}-\d{4,}$/.test(x));
  return [...new Set(all)];
}

/** The severity that rates an advisory's package: the affected entry's own, else the advisory's; CVSS v3 before v4, then Ubuntu's word. */
export function pickSeverity(a: Advisory, affected: Affected): Severity | null {
  const list = affected.severity.length ? affected.severity : a.severity;
  const order = ['CVSS_V3', 'CVSS_V4', 'Ubuntu'];
  for (const type of order) {
    const s = list.find((x) => x.type === type && x.rating !== null);
    if (s) return s;
  }
  return null;
}
