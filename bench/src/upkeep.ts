/**
 * The kept counters' upkeep on PostgreSQL: what the database spends keeping fleet, group,
 * directive and rule counters and the drill-down keys while compliance rows are written.
 *
 * A fleet of `nodes` nodes is loaded in bulk through the triggers (registry.ts's loadPostgres,
 * timed) and each node made a member of two of ten policy groups. Then every node's compliance
 * row is updated in batches of `batch` (the ingest's batch size), one transaction each, four ways:
 * nothing the counters keep moves (a steady run moves its base run only), the counts move, the
 * time mode moves (every node starts applying, so each of its directive rows and drill-down keys
 * moves), and the counts move back. Each step reports its wall time and the CPU time of the
 * database backend that ran it (from /proc: the server must run on this machine, else only wall
 * times), and the run reports the log rows the counters' triggers left for the sweep to fold.
 * Last, every node goes silent twice, swept once in one step and once in default steps.
 */
import type pg from 'pg';
import { processCpuSeconds } from './proc-cpu.js';
import { loadPostgres } from './registry.js';
import { withPostgres } from './store.js';
import { KEPT_SWEEP_STEP } from '@capstan/server/store/compliance/kept';

export interface UpkeepOptions {
  databaseUrl?: string;
  nodes?: number;
  batch?: number;
  /** Nodes per step of the stepped sweep (the server's default, `[compliance] kept_sweep_step`). */
  sweepStep?: number;
  log?: (line: string) => void;
}

interface Step {
  wall_ms: number;
  /** CPU time of the backend that ran the statements (null when the database is not on this machine). */
  db_cpu_ms: number | null;
}

export interface UpkeepResult {
  nodes: number;
  /** The nodes with a compliance row (the loaded fleet has a few without): the rows each step updates. */
  compliance_rows: number;
  batch: number;
  load_ms: number;
  load_db_cpu_ms: number | null;
  steps: Record<'steady' | 'counts_move' | 'mode_moves' | 'counts_move_back', Step>;
  /** Rows the counters' triggers appended for the sweep to fold, over the load and the four steps. */
  log_rows: { fleet: number; groups: number; directives: number; rules: number };
  /**
   * Every node going silent at once, swept in one step (a step larger than the fleet) and then, the nodes
   * answering again, in steps of the default size: what the sweep costs and how long writers
   * wait behind it at most (its longest step).
   */
  sweeps: Record<'one_step' | 'stepped', SweepFigures>;
}

interface SweepFigures {
  step: number;
  nodes_moved: number;
  steps: number;
  wall_ms: number;
  longest_step_ms: number;
}

/** User + system CPU of process `pid` in ms, or null when it is not a process of this machine. */
function processCpuMs(pid: number): number | null {
  const s = processCpuSeconds(pid);
  return s === null ? null : s * 1000;
}

const minus = (a: number | null, b: number | null): number | null => (a === null || b === null ? null : Math.round(a - b));

/** Without PostgreSQL there is nothing to measure: one figure without a value says why. */
export async function benchUpkeep(o: UpkeepOptions = {}): Promise<UpkeepResult | { figures: Array<{ name: string; value: null; unit: string; note: string }> }> {
  if (!o.databaseUrl) return { figures: [{ name: 'postgres', value: null, unit: '', note: 'PostgreSQL unreachable: the upkeep measured is its triggers' }] };
  return upkeepOn(o.databaseUrl, o);
}

