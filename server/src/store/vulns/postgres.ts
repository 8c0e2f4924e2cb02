/** Vulnerabilities on PostgreSQL (see types.ts). */
import type { PostgresDb } from '../postgres/db.js';
import { postgresDialect } from '../nodes/filters/postgres.js';
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

/** `($1, $2), ($3, $4)…` for `rows` rows of `width` values. */
const values = (rows: number, width: number) =>
  Array.from({ length: rows }, (_, i) => `(${Array.from({ length: width }, (_, j) => `$${i * width + j + 1}`).join(', ')})`).join(', ');

export class PostgresVulns implements VulnStore {
  constructor(private readonly db: PostgresDb, private readonly rules: StoreRules) {}

  async advisoryTally(filters: NodeFilter[], now: string): Promise<AdvisoryTally[]> {
    const checked = this.rules.filters.check({ filters });
    const params: unknown[] = [];
    const d = await postgresDialect(this.db, params, checked, this.rules.filters.check, true);
    const unmuted = findingUnmuted(d, new Date(now));
    const sql = tallySql(unmuted, checked.length ? filterConditions(checked, d).join(' AND ') : null);
    return (await this.db.query<Row>('advisory tally', sql, params)).rows.map(tallyFromRow);
  }

  async advisoryVersions(): Promise<Array<{ id: string; modified: string }>> {
    return (await this.db.query<{ id: string; modified: string }>('advisory versions', 'SELECT id, modified FROM vuln_advisories')).rows;
  }

  async putAdvisories(rows: AdvisoryRow[]): Promise<void> {
    await this.db.tx('store advisories', async (c) => {
      for (const part of chunks(rows)) {
        await c.query(`INSERT INTO vuln_advisories (${ADVISORY_COLUMNS}) VALUES ${values(part.length, 7)}
          ON CONFLICT (id) DO UPDATE SET modified = excluded.modified, withdrawn = excluded.withdrawn, summary = excluded.summary, rating = excluded.rating,
          cves = excluded.cves, doc = excluded.doc`, part.flatMap(advisoryParams));
        await c.query('DELETE FROM vuln_advisory_cves WHERE advisory = ANY($1)', [part.map((a) => a.id)]);
        const pairs = part.flatMap((a) => a.cves.map((cve) => [cve, a.id]));
        for (const p of chunks(pairs, 500)) await c.query(`INSERT INTO vuln_advisory_cves (cve, advisory) VALUES ${values(p.length, 2)} ON CONFLICT DO NOTHING`, p.flat());
      }
    });
  }

  async pageAdvisories(after: string, limit: number): Promise<AdvisoryRow[]> {
    return (await this.db.query<Row>('page advisories', `SELECT ${ADVISORY_COLUMNS} FROM vuln_advisories WHERE id > $1 AND withdrawn IS NULL ORDER BY id LIMIT $2`, [after, limit])).rows.map(advisoryFromRow);
  }

  async getAdvisories(ids: string[]): Promise<AdvisoryRow[]> {
    return (await this.db.query<Row>('get advisories', `SELECT ${ADVISORY_COLUMNS} FROM vuln_advisories WHERE id = ANY($1)`, [ids])).rows.map(advisoryFromRow);
  }

  async advisoriesOfCve(cve: string): Promise<string[]> {
    return (await this.db.query<{ advisory: string }>('advisories of a CVE', 'SELECT advisory FROM vuln_advisory_cves WHERE cve = $1 ORDER BY advisory', [cve])).rows.map((r) => r.advisory);
  }

  async replaceEnrichment(kev: KevRow[] | null, epss: EpssRow[] | null): Promise<void> {
    await this.db.tx('store KEV and EPSS', async (c) => {
      if (kev) {
        await c.query('DELETE FROM vuln_kev');
        for (const p of chunks(kev, 500)) {
          await c.query(`INSERT INTO vuln_kev (cve, date_added, due_date, ransomware) VALUES ${values(p.length, 4)} ON CONFLICT (cve) DO NOTHING`,
            p.flatMap((k) => [k.cve, k.date_added, k.due_date, k.ransomware]));
        }
      }
      if (epss) {
        await c.query('DELETE FROM vuln_epss');
        for (const p of chunks(epss, 1000)) {
          await c.query(`INSERT INTO vuln_epss (cve, epss, percentile) VALUES ${values(p.length, 3)} ON CONFLICT (cve) DO NOTHING`, p.flatMap((e) => [e.cve, e.epss, e.percentile]));
        }
      }
    });
  }

  async enrichment(cves: string[]): Promise<{ kev: KevRow[]; epss: EpssRow[] }> {
    const kev = (await this.db.query<KevRow>('read KEV', 'SELECT cve, date_added, due_date, ransomware FROM vuln_kev WHERE cve = ANY($1)', [cves])).rows;
    const epss = (await this.db.query<Row>('read EPSS', 'SELECT cve, epss, percentile FROM vuln_epss WHERE cve = ANY($1)', [cves])).rows
      .map((r) => ({ cve: String(r.cve), epss: Number(r.epss), percentile: Number(r.percentile) }));
    return { kev, epss };
  }

  async putFeedState(f: FeedStateRow): Promise<void> {
    await this.db.query('store feed state', `INSERT INTO vuln_feeds (${FEED_COLUMNS}) VALUES ${values(1, 6)}
      ON CONFLICT (name) DO UPDATE SET source = excluded.source, imported_at = excluded.imported_at, feed_date = excluded.feed_date, report = excluded.report, error = excluded.error`, feedParams(f));
  }

