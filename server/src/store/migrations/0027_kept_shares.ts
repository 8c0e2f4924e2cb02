/**
 * Version 27: each node's compliance share kept with its kept class and time mode, so that the
 * nodes sorted by compliance (the worst nodes, the node list) are read from an index in order
 * instead of computed and sorted over every node.
 *
 * - kept_nodes.share: the node's compliant share as its kept mode decides it (the node list's
 *   sort key at the kept thresholds): NULL when its run counted no item, 0 when it is applying
 *   or has no answer (mode 1 or 2), else (success + repaired + audit compliant + not
 *   applicable) / every item, computed as the readers compute it (the same double).
 * - kept_nodes.expected: 1 when its counts hold an expected item (any but unexpected): a node
 *   applying or without answer and nothing expected has no item at all for the worst nodes.
 * - kept_nodes_share_idx: every share in order (the node list); kept_nodes_worst_idx: the shares
 *   of the accepted nodes with an agent that the worst nodes list.
 *
 * They move with the row's class, mode and counts, in the transaction that moves those: on
 * SQLite by triggers on kept_nodes (migration 23's node_compliance triggers write its class and
 * mode whenever its counts change), on PostgreSQL in migration 23's node_compliance function,
 * made again with migration 25's group hooks and the share (it writes kept_nodes only when
 * something it keeps changed). A reader at another moment takes the nodes whose thresholds lie
 * between the swept ones and its own afresh, as the kept counters' readers do (kept.ts).
 */
import type { Migration } from './index.js';
import { C, pgComplianceFunction } from './0023_kept_compliance.js';
import { KEPT_LOCK_ARGS } from './0025_kept_groups.js';

const cols = C.join(', ');
const sum = (r: string, states: readonly string[]) => states.map((c) => `${r}.${c}`).join(' + ');
/** The share of row `r` (node_compliance) under mode `mode`. */
export const share = (r: string, mode: string) => `CASE WHEN (${sum(r, C)}) = 0 THEN NULL WHEN ${mode} <> 0 THEN 0.0
    ELSE CAST(${sum(r, ['success', 'repaired', 'audit_compliant', 'not_applicable'])} AS DOUBLE PRECISION) / (${sum(r, C)}) END`;
export const expected = (r: string) => `CASE WHEN (${sum(r, C.filter((c) => c !== 'unexpected'))}) > 0 THEN 1 ELSE 0 END`;
/** The rows kept_nodes_worst_idx holds, over `kept_nodes k` (a reader's WHERE repeats it to walk the index). */
export const WORST_ROWS = "k.class = 'agent' AND k.share IS NOT NULL AND (k.mode = 0 OR k.expected = 1)";

// ---- SQLite ----------------------------------------------------------------------------------

/** Node `k.node_id`'s share and mark from its compliance row, written when they differ (no index entry moves otherwise). */
const sShare = (k: string) => {
  const row = `(SELECT ${share('t', `${k}.mode`)}, ${expected('t')} FROM node_compliance t WHERE t.node_id = ${k}.node_id)`;
  return `UPDATE kept_nodes SET (share, expected) = ${row} WHERE node_id = ${k}.node_id AND (share, expected) IS NOT ${row};`;
};

/** Every kept node's share from the stored rows, on SQLite (the migration; a bulk loader after migration 23's sqliteKeptRefill). */
export const sqliteKeptSharesRefill = `UPDATE kept_nodes SET share = ${share('t', 'kept_nodes.mode')}, expected = ${expected('t')}
  FROM node_compliance t WHERE t.node_id = kept_nodes.node_id;
`;

const sqlite = `
ALTER TABLE kept_nodes ADD COLUMN share REAL;
ALTER TABLE kept_nodes ADD COLUMN expected INTEGER NOT NULL DEFAULT 0;
${sqliteKeptSharesRefill}
CREATE INDEX kept_nodes_share_idx ON kept_nodes (share, node_id) WHERE share IS NOT NULL;
CREATE INDEX kept_nodes_worst_idx ON kept_nodes (share, node_id) WHERE ${WORST_ROWS.replaceAll('k.', '')};
CREATE TRIGGER kept_nodes_share_insert AFTER INSERT ON kept_nodes BEGIN
  ${sShare('NEW')}
END;
CREATE TRIGGER kept_nodes_share_update AFTER UPDATE OF class, mode ON kept_nodes BEGIN
  ${sShare('NEW')}
END;
`;

// ---- PostgreSQL ------------------------------------------------------------------------------

/** Migration 25's group hook, as it writes it. */
const pGroups = (id: string, sign: string, r: string, cls: string, mode: string) => `INSERT INTO kept_groups_log (group_id, class, mode, nodes, ${cols})
    SELECT g.group_id, ${cls}, ${mode}, ${sign}, ${C.map((c) => `${sign} * ${r}.${c}`).join(', ')} FROM policy_group_members g WHERE g.node_id = ${id};`;

/** `text` with `from` replaced by `to`, `from` being there once (the function's text is migration 23's, fixed). */
function once(text: string, from: string, to: string): string {
  if (text.split(from).length !== 2) throw new Error(`migration 27: not found once: ${from}`);
  return text.replace(from, () => to);
}

/** The node_compliance function as migration 25 leaves it (for tests that undo this migration). */
export const pgComplianceFunction25 = pgComplianceFunction({
  add: (id, r, cls, mode) => pGroups(id, '1', r, cls, mode),
  take: (id, r, cls, mode) => pGroups(id, '-1', r, cls, mode),
}, KEPT_LOCK_ARGS).replace('CREATE FUNCTION', 'CREATE OR REPLACE FUNCTION');

/** The node_compliance function as this migration leaves it (for tests that undo migration 33). */
export const pgComplianceFunction27 = (() => {
  let f = pgComplianceFunction25;
  f = once(f, 'INSERT INTO kept_nodes (node_id, class, mode) VALUES (NEW.node_id, cls, md);',
    `INSERT INTO kept_nodes (node_id, class, mode, share, expected) VALUES (NEW.node_id, cls, md, ${share('NEW', 'md')}, ${expected('NEW')});`);
  // Written once after the directive rows moved, when the class, the mode or the share changed
  // (until now only a class or mode change wrote the row).
  f = once(f, '    UPDATE kept_nodes SET class = cls, mode = md WHERE node_id = NEW.node_id;\n  END IF;',
    `  END IF;
  UPDATE kept_nodes SET class = cls, mode = md, share = ${share('NEW', 'md')}, expected = ${expected('NEW')}
    WHERE node_id = NEW.node_id AND (class, mode, share, expected) IS DISTINCT FROM (cls, md, ${share('NEW', 'md')}, ${expected('NEW')});`);
  return f;
})();

const postgres = `
ALTER TABLE kept_nodes ADD COLUMN share double precision, ADD COLUMN expected smallint NOT NULL DEFAULT 0;
UPDATE kept_nodes k SET share = ${share('t', 'k.mode')}, expected = ${expected('t')} FROM node_compliance t WHERE t.node_id = k.node_id;
CREATE INDEX kept_nodes_share_idx ON kept_nodes (share, node_id) WHERE share IS NOT NULL;
CREATE INDEX kept_nodes_worst_idx ON kept_nodes (share, node_id) WHERE ${WORST_ROWS.replaceAll('k.', '')};
${pgComplianceFunction27}
`;

export const keptShares: Migration = { version: 27, name: 'kept_shares', sqlite, postgres };
