/**
 * Version 36: on PostgreSQL, the drill-down keys of new compliance rows are computed from the
 * rows the statement inserted, not read back from the table.
 *
 * kept_targets_rows_added (migration 28) runs after each statement that inserts rows into
 * node_compliance_directives. It found each new row again in the table by its primary key
 * (one index probe a row, about 4 buffer reads) to make the row's key, though the statement's
 * transition table (`added`) holds each new row whole. A first policy generation at 100,000
 * nodes inserts about 680,000 such rows; in a batch of 24,750 the probes were 90 ms of the
 * statement's 597 ms (EXPLAIN ANALYZE, 20,000 nodes). The directives' keys are now made from
 * `added`, and upserted as before: a key already there (none should be: every key is answered by
 * a row, and a new row had none) is brought up to date rather than failing the transaction. The
 * rules' keys ('') sum all of the node's rows of the rule, so they are still read from the table.
 *
 * A plain INSERT would save the upsert's speculative insertion too (500,000 rows of this table's
 * shape in psql: 4.5–5.0 s upserted, 2.6–4.0 s plain), but would fail the writer's transaction on a
 * key that is there; guarding it with NOT EXISTS let the planner probe the wrong index (the key
 * index, whose node id comes after the share) while the table's statistics were those of an
 * empty one, and loading a 20,000-node fleet took 78 s instead of 12–18 s.
 *
 * SQLite: nothing (its triggers write one key at a time, and batch writers defer them, 29).
 */
import type { Migration } from './index.js';
import { keyShare, keyStates, ruleTargetRows } from './0028_kept_targets.js';

/** Written where the key or its states changed, as migration 28's upsert. */
const UPSERT = `ON CONFLICT (node_id, rule_id, directive_id) DO UPDATE SET share = excluded.share, states = excluded.states
      WHERE (kept_targets.share, kept_targets.states) IS DISTINCT FROM (excluded.share, excluded.states)`;

const postgres = `CREATE OR REPLACE FUNCTION kept_targets_rows_added() RETURNS trigger LANGUAGE plpgsql AS $f$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM added) THEN RETURN NULL; END IF;
  INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states)
    SELECT a.rule_id, a.directive_id, a.node_id, ${keyShare('a', 'k.mode')}, ${keyStates('a', 'k.mode')}
    FROM added a JOIN kept_nodes k ON k.node_id = a.node_id WHERE k.class = 'agent'
    ${UPSERT};
  INSERT INTO kept_targets (rule_id, directive_id, node_id, share, states)
    SELECT * FROM (${ruleTargetRows('(d.node_id, d.rule_id) IN (SELECT DISTINCT node_id, rule_id FROM added)')}) r
    ${UPSERT};
  RETURN NULL;
END $f$;
`;

export const keptTargetsAdded: Migration = { version: 36, name: 'kept_targets_added', sqlite: 'SELECT 1;', postgres };