async function upkeepOn(databaseUrl: string, o: UpkeepOptions): Promise<UpkeepResult> {
  const nodes = o.nodes ?? 20_000;
  const batch = o.batch ?? 64;
  const sweepStep = o.sweepStep ?? KEPT_SWEEP_STEP;
  for (const [name, v] of [['nodes', nodes], ['batch', batch], ['sweepStep', sweepStep]] as const) {
    if (!Number.isSafeInteger(v) || v < 1) throw new Error(`upkeep bench: ${name} must be a positive integer (got ${v})`);
  }
  const log = o.log ?? (() => undefined);
  return withPostgres(databaseUrl, { schemaPrefix: 'capstan_bench_', poolSize: 1 }, async (store, admin: pg.Client) => {
    const pid = Number((await admin.query<{ pid: number }>('SELECT pg_backend_pid() AS pid')).rows[0]!.pid);
    let cpu0 = processCpuMs(pid);
    let t0 = performance.now();
    await loadPostgres(admin, nodes);
    const load_ms = Math.round(performance.now() - t0);
    const load_db_cpu_ms = minus(processCpuMs(pid), cpu0);
    log(`upkeep bench: ${nodes} nodes loaded in ${load_ms} ms (database ${load_db_cpu_ms ?? '?'} ms CPU)`);
    // Each node a member of two of ten policy groups, as a generation leaves them: the counters
    // by group move with every compliance row.
    await admin.query(`INSERT INTO policy_group_members (group_id, node_id)
      SELECT 'upkeep-' || g, n.id FROM nodes n CROSS JOIN generate_series(0, 1) AS k
      CROSS JOIN LATERAL (SELECT (hashtext(n.id) % 5 + 5) % 5 + k * 5 AS g) x`);
    await admin.query('ANALYZE');
    const ids = (await admin.query<{ node_id: string }>('SELECT node_id FROM node_compliance ORDER BY node_id')).rows.map((r) => r.node_id);
    const step = async (name: string, sql: string, extra: unknown[] = []): Promise<Step> => {
      cpu0 = processCpuMs(pid);
      t0 = performance.now();
      for (let i = 0; i < ids.length; i += batch) {
        await admin.query('BEGIN');
        await admin.query(sql, [ids.slice(i, i + batch), ...extra]);
        await admin.query('COMMIT');
      }
      const s = { wall_ms: Math.round(performance.now() - t0), db_cpu_ms: minus(processCpuMs(pid), cpu0) };
      log(`upkeep bench: ${name}, ${ids.length} rows: ${s.wall_ms} ms (database ${s.db_cpu_ms ?? '?'} ms CPU)`);
      return s;
    };
    // A day ahead: every node answered and applying since then, so none is silent and all apply.
    const ahead = Math.floor(Date.now() / 1000) + 86_400;
    const steady = await step('nothing moves', 'UPDATE node_compliance SET runs_seen = runs_seen + 1 WHERE node_id = ANY($1)');
    const counts_move = await step('counts move', 'UPDATE node_compliance SET success = success + 1 WHERE node_id = ANY($1)');
    const mode_moves = await step('mode moves', 'UPDATE node_compliance SET applying_since_s = $2, answered_s = $2 WHERE node_id = ANY($1)', [ahead]);
    const counts_move_back = await step('counts move back', 'UPDATE node_compliance SET success = success - 1 WHERE node_id = ANY($1)');
    const applying = Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM kept_nodes WHERE mode = 1')).rows[0]!.n);
    if (applying !== ids.length) throw new Error(`upkeep bench: ${applying} of ${ids.length} kept nodes applying after the mode step`);
    // Counted before the sweeps, which fold them.
    const logs = (await admin.query<Record<string, string>>(`SELECT (SELECT count(*) FROM kept_fleet_log) AS fleet, (SELECT count(*) FROM kept_groups_log) AS groups,
      (SELECT count(*) FROM kept_directives_log) AS directives, (SELECT count(*) FROM kept_rules_log) AS rules`)).rows[0]!;
    // Every node silent: an hour after its answer (silence after 900 s, applying over after 600 s).
    const sweep = async (name: string, at: number, size: number): Promise<SweepFigures> => {
      t0 = performance.now();
      const s = await store.sweepCompliance({ now_s: at, silence_s: 900, applying_s: 600 }, size);
      const silent = Number((await admin.query<{ n: string }>('SELECT count(*) AS n FROM kept_nodes WHERE mode = 2')).rows[0]!.n);
      if (!s.done || silent !== ids.length) throw new Error(`upkeep bench: ${silent} of ${ids.length} kept nodes silent after the sweep (${name})`);
      const f = { step: size, nodes_moved: s.checked, steps: s.steps, wall_ms: Math.round(performance.now() - t0), longest_step_ms: s.longest_step_ms };
      log(`upkeep bench: sweep ${name}: ${f.nodes_moved} nodes in ${f.steps} step(s), ${f.wall_ms} ms, the longest ${f.longest_step_ms} ms`);
      return f;
    };
    await store.sweepCompliance({ now_s: ahead - 3600, silence_s: 900, applying_s: 600 });
    // A step larger than the fleet, counted twice (a node in both ranges counts twice): one step.
    const one_step = await sweep('in one step', ahead + 3600, 4 * ids.length);
    for (let i = 0; i < ids.length; i += batch) {
      // Answers spread over 17 minutes, as a fleet's are over its runs: a step holds whole seconds.
      await admin.query('UPDATE node_compliance SET applying_since_s = NULL, answered_s = $2 + (hashtext(node_id) & 1023) WHERE node_id = ANY($1)',
        [ids.slice(i, i + batch), ahead + 7200]);
    }
    const stepped = await sweep('in steps', ahead + 7200 + 3600, sweepStep);

    return {
      nodes,
      compliance_rows: ids.length,
      batch,
      load_ms,
      load_db_cpu_ms,
      steps: { steady, counts_move, mode_moves, counts_move_back },
      log_rows: { fleet: Number(logs.fleet), groups: Number(logs.groups), directives: Number(logs.directives), rules: Number(logs.rules) },
      sweeps: { one_step, stepped },
    };
  });
}
