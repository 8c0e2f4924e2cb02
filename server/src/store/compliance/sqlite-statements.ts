/**
 * The statements of SQLite's compliance writes (sqlite.ts), and the values they bind: a node's
 * compliance row and directive rows, one node at a time and for a generation's batch at once.
 */
import type { NodeTimeMarks } from '@capstan/shared/compliance/compute';
import { MultiRow } from '../sqlite/multirow.js';
import type { SqliteDb } from '../sqlite/db.js';
import { UNPACKED_PLACEHOLDER, packedOrNull } from '../runs/outcomes.js';
import { COUNT_COLUMNS, DIRECTIVE_ROW_COLUMNS, type ComplianceInput, type FindingContext } from './rows.js';
import type { ComplianceCounts, ExpectedComponent } from './types.js';
import type { RunJudge } from './judged.js';

export const UPSERT_COMPLIANCE = `INSERT INTO node_compliance (node_id, run_id, run_started_at, run_started_utc, config_id, expected,
    computed_at, outcomes, outcomes_packed, applying_since_s, answered_s, keep_last_s, runs_seen, ${COUNT_COLUMNS.join(', ')})
  VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ${COUNT_COLUMNS.map(() => '?').join(', ')})
  ON CONFLICT (node_id) DO UPDATE SET run_id = excluded.run_id, run_started_at = excluded.run_started_at,
    run_started_utc = excluded.run_started_utc, config_id = excluded.config_id, expected = excluded.expected,
    computed_at = excluded.computed_at, outcomes = excluded.outcomes, outcomes_packed = excluded.outcomes_packed,
    applying_since_s = excluded.applying_since_s, answered_s = excluded.answered_s, keep_last_s = excluded.keep_last_s,
    runs_seen = excluded.runs_seen, ${COUNT_COLUMNS.map((c) => `${c} = excluded.${c}`).join(', ')}`;
/** What a compliance write reads of the row it replaces: the time marks, and the base run its findings were last seen in. */
export const SELECT_CURRENT = `SELECT run_id, run_started_at, run_started_utc, config_id, outcomes, outcomes_packed, applying_since_s, answered_s, keep_last_s,
  runs_seen, ${COUNT_COLUMNS.join(', ')} FROM node_compliance WHERE node_id = ?`;
/** The same for a run's write: no outcomes (the run brings its own). */
export const SELECT_MARKS = 'SELECT run_id, run_started_utc, applying_since_s, answered_s, keep_last_s, runs_seen, error, non_compliant FROM node_compliance WHERE node_id = ?';
export const SELECT_DIRECTIVE_ROWS = `SELECT ${DIRECTIVE_ROW_COLUMNS.join(', ')} FROM node_compliance_directives WHERE node_id = ?`;
/** Directive rows per multi-row upsert; the statement text of each size is built once. */
export const DIRECTIVE_CHUNK = 32;
const UPSERT_DIRECTIVES: string[] = [];
export function upsertDirectivesSql(rows: number): string {
  return (UPSERT_DIRECTIVES[rows] ??= `INSERT INTO node_compliance_directives (node_id, rule_id, directive_id, ${COUNT_COLUMNS.join(', ')})
    VALUES ${Array.from({ length: rows }, () => `(?, ?, ?, ${COUNT_COLUMNS.map(() => '?').join(', ')})`).join(', ')}
    ON CONFLICT (node_id, rule_id, directive_id) DO UPDATE SET ${COUNT_COLUMNS.map((c) => `${c} = excluded.${c}`).join(', ')}`);
}

/** The values of one UPSERT_COMPLIANCE row. */
export function complianceValues(input: ComplianceInput, at: string, f: FindingContext, counts: ComplianceCounts): unknown[] {
  const m = input.marks;
  return [input.nodeId, input.run?.id ?? null, input.run?.started_at ?? null, input.run?.started_utc ?? null,
    input.run?.config_id ?? null, input.expected !== null && input.expected.length > 0 ? 1 : 0, at,
    UNPACKED_PLACEHOLDER, packedOrNull(input.outcomes, input.outcomesPacked), m.applying_since_s, m.answered_s, m.keep_last_s,
    f.runs_seen, ...COUNT_COLUMNS.map((c) => counts[c])];
}

/** recomputeMany's statements: rows read and written for many nodes at once. */
export const SELECT_CURRENT_MANY = SELECT_CURRENT.replace('SELECT ', 'SELECT node_id, ').replace('WHERE node_id = ?', 'WHERE node_id IN (SELECT value FROM json_each(?))');
export const SELECT_DIRECTIVE_ROWS_MANY = `SELECT node_id, ${DIRECTIVE_ROW_COLUMNS.join(', ')} FROM node_compliance_directives
  WHERE node_id IN (SELECT value FROM json_each(?))`;
