/**
 * The kept counters' trigger functions (migrations 32 and 33) look a node's rows up by index
 * even with a plan their connection made while the table was empty: policy_group_members is
 * analysed empty, a node's compliance row is written often enough for the connection to keep a
 * generic plan of the group hook, the table is then filled without being analysed again, and
 * the next writes must not scan it (pg_stat_user_tables, read once the store's connection has
 * closed and so reported its counts).
 * Skipped with the reason when PostgreSQL is unreachable (and failed instead when CI=true).
 */
import t from 'tap';
import { inventory } from './store-suite.js';
import { postgresBackend } from './backends.js';
import { PG_URL, postgresOrSkipFile } from './pg.js';
import { openRegistry } from '@capstan/server/registry/open';
import { setAcceptance } from '../helpers/node-changes.js';
import { BASE_S, COMPONENTS, iso } from '../helpers/kept-walk.js';
import { waitFor } from '../helpers/programs.js';

const NODES = Array.from({ length: 8 }, (_, i) => `plan-${i}`);
const FILLER = 20_000;

if (await postgresOrSkipFile(t)) {
  t.test('a plan made on an empty table still looks rows up by index', async (t) => {
    const db = await postgresBackend().fresh(t);
    // One connection (the plans the triggers keep are that connection's), and no ANALYZE of its own.
    const store = await openRegistry({ databaseUrl: PG_URL, schema: db.schema!, poolSize: 1, analyze: null });
    t.teardown(() => store.close());
    for (const id of NODES) {
      await store.upsertFromInventory(inventory(id, { received_at: iso(BASE_S) }));
      await setAcceptance(store, id, 'accepted', iso(BASE_S));
    }
    await db.exec('ANALYZE policy_group_members');
    const items = COMPONENTS.map(([rule_id, directive_id, component]) => ({ rule_id, directive_id, component }));
    // Each node's compliance row written three times: the group hooks run 16 times or more, past
    // the five custom plans after which a connection keeps the generic one.
    for (const [k, config] of ['cfg-a', 'cfg-b', 'cfg-c'].entries()) {
      for (const id of NODES) await store.setExpectations(id, config, items, iso(BASE_S + 60 * (k + 1)));
    }
    // Filled without an ANALYZE: the statistics still say empty; no plan is made again.
    await db.exec(`INSERT INTO policy_group_members (group_id, node_id) SELECT 'filler', 'filler-' || i FROM generate_series(1, ${FILLER}) AS i`);
    for (const id of NODES) await store.setExpectations(id, 'cfg-d', items, iso(BASE_S + 600));
    // A backend reports its counts at exit: the store closed, they are all in (read until settled).
    await store.close();
    const scans = async () => (await db.rows!(`SELECT seq_scan, coalesce(idx_scan, 0) AS idx_scan FROM pg_stat_user_tables
      WHERE schemaname = current_schema() AND relname = 'policy_group_members'`))[0] as { seq_scan: string; idx_scan: string };
    let last = '';
    const counts = await waitFor(async () => {
      const now = await scans();
      const same = JSON.stringify(now) === last && Number(now.idx_scan) + Number(now.seq_scan) > 0;
      last = JSON.stringify(now);
      if (!same) await new Promise((resolve) => setTimeout(resolve, 300));
      return same ? now : undefined;
    }, 'the closed connection to report its counts', 15_000);
    t.comment(`policy_group_members over the test: ${counts.seq_scan} sequential scans, ${counts.idx_scan} by index`);
    // A kept generic plan made on the empty table scans once for each node written after the
    // fill (seen: 10 scans, 24 lookups); a couple of scans come from elsewhere (seen: 2, 32).
    t.ok(Number(counts.seq_scan) < NODES.length, 'the nodes written after the fill were not found by scanning the table');
    t.ok(Number(counts.idx_scan) >= 3 * NODES.length, 'each write looked its node up by index');
  });
}
