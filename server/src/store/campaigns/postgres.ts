/** Campaigns on PostgreSQL (see types.ts): a save is one conditional update on the version. */
import type { Page } from '../store.js';
import type { PostgresDb } from '../postgres/db.js';
import { CAMPAIGN_COLUMNS, campaignFromRow, docJson, utc, utcOrNull } from './rows.js';
import { ACTIVE_CAMPAIGN_STATES, type CampaignRecord, type CampaignState, type CampaignStore } from './types.js';

export class PostgresCampaignStore implements CampaignStore {
  constructor(private readonly db: PostgresDb) {}

  async create(c: CampaignRecord): Promise<CampaignRecord> {
    return this.db.tx('create campaign', async (q) => {
      const r = await q.query(`INSERT INTO campaigns (${CAMPAIGN_COLUMNS}) VALUES ($1, $2, $3, $4, 1, $5, $6, $7) RETURNING ${CAMPAIGN_COLUMNS}`,
        [c.id, c.name, c.state, docJson(c), utc(c.created_at), utc(c.updated_at), utcOrNull(c.next_at)]);
      return campaignFromRow(r.rows[0]!);
    });
  }

  async get(id: string): Promise<CampaignRecord | null> {
    return this.db.read('get campaign', async (q) => {
      const r = await q.query(`SELECT ${CAMPAIGN_COLUMNS} FROM campaigns WHERE id = $1`, [id]);
      return r.rows[0] ? campaignFromRow(r.rows[0]) : null;
    });
  }

  async list(page: number, perPage: number, state?: CampaignState): Promise<Page<CampaignRecord>> {
    return this.db.read('list campaigns', async (q) => {
      const where = state ? 'WHERE state = $1' : '';
      const args: unknown[] = state ? [state] : [];
      const total = Number((await q.query<{ n: string }>(`SELECT count(*) AS n FROM campaigns ${where}`, args)).rows[0]!.n);
      const rows = await q.query(`SELECT ${CAMPAIGN_COLUMNS} FROM campaigns ${where} ORDER BY created_at DESC, id DESC LIMIT $${args.length + 1} OFFSET $${args.length + 2}`,
        [...args, perPage, (page - 1) * perPage]);
      return { total, data: rows.rows.map(campaignFromRow) };
    });
  }

  async save(c: CampaignRecord): Promise<CampaignRecord | null> {
    return this.db.tx('save campaign', async (q) => {
      const r = await q.query(`UPDATE campaigns SET name = $1, state = $2, doc = $3, version = version + 1, updated_at = $4, next_at = $5
        WHERE id = $6 AND version = $7 RETURNING ${CAMPAIGN_COLUMNS}`,
      [c.name, c.state, docJson(c), utc(c.updated_at), utcOrNull(c.next_at), c.id, c.version]);
      return r.rows[0] ? campaignFromRow(r.rows[0]) : null;
    });
  }

  async due(now: string, limit: number): Promise<string[]> {
    return this.db.read('due campaigns', async (q) => (await q.query<{ id: string }>(
      'SELECT id FROM campaigns WHERE state = ANY($1) AND next_at IS NOT NULL AND next_at <= $2 ORDER BY next_at, id LIMIT $3',
      [ACTIVE_CAMPAIGN_STATES, utc(now), limit],
    )).rows.map((r) => r.id));
  }
}
