/** Change request rows, the same in both backends (JSON as text). */
import type { ChangeRequestRecord } from './types.js';

export const CR_COLUMNS = 'id, title, description, author, status, created_at, updated_at, changes, base, impact, reviews, deployed_at, deployed_by';

export function crParams(r: ChangeRequestRecord): unknown[] {
  return [r.id, r.title, r.description, r.author, r.status, r.created_at, r.updated_at, JSON.stringify(r.changes), JSON.stringify(r.base),
    JSON.stringify(r.impact), JSON.stringify(r.reviews), r.deployed_at, r.deployed_by];
}

export function crFromRow(row: Record<string, unknown>): ChangeRequestRecord {
  const json = (v: unknown) => JSON.parse(String(v)) as unknown;
  return {
    id: String(row.id), title: String(row.title), description: String(row.description), author: String(row.author),
    status: row.status as ChangeRequestRecord['status'], created_at: String(row.created_at), updated_at: String(row.updated_at),
    changes: json(row.changes), base: json(row.base), impact: json(row.impact), reviews: json(row.reviews) as ChangeRequestRecord['reviews'],
    deployed_at: (row.deployed_at as string | null) ?? null, deployed_by: (row.deployed_by as string | null) ?? null,
  };
}
