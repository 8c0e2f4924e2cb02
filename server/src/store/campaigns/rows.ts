/** Row ↔ record for campaigns, shared by both backends (see types.ts). */
import { isoOf } from '../time.js';
import type { CampaignRecord, CampaignState } from './types.js';

type Row = Record<string, unknown>;

export const CAMPAIGN_COLUMNS = 'id, name, state, doc, version, created_at, updated_at, next_at';

/** What the row's document holds: everything but the columns. */
export function docJson(c: CampaignRecord): string {
  const { id: _i, name: _n, state: _s, version: _v, created_at: _c, updated_at: _u, next_at: _x, ...doc } = c;
  return JSON.stringify(doc);
}

export function campaignFromRow(r: Row): CampaignRecord {
  const doc = (typeof r.doc === 'string' ? JSON.parse(r.doc) : r.doc) as Pick<CampaignRecord, 'message' | 'spec' | 'waves' | 'nodes'>;
  return {
    id: String(r.id),
    name: String(r.name),
    state: r.state as CampaignState,
    message: doc.message ?? null,
    spec: doc.spec,
    waves: doc.waves,
    nodes: doc.nodes,
    created_at: isoOf(r.created_at),
    updated_at: isoOf(r.updated_at),
    next_at: r.next_at === null || r.next_at === undefined ? null : isoOf(r.next_at),
    version: Number(r.version),
  };
}

/** A stored time as RFC 3339 UTC with milliseconds (text order is time order in SQLite). */
export const utc = (s: string) => new Date(s).toISOString();
export const utcOrNull = (s: string | null) => (s === null ? null : utc(s));
