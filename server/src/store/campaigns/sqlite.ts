/** Campaigns on SQLite (see types.ts): a save is one conditional update on the version. */
import type { Page } from '../store.js';
import type { SqliteDb } from '../sqlite/db.js';
import { CAMPAIGN_COLUMNS, campaignFromRow, docJson, utc, utcOrNull } from './rows.js';
import { ACTIVE_CAMPAIGN_STATES, type CampaignRecord, type CampaignState, type CampaignStore } from './types.js';

const ACTIVE = ACTIVE_CAMPAIGN_STATES.map((s) => `'${s}'`).join(', ');

export class SqliteCampaignStore implements CampaignStore {
  constructor(private readonly db: SqliteDb) {}

  private one(id: string): CampaignRecord | null {
    const r = this.db.prepare(`SELECT ${CAMPAIGN_COLUMNS} FROM campaigns WHERE id = ?`).get(id) as Record<string, unknown> | undefined;
    return r ? campaignFromRow(r) : null;
  }

  async create(c: CampaignRecord): Promise<CampaignRecord> {
    return this.db.write('create campaign', () => {
      this.db.prepare(`INSERT INTO campaigns (${CAMPAIGN_COLUMNS}) VALUES (?, ?, ?, ?, 1, ?, ?, ?)`)
        .run(c.id, c.name, c.state, docJson(c), utc(c.created_at), utc(c.updated_at), utcOrNull(c.next_at));
      return this.one(c.id)!;
    });
  }

  async get(id: string): Promise<CampaignRecord | null> {
    return this.db.read('get campaign', () => this.one(id));
  }

  async list(page: number, perPage: number, state?: CampaignState): Promise<Page<CampaignRecord>> {
    return this.db.read('list campaigns', () => {
      const where = state ? 'WHERE state = ?' : '';
      const args = state ? [state] : [];
      const total = (this.db.prepare(`SELECT count(*) AS n FROM campaigns ${where}`).get(...args) as { n: number }).n;
      const rows = this.db.prepare(`SELECT ${CAMPAIGN_COLUMNS} FROM campaigns ${where} ORDER BY created_at DESC, id DESC LIMIT ? OFFSET ?`)
        .all(...args, perPage, (page - 1) * perPage) as Array<Record<string, unknown>>;
      return { total, data: rows.map(campaignFromRow) };
    });
  }

  async save(c: CampaignRecord): Promise<CampaignRecord | null> {
    return this.db.write('save campaign', () => {
      const r = this.db.prepare('UPDATE campaigns SET name = ?, state = ?, doc = ?, version = version + 1, updated_at = ?, next_at = ? WHERE id = ? AND version = ?')
        .run(c.name, c.state, docJson(c), utc(c.updated_at), utcOrNull(c.next_at), c.id, c.version);
      return r.changes > 0 ? this.one(c.id) : null;
    });
  }

  async due(now: string, limit: number): Promise<string[]> {
    return this.db.read('due campaigns', () => (this.db.prepare(
      `SELECT id FROM campaigns WHERE state IN (${ACTIVE}) AND next_at IS NOT NULL AND next_at <= ? ORDER BY next_at, id LIMIT ?`,
    ).all(utc(now), limit) as Array<{ id: string }>).map((r) => r.id));
  }
}
