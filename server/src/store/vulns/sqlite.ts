/** Vulnerabilities on SQLite (see types.ts). */
import type { SqliteDb } from '../sqlite/db.js';
import { sqliteDialect } from '../nodes/filters/sqlite.js';
import {
  ADVISORY_COLUMNS, advisoryFromRow, advisoryParams, chunks, FEED_COLUMNS, feedFromRow, feedParams, FINDING_COLUMNS, findingFromRow, findingParams,
  MUTE_COLUMNS, muteFromRow, muteParams, tallyFromRow, tallySql,
} from './rows.js';
import type { NodeFilter } from '../store.js';
import type { StoreRules } from '../rules.js';
import { filterConditions } from '../nodes/filters/query.js';
import { findingUnmuted } from '../nodes/filters/vulns.js';
import type { AdvisoryCount, AdvisoryTally, AdvisoryRow, EpssRow, FeedStateRow, KevRow, MuteRow, VulnFindingRow, VulnStore } from './types.js';

type Row = Record<string, unknown>;
const marks = (n: number) => Array.from({ length: n }, () => '?').join(', ');

export class SqliteVulns implements VulnStore {
  constructor(private readonly db: SqliteDb, private readonly rules: StoreRules) {}

  async advisoryTally(filters: NodeFilter[], now: string): Promise<AdvisoryTally[]> {
    const checked = this.rules.filters.check({ filters });
    const values: unknown[] = [];
    const d = sqliteDialect(this.db, values, checked, this.rules.filters.check, true);
    const unmuted = findingUnmuted(d, new Date(now));
    const sql = tallySql(unmuted, checked.length ? filterConditions(checked, d).join(' AND ') : null);
    return this.db.read('advisory tally', () => (this.db.prepare(sql).all(...values) as Row[]).map(tallyFromRow));
  }

  async advisoryVersions(): Promise<Array<{ id: string; modified: string }>> {
    return this.db.read('advisory versions', () => this.db.stmt('SELECT id, modified FROM vuln_advisories').all() as Array<{ id: string; modified: string }>);
  }

  async putAdvisories(rows: AdvisoryRow[]): Promise<void> {
    this.db.write('store advisories', () => {
      const put = this.db.stmt(`INSERT OR REPLACE INTO vuln_advisories (${ADVISORY_COLUMNS}) VALUES (${marks(7)})`);
      const drop = this.db.stmt('DELETE FROM vuln_advisory_cves WHERE advisory = ?');
      const cve = this.db.stmt('INSERT OR IGNORE INTO vuln_advisory_cves (cve, advisory) VALUES (?, ?)');
      for (const a of rows) {
        put.run(...advisoryParams(a));
        drop.run(a.id);
        for (const c of a.cves) cve.run(c, a.id);
      }
    });
  }

  async pageAdvisories(after: string, limit: number): Promise<AdvisoryRow[]> {
    return this.db.read('page advisories', () => (this.db.stmt(`SELECT ${ADVISORY_COLUMNS} FROM vuln_advisories WHERE id > ? AND withdrawn IS NULL ORDER BY id LIMIT ?`)
      .all(after, limit) as Row[]).map(advisoryFromRow));
  }

  async getAdvisories(ids: string[]): Promise<AdvisoryRow[]> {
    return this.db.read('get advisories', () => chunks(ids).flatMap((c) =>
      (this.db.prepare(`SELECT ${ADVISORY_COLUMNS} FROM vuln_advisories WHERE id IN (${marks(c.length)})`).all(...c) as Row[]).map(advisoryFromRow)));
  }

  async advisoriesOfCve(cve: string): Promise<string[]> {
    return this.db.read('advisories of a CVE', () => this.db.stmt('SELECT advisory FROM vuln_advisory_cves WHERE cve = ? ORDER BY advisory').pluck().all(cve) as string[]);
  }

  async replaceEnrichment(kev: KevRow[] | null, epss: EpssRow[] | null): Promise<void> {
    this.db.write('store KEV and EPSS', () => {
      if (kev) {
        this.db.stmt('DELETE FROM vuln_kev').run();
        const put = this.db.stmt('INSERT OR REPLACE INTO vuln_kev (cve, date_added, due_date, ransomware) VALUES (?, ?, ?, ?)');
        for (const k of kev) put.run(k.cve, k.date_added, k.due_date, k.ransomware);
      }
      if (epss) {
        this.db.stmt('DELETE FROM vuln_epss').run();
        const put = this.db.stmt('INSERT OR REPLACE INTO vuln_epss (cve, epss, percentile) VALUES (?, ?, ?)');
        for (const e of epss) put.run(e.cve, e.epss, e.percentile);
      }
    });
  }

  async enrichment(cves: string[]): Promise<{ kev: KevRow[]; epss: EpssRow[] }> {
    return this.db.read('read KEV and EPSS', () => {
      const kev: KevRow[] = [];
      const epss: EpssRow[] = [];
      for (const c of chunks(cves)) {
        kev.push(...(this.db.prepare(`SELECT cve, date_added, due_date, ransomware FROM vuln_kev WHERE cve IN (${marks(c.length)})`).all(...c) as KevRow[]));
        epss.push(...(this.db.prepare(`SELECT cve, epss, percentile FROM vuln_epss WHERE cve IN (${marks(c.length)})`).all(...c) as EpssRow[]));
      }
      return { kev, epss };
    });
  }

  async putFeedState(f: FeedStateRow): Promise<void> {
    this.db.write('store feed state', () => this.db.stmt(`INSERT OR REPLACE INTO vuln_feeds (${FEED_COLUMNS}) VALUES (${marks(6)})`).run(...feedParams(f)));
  }

