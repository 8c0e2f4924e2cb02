/**
 * A node list by ids (the generation's probe of a batch of nodes: `id` and `accepted` filters,
 * listNodeIds) finds the ids' rows by key on SQLite, whatever else the filters say. SQLite plans
 * without statistics and takes an equality on an index's first column for a narrow range: it
 * read every accepted node through nodes_accepted_idx for each 100 ids, so an enrolment wave
 * cost more per node the larger the fleet. The plan is read with EXPLAIN QUERY PLAN on the same
 * SQL the store runs, and the answers are checked on a small fleet. The relays' nodes list
 * walks the accepted nodes by key (acceptedPageSql), checked the same way.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { openRegistry } from '@capstan/server/registry/open';
import { filterWhere, type CheckedFilter } from '@capstan/server/store/nodes/filters/query';
import { acceptedPageSql } from '@capstan/server/store/nodes/records';
import { sqliteDialect } from '@capstan/server/store/nodes/filters/sqlite';
import type { SqliteDb } from '@capstan/server/store/sqlite/db';
import { setAcceptance } from '../helpers/node-changes.js';
import { inventory } from './store-suite.js';

const AT = '2026-06-01T12:00:00.000Z';
const id = (i: number) => `0d5e0000-0000-4000-8000-${String(i).padStart(12, '0')}`;

t.test('ids and acceptance: the ids are found by key, acceptance checked on their rows', async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-ids-plan-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'capstan.db');
  const store = await openRegistry({ sqlitePath: path });
  t.teardown(() => store.close());

  for (let i = 0; i < 40; i++) {
    await store.upsertFromInventory(inventory(id(i), { received_at: AT }));
    if (i % 4 !== 3) await setAcceptance(store, id(i), i % 4 === 2 ? 'refused' : 'accepted', AT);
  }
  const asked = Array.from({ length: 20 }, (_, i) => id(i * 2));
  const found = await store.listNodeIds([{ key: 'id', values: asked }, { key: 'accepted', values: ['accepted'] }]);
  t.same(found.sort(), asked.filter((_, i) => (i * 2) % 4 < 2).sort(), 'the accepted nodes among the ids, and only those');
  const status = (await store.getNode(id(3)))!.status;
  t.same((await store.listNodeIds([{ key: 'id', values: [id(3), id(4), id(7)] }, { key: 'accepted', values: ['pending'] }, { key: 'status', values: [status] }])).sort(),
    [id(3), id(7)], 'several conditions beside the ids');
  t.same((await store.listNodeIds([{ key: 'accepted', values: ['refused'] }])).length, 10, 'acceptance alone still selects');

  const plan = (filters: CheckedFilter[]): string => {
    const values: unknown[] = [];
    const where = filterWhere(filters, sqliteDialect({ now: () => new Date(AT) } as unknown as SqliteDb, values, filters));
    const db = new Database(path, { readonly: true });
    try {
      return (db.prepare(`EXPLAIN QUERY PLAN SELECT n.id FROM nodes n ${where}`).all(...values) as Array<{ detail: string }>).map((r) => r.detail).join('; ');
    } finally {
      db.close();
    }
  };
  const byIds = plan([{ key: 'id', values: asked, exclude: false }, { key: 'accepted', values: ['accepted'], exclude: false }]);
  t.match(byIds, /SEARCH n USING (COVERING )?INDEX sqlite_autoindex_nodes_1 \(id=\?\)/, `found by key: ${byIds}`);
  t.notMatch(byIds, /nodes_accepted_idx/, 'not through the acceptance index');
  const alone = plan([{ key: 'accepted', values: ['accepted'], exclude: false }]);
  t.match(alone, /nodes_accepted_idx/, `acceptance alone keeps its index: ${alone}`);
  const excluded = plan([{ key: 'id', values: asked, exclude: true }, { key: 'accepted', values: ['accepted'], exclude: false }]);
  t.match(excluded, /nodes_accepted_idx/, `ids left out do not drive the search: ${excluded}`);

  // The relays' nodes list walks the accepted nodes by key: each page from the primary key at
  // its `after`, not every accepted node sorted again through the acceptance index.
  const db = new Database(path, { readonly: true });
  try {
    for (const withCertificates of [true, false]) {
      const walk = (db.prepare(`EXPLAIN QUERY PLAN ${acceptedPageSql(true, withCertificates)}`).all('', 10) as Array<{ detail: string }>).map((r) => r.detail).join('; ');
      const what = withCertificates ? 'with certificates' : 'without';
      t.match(walk, /SEARCH n USING INDEX sqlite_autoindex_nodes_1 \(id>\?\)/, `${what}: the accepted nodes' pages by key: ${walk}`);
      t.notMatch(walk, /TEMP B-TREE|nodes_accepted_idx/, `${what}: no sort, no acceptance index`);
      t.equal(/node_certificates|nc\b/.test(walk), withCertificates, `${what}: the certificates ${withCertificates ? 'joined' : 'left out'}`);
    }
  } finally {
    db.close();
  }
});
