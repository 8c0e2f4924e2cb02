/**
 * Vulnerabilities at the server: the advisories' index in memory (loaded from the store at
 * start, updated by each import), feeds refreshed on a schedule and on demand, each node matched
 * when its inventory is stored, and after a feed update only the nodes holding a changed
 * advisory's packages (the names each node is looked up by are kept with its findings).
 * Reads (views.ts) apply mutes and join KEV and EPSS.
 */
import { join } from 'node:path';
import { capstanError, isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { Store } from '../store/store.js';
import type { AdvisoryRow, FeedStateRow, MuteRow, VulnFindingRow } from '../store/vulns/types.js';
import type { Mute } from './mute.js';
import { readEpss, readKev } from './enrich.js';
import { parseEcosystem } from './ecosystems.js';
import { importOsvFeed, type ImportReport } from './feed.js';
import { nodesAffectedBy, VulnIndex, type Finding, type NodeInput, type NodePackage, type PackageHolder } from './match.js';
import { cveIds, pickSeverity, type Advisory } from './osv.js';
import type { FeedSource, VulnSettings } from './settings.js';
import { localFeed } from './sources.js';

const RATINGS = ['none', 'low', 'medium', 'high', 'critical'];
/** Advisories written per transaction during an import. */
const WRITE_BATCH = 500;
/** Changed advisories matched one by one (nodesAffectedBy) below this; above, each candidate node is matched whole. */
const PER_ADVISORY = 50;

export interface VulnServiceDeps {
  store: Store;
  log: Logger;
  settings: VulnSettings;
  /** Where downloaded feeds are kept. */
  dataDir: string;
  now?: () => Date;
}

export interface FeedStatus extends FeedStateRow {
  kind: FeedSource['kind'];
  /** The feed's date is older than stale_after, or it was never imported. */
  stale: boolean;
}

export interface RefreshSummary {
  feeds: FeedStatus[];
  changed: number;
  withdrawn: number;
  nodes: number;
}

const noNul = (s: string | undefined): string | null => (s === undefined ? null : s.replaceAll('\u0000', ''));

/** The advisory's highest rating over its affected entries. */
export function advisoryRating(a: Advisory): string | null {
  let best = -1;
  for (const af of a.affected) best = Math.max(best, RATINGS.indexOf(pickSeverity(a, af)?.rating ?? ''));
  return best > 0 ? RATINGS[best]! : null;
}

export function advisoryRow(a: Advisory): AdvisoryRow {
  return { id: a.id, modified: a.modified, withdrawn: a.withdrawn ?? null, summary: noNul(a.summary), rating: advisoryRating(a), cves: cveIds(a), doc: a };
}

/** An advisory as stored (its parsed ecosystems are worked out again). */
export function reviveAdvisory(doc: unknown): Advisory {
  const a = doc as Advisory;
  for (const af of a.affected) af.eco = parseEcosystem(af.ecosystem);
  return a;
}

/** What matching reads of a stored inventory document. */
export function nodeInput(id: string, doc: unknown): NodeInput | null {
  const d = (doc ?? {}) as Record<string, unknown>;
  const os = (d.os ?? {}) as Record<string, unknown>;
  if (typeof os.name !== 'string' || typeof os.version !== 'string') return null;
  const packages: NodePackage[] = [];
  const str = (v: unknown) => (typeof v === 'string' && v !== '' ? v : undefined);
  for (const p of Array.isArray(d.packages) ? d.packages : []) {
    const o = (p ?? {}) as Record<string, unknown>;
    const name = str(o.name);
    const version = str(o.version);
    if (!name || !version) continue;
    const source = str(o.source);
    const sourceVersion = str(o.source_version);
    const epoch = typeof o.epoch === 'number' ? String(o.epoch) : str(o.epoch);
    packages.push({ name, version, ...(source && { source }), ...(sourceVersion && { source_version: sourceVersion }), ...(epoch !== undefined && { epoch }) });
  }
  // Ubuntu Pro: the inventory's own field, or a custom fact (facts.d) an admin sets on such hosts.
  const pro = d.ubuntu_pro === true || ((d.facts ?? {}) as Record<string, unknown>).ubuntu_pro === true;
  return { id, os: { name: os.name.toLowerCase(), version: os.version }, packages, ...(pro && { ubuntu_pro: true }) };
}

export function findingRow(nodeId: string, f: Finding, at: string): VulnFindingRow {
  return { node_id: nodeId, advisory: f.match.advisory, package: f.package, version: f.version, rating: f.match.severity?.rating ?? null, fixed: f.match.fixed, match: f.match, found_at: at };
}

export class VulnService {
  readonly index = new VulnIndex();
  private known = new Map<string, string>();
  private refreshing: Promise<RefreshSummary> | null = null;
  private timer: NodeJS.Timeout | null = null;
  private loaded: Promise<void> | null = null;
  private readonly now: () => Date;

  constructor(readonly deps: VulnServiceDeps) {
    this.now = deps.now ?? (() => new Date());
  }

  get store() {
    return this.deps.store.vulns;
  }

  /** The index from the store (once). */
  load(): Promise<void> {
    this.loaded ??= (async () => {
      for (const v of await this.store.advisoryVersions()) this.known.set(v.id, v.modified);
      for (let after = ''; ;) {
        const page = await this.store.pageAdvisories(after, 1000);
        for (const r of page) this.index.add(reviveAdvisory(r.doc));
        if (page.length < 1000) break;
        after = page[page.length - 1]!.id;
      }
    })();
    return this.loaded;
  }

  /** Refresh every `interval` (0: never by itself); the first refresh starts now. */
  start(): void {
    if (this.deps.settings.intervalMs <= 0 || this.deps.settings.feeds.length === 0) return;
    const run = () => this.refresh().catch((err: unknown) => this.deps.log.warn({ err }, 'vulnerability feed refresh failed'));
    void run();
    this.timer = setInterval(run, this.deps.settings.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    if (this.timer) clearInterval(this.timer);
    await this.refreshing?.catch(() => undefined);
  }

  /** Match one node from its stored inventory and keep its findings (ingest calls this). */
  async matchNode(nodeId: string, doc?: unknown): Promise<number> {
    await this.load();
    const inv = doc === undefined ? (await this.deps.store.getInventory(nodeId))?.inventory : doc;
    const input = inv === undefined ? null : nodeInput(nodeId, inv);
    if (!input) {
      await this.store.replaceNodeFindings(nodeId, [], []);
      return 0;
    }
    const m = this.index.match(input);
    const at = this.now().toISOString();
    const names = new Set<string>();
    for (const p of input.packages) {
      names.add(p.name);
      if (p.source) names.add(p.source);
    }
    await this.store.replaceNodeFindings(nodeId, m.findings.map((f) => findingRow(nodeId, f, at)), [...names]);
    return m.findings.length;
  }

  /** Import every configured feed now; a refresh already running is joined, not doubled. */
  refresh(): Promise<RefreshSummary> {
    this.refreshing ??= this.doRefresh().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  private async doRefresh(): Promise<RefreshSummary> {
    await this.load();
    const changed: Advisory[] = [];
    for (const feed of this.deps.settings.feeds) {
      const prev = (await this.store.feedStates()).find((f) => f.name === feed.name);
      const state: FeedStateRow = { name: feed.name, source: feed.source, imported_at: prev?.imported_at ?? null, feed_date: prev?.feed_date ?? null, report: prev?.report ?? null, error: null };
      try {
        const last = (prev?.report ?? {}) as { etag?: string; http_date?: string };
        const since = prev?.error === null && prev.source === feed.source ? { etag: last.etag ?? null, lastModified: last.http_date ?? null } : undefined;
        const local = await localFeed(feed.name, feed.source, {
          dir: join(this.deps.dataDir, 'vulns'), ...(feed.checksum && { checksum: feed.checksum }), limits: this.deps.settings.fetch, now: this.now(), ...(since && { since }),
        });
        state.feed_date = local.feedDate;
        if (local.notModified) {
          // 304: the copy imported last time is current; nothing to read again.
          state.report = { ...(prev?.report as object), not_modified: true };
        } else {
          state.report = feed.kind === 'osv' ? await this.importOsv(local.path, changed) : await this.importEnrichment(feed.kind, local.path);
          state.report = { ...(state.report as object), ...(local.sha256 && { sha256: local.sha256 }), ...(local.etag && { etag: local.etag }),
            ...(/^https?:/i.test(feed.source) && { http_date: local.feedDate }) };
        }
        state.imported_at = this.now().toISOString();
      } catch (err) {
        // A file the server may not read, a disk that is full: the admin's to fix, said without a stack.
        const sys = (err as NodeJS.ErrnoException).code;
        const known = isCapstanError(err) ? err : typeof sys === 'string' && /^E[A-Z]+$/.test(sys) ? capstanError('ERR_IO', (err as Error).message) : null;
        if (known) this.deps.log.warn({ feed: feed.name, code: known.code }, known.message);
        else this.deps.log.error({ err, feed: feed.name }, 'vulnerability feed import failed');
        state.error = known ? `${known.code}: ${known.message}` : 'ERR_INTERNAL: see the server log';
      }
      await this.store.putFeedState(state);
    }
    const nodes = await this.rematch(changed);
    const withdrawn = changed.filter((a) => a.withdrawn !== undefined).length;
    if (changed.length) this.deps.log.info({ changed: changed.length, withdrawn, nodes }, 'vulnerability feeds imported');
    return { feeds: await this.feedStatus(), changed: changed.length, withdrawn, nodes };
  }

  private async importOsv(path: string, changed: Advisory[]): Promise<ImportReport> {
    let batch: Advisory[] = [];
    const flush = async () => {
      if (!batch.length) return;
      await this.store.putAdvisories(batch.map(advisoryRow));
      for (const a of batch) {
        this.known.set(a.id, a.modified);
        this.index.add(a);
      }
      batch = [];
    };
    const report = await importOsvFeed(path, {
      known: (id) => this.known.get(id),
      limits: this.deps.settings.osv,
      onAdvisory: async (a) => {
        batch.push(a);
        changed.push(a);
        if (batch.length >= WRITE_BATCH) await flush();
      },
    });
    await flush();
    return report;
  }

  private async importEnrichment(kind: 'kev' | 'epss', path: string): Promise<unknown> {
    if (kind === 'kev') {
      const kev = await readKev(path);
      await this.store.replaceEnrichment([...kev.entries].map(([cve, e]) => ({ cve, date_added: e.dateAdded, due_date: e.dueDate, ransomware: e.ransomware })), null);
      return { entries: kev.entries.size, skipped: kev.skipped, catalog_version: kev.catalogVersion, date_released: kev.dateReleased };
    }
    const epss = await readEpss(path);
    await this.store.replaceEnrichment(null, [...epss.scores].map(([cve, s]) => ({ cve, epss: s.epss, percentile: s.percentile })));
    return { rows: epss.scores.size, skipped: epss.skipped, model_version: epss.modelVersion, score_date: epss.scoreDate };
  }

  /**
   * Findings after changed advisories: a withdrawn one's are dropped; a few changed ones are
   * matched against the nodes holding their packages (nodesAffectedBy); many, and each candidate
   * node is matched whole; more than rematch_all_above (a first import), and every node is.
   */
  private async rematch(changed: Advisory[]): Promise<number> {
    if (!changed.length) return 0;
    const byId = new Map(changed.map((a) => [a.id, a]));
    if (byId.size > this.deps.settings.rematchAllAbove) {
      const all = await this.deps.store.listNodeIds([]);
      for (const id of all) await this.matchNode(id);
      return all.length;
    }
    const touched = new Set<string>();
    const perNode = new Set<string>();
    for (const a of byId.values()) {
      if (a.withdrawn !== undefined) {
        await this.store.deleteAdvisoryFindings(a.id);
        continue;
      }
      // The nodes holding its packages now, and those it was found on before (a package it no longer names).
      const holding = await this.store.nodesWithNames([...new Set(a.affected.map((x) => x.name))]);
      const before = (await this.store.advisoryFindings([a.id])).map((f) => f.node_id);
      const nodes = [...new Set([...holding, ...before])].sort();
      nodes.forEach((n) => touched.add(n));
      if (byId.size > PER_ADVISORY) nodes.forEach((n) => perNode.add(n));
      else await this.matchAdvisory(a, nodes);
    }
    for (const id of perNode) await this.matchNode(id);
    return touched.size;
  }

  /** One changed advisory against the nodes given: their findings of it replaced. */
  private async matchAdvisory(a: Advisory, nodeIds: string[]): Promise<void> {
    const names = new Set(a.affected.map((x) => x.name));
    const holders: PackageHolder[] = [];
    for (const id of nodeIds) {
      const input = nodeInput(id, (await this.deps.store.getInventory(id))?.inventory);
      if (!input) continue;
      for (const p of input.packages) {
        if (names.has(p.name) || (p.source !== undefined && names.has(p.source))) {
          holders.push({ node: id, os: input.os, ...(input.ubuntu_pro && { ubuntu_pro: true }), package: p });
        }
      }
    }
    const at = this.now().toISOString();
    const found = nodesAffectedBy(a, holders);
    const rows = [...found.values()].flatMap((m) => m.findings.map((f) => findingRow(m.node, f, at)));
    await this.store.replaceAdvisoryFindings(a.id, nodeIds, rows);
  }

  /** Keep a checked mute (mute.ts checkMute); ERR_MUTE_EXISTS when its id is taken. */
  async addMute(m: Mute, by: string): Promise<MuteRow> {
    const row: MuteRow = { id: m.id, target: m.target, groups: m.groups ?? null, reason: m.reason, expires: m.expires, created_at: this.now().toISOString(), created_by: by };
    if (!(await this.store.insertMute(row))) throw capstanError('ERR_MUTE_EXISTS', `mute ${m.id} exists`);
    return row;
  }

  /** ERR_NOT_FOUND when there is no such mute. */
  async deleteMute(id: string): Promise<void> {
    if (!(await this.store.deleteMute(id))) throw capstanError('ERR_NOT_FOUND', `no mute ${id}`);
  }

  /** Each configured feed's state, with whether it is stale. */
  async feedStatus(): Promise<FeedStatus[]> {
    const stored = new Map((await this.store.feedStates()).map((f) => [f.name, f]));
    const now = this.now().getTime();
    return this.deps.settings.feeds.map((f) => {
      const s = stored.get(f.name) ?? { name: f.name, source: f.source, imported_at: null, feed_date: null, report: null, error: null };
      const stale = s.feed_date === null || now - Date.parse(s.feed_date) > this.deps.settings.staleAfterMs;
      return { ...s, source: f.source, kind: f.kind, stale };
    });
  }
}
