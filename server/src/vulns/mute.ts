/**
 * Muting: an admin's decision that a vulnerability does not need action (mitigated otherwise,
 * not reachable, accepted risk), everywhere or in some groups, for a reason and until a date.
 * A muted finding is kept and marked, never dropped, so the decision stays visible and
 * reversible; once the mute expires the finding counts again with nothing to undo.
 *
 * A mute targets a CVE id (it then covers every advisory known by that CVE: DSA, ALSA, USN…) or
 * one advisory id. It is a pure rule: the caller gives the time and the node's groups.
 */
import { capstanError } from '@capstan/shared/errors';
import type { Finding } from './match.js';

export interface Mute {
  id: string;
  /** A CVE id or an advisory id, as the feed writes it. */
  target: string;
  /** Group ids the mute is limited to; absent or empty means every node. */
  groups?: string[];
  reason: string;
  /** ISO 8601 instant after which the mute no longer applies; null: until removed. */
  expires: string | null;
}

export const MUTE_LIMITS = { maxReason: 1024, maxGroups: 100, maxId: 255 } as const;

/** Validate a mute at the door (API, files); ERR_MUTE_INVALID names the field. */
export function checkMute(v: unknown): Mute {
  const bad = (field: string, why: string): never => { throw capstanError('ERR_MUTE_INVALID', `mute ${field} ${why}`, { details: { field } }); };
  if (!v || typeof v !== 'object' || Array.isArray(v)) return bad('', 'must be an object');
  const o = v as Record<string, unknown>;
  const id = typeof o.id === 'string' && o.id.length > 0 && o.id.length <= MUTE_LIMITS.maxId ? o.id : bad('id', `must be 1 to ${MUTE_LIMITS.maxId} characters`);
  const target = typeof o.target === 'string' && /^[A-Za-z0-9][A-Za-z0-9:._-]{0,254}$/.test(o.target) ? o.target : bad('target', 'must be a CVE or advisory id');
  const reason = typeof o.reason === 'string' && o.reason.trim() !== '' && o.reason.length <= MUTE_LIMITS.maxReason ? o.reason : bad('reason', `is required (at most ${MUTE_LIMITS.maxReason} characters)`);
  let groups: string[] | undefined;
  if (o.groups !== undefined) {
    if (!Array.isArray(o.groups) || o.groups.length > MUTE_LIMITS.maxGroups || !o.groups.every((g) => typeof g === 'string' && g.length > 0 && g.length <= MUTE_LIMITS.maxId)) {
      bad('groups', `must be at most ${MUTE_LIMITS.maxGroups} group ids`);
    }
    groups = o.groups as string[];
  }
  let expires: string | null = null;
  if (o.expires !== undefined && o.expires !== null) {
    const ms = typeof o.expires === 'string' && /^\d{4}-\d{2}-\d{2}(T\d{2}:\d{2}(:\d{2}(\.\d+)?)?(Z|[+-]\d{2}:\d{2}))?$/.test(o.expires) ? Date.parse(o.expires) : NaN;
    if (!Number.isFinite(ms)) bad('expires', 'must be a date (2026-12-31) or an RFC 3339 time');
    expires = new Date(ms).toISOString();
  }
  return { id, target, reason, expires, ...(groups && groups.length > 0 && { groups }) };
}

/** Does the mute apply to this finding, on a node in these groups, at this time? */
export function muteApplies(m: Mute, f: Finding, now: Date, groups: ReadonlySet<string>): boolean {
  if (m.expires !== null && Date.parse(m.expires) <= now.getTime()) return false;
  if (m.target !== f.match.advisory && !f.match.cves.includes(m.target)) return false;
  return !m.groups || m.groups.some((g) => groups.has(g));
}

/**
 * The node's findings with the first applicable mute marked on each (the list and its order
 * unchanged); findings no mute covers come back as they were.
 */
export function applyMutes(findings: readonly Finding[], mutes: readonly Mute[], ctx: { now: Date; groups: Iterable<string> }): Finding[] {
  const groups = new Set(ctx.groups);
  return findings.map((f) => {
    const m = mutes.find((x) => muteApplies(x, f, ctx.now, groups));
    const { muted: _, ...rest } = f;
    return m ? { ...rest, muted: { mute: m.id, reason: m.reason, expires: m.expires } } : rest;
  });
}