  async feedStates(): Promise<FeedStateRow[]> {
    return this.db.read('feed states', () => (this.db.stmt(`SELECT ${FEED_COLUMNS} FROM vuln_feeds ORDER BY name`).all() as Row[]).map(feedFromRow));
  }

  async replaceNodeFindings(nodeId: string, findings: VulnFindingRow[], names: string[]): Promise<void> {
    // Every caller waits for it (a node matched after its inventory, or in a feed's refresh):
    // grouped, its commit is shared with the other inventories' of the same turn.
    await this.db.writeGrouped('store node findings', () => {
      this.db.stmt('DELETE FROM vuln_findings WHERE node_id = ?').run(nodeId);
      this.db.stmt('DELETE FROM vuln_node_names WHERE node_id = ?').run(nodeId);
      const put = this.db.stmt(`INSERT OR REPLACE INTO vuln_findings (${FINDING_COLUMNS}) VALUES (${marks(8)})`);
      for (const f of findings) put.run(...findingParams(f));
      const name = this.db.stmt('INSERT OR IGNORE INTO vuln_node_names (name, node_id) VALUES (?, ?)');
      for (const n of names) name.run(n, nodeId);
    });
  }

  async replaceAdvisoryFindings(advisory: string, nodeIds: string[], findings: VulnFindingRow[]): Promise<void> {
    this.db.write('store advisory findings', () => {
      const drop = this.db.stmt('DELETE FROM vuln_findings WHERE advisory = ? AND node_id = ?');
      for (const n of nodeIds) drop.run(advisory, n);
      const put = this.db.stmt(`INSERT OR REPLACE INTO vuln_findings (${FINDING_COLUMNS}) VALUES (${marks(8)})`);
      for (const f of findings) put.run(...findingParams(f));
    });
  }

  async deleteAdvisoryFindings(advisory: string): Promise<number> {
    return this.db.write('drop advisory findings', () => this.db.stmt('DELETE FROM vuln_findings WHERE advisory = ?').run(advisory).changes);
  }

  async nodeFindings(nodeId: string): Promise<VulnFindingRow[]> {
    return this.db.read('node findings', () => (this.db.stmt(`SELECT ${FINDING_COLUMNS} FROM vuln_findings WHERE node_id = ? ORDER BY advisory, package`).all(nodeId) as Row[]).map(findingFromRow));
  }

  async advisoryFindings(advisories: string[]): Promise<VulnFindingRow[]> {
    return this.db.read('advisory findings', () => chunks(advisories).flatMap((c) =>
      (this.db.prepare(`SELECT ${FINDING_COLUMNS} FROM vuln_findings WHERE advisory IN (${marks(c.length)}) ORDER BY node_id, advisory, package`).all(...c) as Row[]).map(findingFromRow)));
  }

  async nodesWithNames(names: string[]): Promise<string[]> {
    return this.db.read('nodes by package name', () => [...new Set(chunks(names).flatMap((c) =>
      this.db.prepare(`SELECT DISTINCT node_id FROM vuln_node_names WHERE name IN (${marks(c.length)})`).pluck().all(...c) as string[]))].sort());
  }

  async countByAdvisory(nodeIds?: string[]): Promise<AdvisoryCount[]> {
    return this.db.read('count by advisory', () => {
      const where = nodeIds ? 'WHERE node_id IN (SELECT value FROM json_each(?))' : '';
      const rows = this.db.prepare(`SELECT advisory, count(DISTINCT node_id) AS nodes FROM vuln_findings ${where} GROUP BY advisory ORDER BY advisory`)
        .all(...(nodeIds ? [JSON.stringify(nodeIds)] : [])) as Row[];
      return rows.map((r) => ({ advisory: String(r.advisory), nodes: Number(r.nodes) }));
    });
  }

  async findingSummary(nodeIds?: string[]): Promise<Array<{ node_id: string; advisory: string; rating: string | null; cves: string[] }>> {
    return this.db.read('finding summary', () => {
      const where = nodeIds ? 'WHERE f.node_id IN (SELECT value FROM json_each(?))' : '';
      const rows = this.db.prepare(`SELECT DISTINCT f.node_id, f.advisory, f.rating, a.cves FROM vuln_findings f JOIN vuln_advisories a ON a.id = f.advisory ${where}
        ORDER BY f.node_id, f.advisory`).all(...(nodeIds ? [JSON.stringify(nodeIds)] : [])) as Row[];
      return rows.map((r) => ({ node_id: String(r.node_id), advisory: String(r.advisory), rating: (r.rating as string | null) ?? null, cves: JSON.parse(String(r.cves)) as string[] }));
    });
  }

  async listMutes(): Promise<MuteRow[]> {
    return this.db.read('list mutes', () => (this.db.stmt(`SELECT ${MUTE_COLUMNS} FROM vuln_mutes ORDER BY id`).all() as Row[]).map(muteFromRow));
  }

  async insertMute(m: MuteRow): Promise<boolean> {
    return this.db.write('insert mute', () => this.db.stmt(`INSERT OR IGNORE INTO vuln_mutes (${MUTE_COLUMNS}) VALUES (${marks(7)})`).run(...muteParams(m)).changes > 0);
  }

  async deleteMute(id: string): Promise<boolean> {
    return this.db.write('delete mute', () => this.db.stmt('DELETE FROM vuln_mutes WHERE id = ?').run(id).changes > 0);
  }
}
