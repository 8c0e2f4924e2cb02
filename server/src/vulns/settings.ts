/** `[vulnerabilities]` of server.toml, checked and shaped for the service (docs/vulnerabilities.md, *Settings*). */
import { capstanError } from '@capstan/shared/errors';
import type { ServerConfig } from '../config.js';
import type { FeedLimits } from './feed.js';
import type { FetchLimits } from './sources.js';

export interface FeedSource {
  /** `osv` feeds import advisories; `kev` and `epss` enrich them. */
  kind: 'osv' | 'kev' | 'epss';
  name: string;
  source: string;
  checksum?: string;
}

export interface VulnSettings {
  feeds: FeedSource[];
  intervalMs: number;
  staleAfterMs: number;
  fetch: FetchLimits;
  osv: FeedLimits;
  rematchAllAbove: number;
}

const NAME = /^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$/;

function pairs(list: readonly string[], key: string): Array<[string, string]> {
  return list.map((entry) => {
    const i = entry.indexOf('=');
    const name = i > 0 ? entry.slice(0, i).trim() : '';
    const source = i > 0 ? entry.slice(i + 1).trim() : '';
    if (!NAME.test(name) || source === '') throw capstanError('ERR_CONFIG', `vulnerabilities.${key}: ${JSON.stringify(entry)} must be name=source (a name of letters, digits, . _ -)`);
    if (!/^https?:\/\//i.test(source) && !source.startsWith('/')) throw capstanError('ERR_CONFIG', `vulnerabilities.${key}: ${name}'s source must be an http(s) URL or an absolute path`);
    return [name, source];
  });
}

export function vulnSettings(c: ServerConfig['vulnerabilities']): VulnSettings {
  const checksums = new Map(pairs(c.checksums, 'checksums'));
  const feeds: FeedSource[] = [];
  const seen = new Set<string>();
  const add = (kind: FeedSource['kind'], name: string, source: string) => {
    if (seen.has(name)) throw capstanError('ERR_CONFIG', `vulnerabilities: feed name ${name} is used twice (kev and epss are reserved)`);
    seen.add(name);
    const checksum = checksums.get(name);
    feeds.push({ kind, name, source, ...(checksum !== undefined && { checksum }) });
  };
  for (const [name, source] of pairs(c.feeds, 'feeds')) add('osv', name, source);
  for (const [kind, source] of [['kev', c.kev], ['epss', c.epss]] as const) {
    if (source === '') continue;
    pairs([`${kind}=${source}`], kind);
    add(kind, kind, source);
  }
  for (const name of checksums.keys()) if (!seen.has(name)) throw capstanError('ERR_CONFIG', `vulnerabilities.checksums: ${name} is not a configured feed`);
  return {
    feeds, intervalMs: c.interval, staleAfterMs: c.stale_after, rematchAllAbove: c.rematch_all_above,
    fetch: { maxBytes: c.max_download_size, timeoutMs: c.fetch_timeout, maxChecksumBytes: 1024 * 1024 },
    osv: { maxEntryBytes: c.max_entry_size, maxTotalBytes: c.max_feed_size, maxEntries: c.max_entries, maxDepth: 4 },
  };
}