  async feedStates(): Promise<FeedStateRow[]> {
    return (await this.db.query<Row>('feed states', `SELECT ${FEED_COLUMNS} FROM vuln_feeds ORDER BY name`)).rows.map(feedFromRow);
  }

  async replaceNodeFindings(nodeId: string, findings: VulnFindingRow[], names: string[]): Promise<void> {
    await this.db.tx('store node findings', async (c) => {
      await c.query('DELETE FROM vuln_findings WHERE node_id = $1', [nodeId]);
      await c.query('DELETE FROM vuln_node_names WHERE node_id = $1', [nodeId]);
      await this.insertFindings(c, findings);
      const unique = [...new Set(names)];
      for (const p of chunks(unique, 1000)) await c.query(`INSERT INTO vuln_node_names (name, node_id) VALUES ${values(p.length, 2)} ON CONFLICT DO NOTHING`, p.flatMap((n) => [n, nodeId]));
    });
  }

  private async insertFindings(c: { query: (text: string, values: unknown[]) => Promise<unknown> }, findings: VulnFindingRow[]): Promise<void> {
    for (const p of chunks(findings)) {
      await c.query(`INSERT INTO vuln_findings (${FINDING_COLUMNS}) VALUES ${values(p.length, 8)} ON CONFLICT (node_id, advisory, package) DO UPDATE SET
        version = excluded.version, rating = excluded.rating, fixed = excluded.fixed, match = excluded.match, found_at = excluded.found_at`, p.flatMap(findingParams));
    }
  }

  async replaceAdvisoryFindings(advisory: string, nodeIds: string[], findings: VulnFindingRow[]): Promise<void> {
    await this.db.tx('store advisory findings', async (c) => {
      await c.query('DELETE FROM vuln_findings WHERE advisory = $1 AND node_id = ANY($2)', [advisory, nodeIds]);
      await this.insertFindings(c, findings);
    });
  }

  async deleteAdvisoryFindings(advisory: string): Promise<number> {
    return (await this.db.query('drop advisory findings', 'DELETE FROM vuln_findings WHERE advisory = $1', [advisory])).rowCount ?? 0;
  }

  async nodeFindings(nodeId: string): Promise<VulnFindingRow[]> {
    return (await this.db.query<Row>('node findings', `SELECT ${FINDING_COLUMNS} FROM vuln_findings WHERE node_id = $1 ORDER BY advisory, package`, [nodeId])).rows.map(findingFromRow);
  }

  async advisoryFindings(advisories: string[]): Promise<VulnFindingRow[]> {
    return (await this.db.query<Row>('advisory findings', `SELECT ${FINDING_COLUMNS} FROM vuln_findings WHERE advisory = ANY($1) ORDER BY node_id, advisory, package`, [advisories]))
      .rows.map(findingFromRow);
  }

  async nodesWithNames(names: string[]): Promise<string[]> {
    return (await this.db.query<{ node_id: string }>('nodes by package name', 'SELECT DISTINCT node_id FROM vuln_node_names WHERE name = ANY($1) ORDER BY node_id', [names])).rows.map((r) => r.node_id);
  }

  async countByAdvisory(nodeIds?: string[]): Promise<AdvisoryCount[]> {
    const r = await this.db.query<Row>('count by advisory', `SELECT advisory, count(DISTINCT node_id) AS nodes FROM vuln_findings ${nodeIds ? 'WHERE node_id = ANY($1)' : ''}
      GROUP BY advisory ORDER BY advisory`, nodeIds ? [nodeIds] : []);
    return r.rows.map((x) => ({ advisory: String(x.advisory), nodes: Number(x.nodes) }));
  }

  async findingSummary(nodeIds?: string[]): Promise<Array<{ node_id: string; advisory: string; rating: string | null; cves: string[] }>> {
    const r = await this.db.query<Row>('finding summary', `SELECT DISTINCT f.node_id, f.advisory, f.rating, a.cves FROM vuln_findings f JOIN vuln_advisories a ON a.id = f.advisory
      ${nodeIds ? 'WHERE f.node_id = ANY($1)' : ''} ORDER BY f.node_id, f.advisory`, nodeIds ? [nodeIds] : []);
    return r.rows.map((x) => ({ node_id: String(x.node_id), advisory: String(x.advisory), rating: (x.rating as string | null) ?? null, cves: JSON.parse(String(x.cves)) as string[] }));
  }

  async listMutes(): Promise<MuteRow[]> {
    return (await this.db.query<Row>('list mutes', `SELECT ${MUTE_COLUMNS} FROM vuln_mutes ORDER BY id`)).rows.map(muteFromRow);
  }

  async insertMute(m: MuteRow): Promise<boolean> {
    return ((await this.db.query('insert mute', `INSERT INTO vuln_mutes (${MUTE_COLUMNS}) VALUES ${values(1, 7)} ON CONFLICT (id) DO NOTHING`, muteParams(m))).rowCount ?? 0) > 0;
  }

  async deleteMute(id: string): Promise<boolean> {
    return ((await this.db.query('delete mute', 'DELETE FROM vuln_mutes WHERE id = $1', [id])).rowCount ?? 0) > 0;
  }
}
