/**
 * The lifecycle sweep finds its nodes by index (migration 34) on SQLite: the reachable nodes
 * silent past the missed-runs window, the live ones past the missing window, the purgeable
 * ones past the purge window. Each question used to read the whole nodes table, a minute apart,
 * inside the write transaction the ingest waits for (0.6 s a question at 300,000 nodes). The
 * plans are read with EXPLAIN QUERY PLAN on the SQL the store runs; the answers are checked by
 * the registry suite on both stores.
 */
import { mkdtempSync, rmSync } from 'node:fs';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import Database from 'better-sqlite3';
import t from 'tap';
import { openRegistry } from '@capstan/server/registry/open';
import { NODE_RULES } from '@capstan/server/registry/rules';
import { sweepSql } from '@capstan/server/store/sweep/sqlite';

t.test("the sweep's questions read the nodes past their cut-off by index, not the whole table", async (t) => {
  const dir = mkdtempSync(join(tmpdir(), 'capstan-sweep-plan-'));
  t.teardown(() => rmSync(dir, { recursive: true, force: true }));
  const path = join(dir, 'capstan.db');
  await (await openRegistry({ sqlitePath: path })).close();
  const db = new Database(path, { readonly: true });
  t.teardown(() => db.close());
  const plan = (sql: string) => (db.prepare(`EXPLAIN QUERY PLAN ${sql}`).all('2026-06-01T00:00:00Z', 500) as Array<{ detail: string }>)
    .map((r) => r.detail).join('; ');

  const unreachable = plan(sweepSql.unreachable);
  t.match(unreachable, /SEARCH nodes USING INDEX nodes_reachable_idx \(status=\? AND last_contact_at<\?\)/, `unreachable: ${unreachable}`);
  const missing = plan(sweepSql.missing(NODE_RULES.liveStates));
  t.match(missing, /SEARCH nodes USING INDEX nodes_live_idx \(state=\? AND last_contact_at<\?\)/, `missing: ${missing}`);
  const purge = plan(sweepSql.purge(NODE_RULES.purgeable));
  t.match(purge, /SEARCH nodes USING INDEX nodes_state_changed_idx \(state=\? AND state_changed_at<\?\)/, `purge: ${purge}`);
  for (const [name, p] of [['unreachable', unreachable], ['missing', missing], ['purge', purge]] as const) {
    t.notMatch(p, /SCAN nodes/, `${name}: no read of the whole table`);
  }
});