/** The stored rows of some directives of some nodes: a JSON array of [node, rule, directive], each found by the primary key. */
export const SELECT_DIRECTIVE_ROWS_OF = `SELECT d.node_id, ${DIRECTIVE_ROW_COLUMNS.map((c) => `d.${c}`).join(', ')}
  FROM json_each(?) j CROSS JOIN node_compliance_directives d ON d.node_id = j.value ->> 0 AND d.rule_id = j.value ->> 1 AND d.directive_id = j.value ->> 2`;
/** The rows `sql` reads for `param` (a JSON array), each without its first column, by that column (the node). */
export function rowsByNode(db: SqliteDb, sql: string, param: readonly unknown[]): Map<string, unknown[][]> {
  const out = new Map<string, unknown[][]>();
  if (param.length === 0) return out;
  for (const r of db.stmt(sql).raw(true).all(JSON.stringify(param)) as unknown[][]) {
    const nodeId = r[0] as string;
    let list = out.get(nodeId);
    if (!list) out.set(nodeId, (list = []));
    list.push(r.slice(1));
  }
  return out;
}
export const DELETE_DIRECTIVE_ROWS_MANY = `DELETE FROM node_compliance_directives
  WHERE (node_id, rule_id, directive_id) IN (SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?))`;
export const DEFER_TARGETS = 'INSERT INTO kept_targets_deferred (node_id) SELECT value FROM json_each(?) WHERE true ON CONFLICT DO NOTHING';
/** recomputeMany's rows whose only change is the time marks: [node, computed_at, applying_since_s, answered_s, keep_last_s] each. */
export const UPDATE_MARKS_MANY = `UPDATE node_compliance SET computed_at = j.value ->> 1, outcomes = '${UNPACKED_PLACEHOLDER}',
    applying_since_s = j.value ->> 2, answered_s = j.value ->> 3, keep_last_s = j.value ->> 4
  FROM json_each(?) AS j WHERE node_compliance.node_id = j.value ->> 0`;
/** The same when only the applying mark moves: [node, computed_at, applying_since_s] each. */
export const UPDATE_APPLYING_MANY = `UPDATE node_compliance SET computed_at = j.value ->> 1, outcomes = '${UNPACKED_PLACEHOLDER}', applying_since_s = j.value ->> 2
  FROM json_each(?) AS j WHERE node_compliance.node_id = j.value ->> 0`;
export const COMPLIANCE_ROWS = new MultiRow(UPSERT_COMPLIANCE.slice(0, UPSERT_COMPLIANCE.indexOf('VALUES')), 13 + COUNT_COLUMNS.length,
  UPSERT_COMPLIANCE.slice(UPSERT_COMPLIANCE.indexOf('ON CONFLICT')));
export const DIRECTIVE_ROWS = new MultiRow(`INSERT INTO node_compliance_directives (node_id, rule_id, directive_id, ${COUNT_COLUMNS.join(', ')})`, 3 + COUNT_COLUMNS.length,
  `ON CONFLICT (node_id, rule_id, directive_id) DO UPDATE SET ${COUNT_COLUMNS.map((c) => `${c} = excluded.${c}`).join(', ')}`);

/**
 * A node's compliance input after a policy change: its stored last complete run (`cur`, if any)
 * against `expected`, its outcomes unpacked by `runs` (judged.ts: shared with the other nodes of
 * the write whose runs reported the same). `runs` null: the outcomes are left packed (the caller
 * counts the rows otherwise, and the row's packed value is written back as it is).
 */
export function policyInput(nodeId: string, cur: Record<string, unknown> | undefined, expected: ExpectedComponent[], marks: NodeTimeMarks, runs: RunJudge | null): ComplianceInput {
  if (cur === undefined || cur.run_id === null) return { nodeId, run: null, outcomes: [], expected, marks };
  return {
    nodeId,
    run: { id: cur.run_id as number, started_at: cur.run_started_at as string, started_utc: cur.run_started_utc as string, config_id: cur.config_id as string | null },
    outcomes: runs ? runs.outcomes(nodeId, cur.outcomes_packed, cur.outcomes) : [],
    ...(cur.outcomes_packed ? { outcomesPacked: cur.outcomes_packed as Buffer } : {}),
    expected,
    marks,
  };
}
