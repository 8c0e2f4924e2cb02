/**
 * Policy objects and generated bundles on SQLite. A generation's batch writes its bundles and
 * expectations set-based, and recomputes a node's compliance only when this write changes the
 * expectations its last run is judged by (through the compliance part).
 */
import type { ExpectedComponent } from '@capstan/shared/compliance/compute';
import { type SqliteDb, sqliteRows } from '../sqlite/db.js';
import { MultiRow } from '../sqlite/multirow.js';
import type { SqliteCompliance } from '../compliance/sqlite.js';
import type { CheckedExpectations } from '../input.js';
import { toUtcIso } from '../time.js';
import { putCell } from '../nodes/properties.js';
import { checkBundleRecord, checkPolicyKey, checkPolicyWrites, policyBodyJson, policyFromRow } from './rows.js';
import { BUNDLE_READ, releaseTexts, splitBundles } from './sqlite-texts.js';
import { bundleFromRow } from './texts.js';
import { RunJudge } from '../compliance/judged.js';
import type {
  PolicyBundleRecord, PolicyKind, PolicyNodeInput, PolicyNodeRead, PolicyObjectRecord, PolicyProblemRecord, PolicySealRecord, PolicyStateWrite, PolicyStore, PolicyWrite,
} from './types.js';

/** Nodes whose generated policies are written with one set of statements (putPolicies). */
const POLICY_CHUNK = 500;
/**
 * Bundles and expectations as multi-row statements, their values bound as they are: passed as one
 * JSON array to json_each, every bundle's text was escaped into it and parsed out again.
 */
const EXPECTATION_ROWS = new MultiRow('INSERT INTO node_expectations (node_id, config_id, set_at, list)', 4,
  'ON CONFLICT (node_id, config_id) DO UPDATE SET set_at = excluded.set_at, list = excluded.list');
/** Each distinct list of a chunk once (migration 30). */
const LIST_ROWS = new MultiRow('INSERT INTO expectation_lists (digest, components, used_at)', 3, 'ON CONFLICT (digest) DO NOTHING');
const BUNDLE_ROWS = new MultiRow('INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle)', 4,
  'ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle');

export class SqlitePolicy implements PolicyStore {
  constructor(private readonly db: SqliteDb, private readonly compliance: SqliteCompliance) {}

  async listPolicyObjects(kind: PolicyKind): Promise<PolicyObjectRecord[]> {
    const rows = this.db.read('listPolicyObjects', () =>
      this.db.stmt('SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = ? ORDER BY id').all(kind)) as Array<Record<string, string>>;
    return rows.map((r) => policyFromRow(r, sqliteRows));
  }

  async getPolicyObject(kind: PolicyKind, id: string): Promise<PolicyObjectRecord | null> {
    const row = this.db.read('getPolicyObject', () =>
      this.db.stmt('SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = ? AND id = ?').get(kind, id)) as Record<string, string> | undefined;
    return row ? policyFromRow(row, sqliteRows) : null;
  }

  async putPolicyObject(kind: PolicyKind, id: string, body: Record<string, unknown>, at: string): Promise<boolean> {
    checkPolicyKey(kind, id);
    const json = policyBodyJson(body);
    const when = toUtcIso(at, 'at');
    return this.db.write('putPolicyObject', () => {
      const existed = this.db.stmt('SELECT 1 FROM policy_objects WHERE kind = ? AND id = ?').get(kind, id) !== undefined;
      this.db.stmt(`INSERT INTO policy_objects (kind, id, body, updated_at) VALUES (?, ?, ?, ?)
        ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at`).run(kind, id, json, when);
      return !existed;
    });
  }

  async deletePolicyObject(kind: PolicyKind, id: string): Promise<boolean> {
    return this.db.write('deletePolicyObject', () => this.db.stmt('DELETE FROM policy_objects WHERE kind = ? AND id = ?').run(kind, id).changes > 0);
  }

  async getPolicyBundle(nodeId: string): Promise<PolicyBundleRecord | null> {
    const row = this.db.read('getPolicyBundle', () =>
      this.db.stmt(`${BUNDLE_READ} WHERE b.node_id = ?`).get(nodeId)) as (PolicyBundleRecord & { tail: string | null }) | undefined;
    return row ? bundleFromRow(row) : null;
  }

  async putPolicyBundle(b: PolicyBundleRecord): Promise<boolean> {
    checkBundleRecord(b);
    const when = toUtcIso(b.generated_at, 'generated_at');
    return this.db.write('putPolicyBundle', () => {
      if (!this.db.stmt('SELECT 1 FROM nodes WHERE id = ?').get(b.node_id)) return false;
      const { rows, before } = splitBundles(this.db, [{ node_id: b.node_id, config_id: b.config_id, when, bundle: b.bundle }]);
      BUNDLE_ROWS.run(this.db, rows);
      releaseTexts(this.db, before);
      return true;
    });
  }

  async deletePolicyBundle(nodeId: string): Promise<boolean> {
    return this.db.write('deletePolicyBundle', () => this.db.stmt('DELETE FROM policy_bundles WHERE node_id = ?').run(nodeId).changes > 0);
  }

  async policyNodeInputs(nodeIds: string[], read: PolicyNodeRead): Promise<Map<string, PolicyNodeInput>> {
    const out = new Map<string, PolicyNodeInput>();
    const blank = (): PolicyNodeInput => ({ hostname: '', relay: '', certificate: null, properties: {}, ...(read.inventory && { inventory_at: null }) });
    this.db.read('policyNodeInputs', () => {
      for (let i = 0; i < nodeIds.length; i += 500) {
        const ids = JSON.stringify(nodeIds.slice(i, i + 500));
        if (read.node) {
          const cert = read.certificate ? ', (SELECT certificate FROM node_certificates c WHERE c.node_id = n.id) AS certificate' : '';
          for (const r of this.db.stmt(`SELECT n.id, n.hostname, n.policy_server${cert} FROM nodes n WHERE n.id IN (SELECT value FROM json_each(?))`).all(ids) as Array<Record<string, string | null>>) {
            out.set(r.id!, { ...blank(), hostname: r.hostname ?? '', relay: r.policy_server ?? '', certificate: r.certificate ?? null });
          }
        }
        for (const r of this.db.stmt('SELECT node_id, key, value FROM node_properties WHERE node_id IN (SELECT value FROM json_each(?))').all(ids) as Array<Record<string, string>>) {
          let n = out.get(r.node_id!);
          if (!n && !read.node) out.set(r.node_id!, (n = blank()));
          if (n) putCell(n, r.key!, r.value!);
        }
        if (!read.inventory) continue;
        const document = read.documents ? ', document' : '';
        for (const r of this.db.stmt(`SELECT node_id, received_at${document} FROM inventories WHERE node_id IN (SELECT value FROM json_each(?))`).all(ids) as Array<Record<string, string>>) {
          const n = out.get(r.node_id!);
          if (!n) continue;
          n.inventory_at = r.received_at!;
          if (read.documents) n.inventory = r.document!;
        }
      }
    });
    return out;
  }

  async policyInventories(nodeIds: string[]): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    this.db.read('policyInventories', () => {
      for (let i = 0; i < nodeIds.length; i += 500) {
        const ids = JSON.stringify(nodeIds.slice(i, i + 500));
        for (const r of this.db.stmt('SELECT node_id, document FROM inventories WHERE node_id IN (SELECT value FROM json_each(?))').all(ids) as Array<Record<string, string>>) out.set(r.node_id!, r.document!);
      }
    });
    return out;
  }

  async policySeals(nodeIds: string[]): Promise<PolicySealRecord[]> {
    return this.db.read('policySeals', () => this.db.stmt(`SELECT node_id, name, digest, sealed FROM policy_seals
      WHERE node_id IN (SELECT value FROM json_each(?)) ORDER BY node_id, name`).all(JSON.stringify(nodeIds))) as PolicySealRecord[];
  }

  async policyProblems(nodeIds: string[] | null): Promise<PolicyProblemRecord[]> {
    const rows = this.db.read('policyProblems', () => (nodeIds === null
      ? this.db.stmt('SELECT node_id, at, problem FROM policy_problems ORDER BY node_id').all()
      : this.db.stmt('SELECT node_id, at, problem FROM policy_problems WHERE node_id IN (SELECT value FROM json_each(?)) ORDER BY node_id').all(JSON.stringify(nodeIds)))) as Array<Record<string, string>>;
    return rows.map((r) => ({ node_id: r.node_id!, at: r.at!, problem: JSON.parse(r.problem!) as Record<string, unknown> }));
  }

  async putPolicyState(w: PolicyStateWrite): Promise<void> {
    const problems = (w.problems ?? []).map((p) => [p.node_id, toUtcIso(p.at, 'at'), JSON.stringify(p.problem)]);
    this.db.write('putPolicyState', () => {
      if (w.dropSeals?.length) {
        this.db.stmt('DELETE FROM policy_seals WHERE (node_id, name) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))')
          .run(JSON.stringify(w.dropSeals.map((d) => [d.node_id, d.name])));
      }
      if (w.seals?.length) {
        this.db.stmt(`INSERT INTO policy_seals (node_id, name, digest, sealed)
            SELECT value ->> 0, value ->> 1, value ->> 2, value ->> 3 FROM json_each(?) WHERE value ->> 0 IN (SELECT id FROM nodes)
          ON CONFLICT (node_id, name) DO UPDATE SET digest = excluded.digest, sealed = excluded.sealed`)
          .run(JSON.stringify(w.seals.map((x) => [x.node_id, x.name, x.digest, x.sealed])));
      }
      if (w.clearProblems?.length) this.db.stmt('DELETE FROM policy_problems WHERE node_id IN (SELECT value FROM json_each(?))').run(JSON.stringify(w.clearProblems));
      if (problems.length) {
        this.db.stmt(`INSERT INTO policy_problems (node_id, at, problem)
            SELECT value ->> 0, value ->> 1, value ->> 2 FROM json_each(?) WHERE value ->> 0 IN (SELECT id FROM nodes)
          ON CONFLICT (node_id) DO UPDATE SET at = excluded.at, problem = excluded.problem`).run(JSON.stringify(problems));
      }
    });
  }

  async policyConfigIds(nodeIds: string[]): Promise<Map<string, string>> {
    const out = new Map<string, string>();
    this.db.read('policyConfigIds', () => {
      for (let i = 0; i < nodeIds.length; i += 500) {
        const chunk = nodeIds.slice(i, i + 500);
        const rows = this.db.stmt(`SELECT node_id, config_id FROM policy_bundles WHERE node_id IN (${chunk.map(() => '?').join(', ')})`).all(...chunk) as Array<{ node_id: string; config_id: string }>;
        for (const r of rows) out.set(r.node_id, r.config_id);
      }
    });
    return out;
  }

  /**
   * A batch of generated policies (the generator writes up to a few hundred nodes at a time):
   * setExpectations' rules for each node, set-based. The nodes, their stored expectations and
   * their compliance bases are read with one statement each, the writes go out as multi-row
   * statements, and a node's compliance is recomputed only when this write changes the
   * expectations its last run is judged by (a new policy for a node still running the previous
   * one changes nothing there: that config's expectations are kept). Per node, one statement each
   * was 80% of a 100,000-node generation.
   */
  async putPolicies(items: PolicyWrite[]): Promise<number> {
    const checked = checkPolicyWrites(items);
    return this.db.write('putPolicies', () => {
      let n = 0;
      // The write's nodes whose runs reported the same are judged once, across its chunks.
      const runs = new RunJudge(this.compliance.onUnreadable);
      for (let i = 0; i < checked.length; i += POLICY_CHUNK) n += this.putPolicyChunk(checked.slice(i, i + POLICY_CHUNK), runs);
      return n;
    });
  }

  private putPolicyChunk(chunk: Array<{ bundle: PolicyBundleRecord; when: string; expected: CheckedExpectations; expectationsOnly: boolean }>, runs: RunJudge): number {
    // Last write wins for a node named twice, as one statement per item would have it.
    const byNode = new Map(chunk.map((it) => [it.bundle.node_id, it]));
    const ids = JSON.stringify([...byNode.keys()]);
    const previous = new Map((this.db.stmt('SELECT id, policy_config_id FROM nodes WHERE id IN (SELECT value FROM json_each(?))').all(ids) as
      Array<{ id: string; policy_config_id: string | null }>).map((r) => [r.id, r.policy_config_id]));
    const stored = new Map<string, Map<string, string>>();
    for (const r of this.db.stmt('SELECT node_id, config_id, list FROM node_expectations WHERE node_id IN (SELECT value FROM json_each(?))').all(ids) as
      Array<{ node_id: string; config_id: string; list: string }>) {
      let m = stored.get(r.node_id);
      if (!m) stored.set(r.node_id, (m = new Map()));
      m.set(r.config_id, r.list);
    }
    const withRow = new Set(this.db.stmt('SELECT node_id FROM node_compliance WHERE node_id IN (SELECT value FROM json_each(?))').pluck().all(ids) as string[]);

    const live = [...byNode.values()].filter((it) => previous.has(it.bundle.node_id));
    const expectationRows: unknown[][] = [];
    const gone: Array<[string, string]> = [];
    const lists = new Map<string, unknown[]>();
    const byConfig = new Map<string, string[]>();
    const recompute: Array<{ nodeId: string; configId: string; previous: string | null; when: string; items: ExpectedComponent[]; rowsKept: boolean; rowsFrom?: string }> = [];
    for (const it of live) {
      const nodeId = it.bundle.node_id;
      const configId = it.bundle.config_id;
      const keep = previous.get(nodeId) ?? configId;
      const mine = stored.get(nodeId) ?? new Map<string, string>();
      expectationRows.push([nodeId, configId, it.when, it.expected.digest]);
      if (!lists.has(it.expected.digest)) lists.set(it.expected.digest, [it.expected.digest, it.expected.json, it.when]);
      for (const c of mine.keys()) if (c !== configId && c !== keep) gone.push([nodeId, c]);
      const list = byConfig.get(configId) ?? [];
      list.push(nodeId);
      byConfig.set(configId, list);
      // A node is judged by its current policy's expectations: recomputed when they change,
      // left alone when the same policy is written again.
      const prevConfig = previous.get(nodeId) ?? null;
      if (!withRow.has(nodeId) || prevConfig !== configId || mine.get(configId) !== it.expected.digest) {
        // Its rows were counted against the previous policy's expectations: the same list (a
        // template's new values, the same components) counts the same, only the marks move.
        const rowsFrom = withRow.has(nodeId) && prevConfig !== null ? mine.get(prevConfig) : undefined;
        recompute.push({ nodeId, configId, previous: prevConfig, when: it.when, items: it.expected.items, rowsKept: rowsFrom === it.expected.digest, ...(rowsFrom !== undefined && { rowsFrom }) });
      }
    }
    if (live.length === 0) return 0;
    LIST_ROWS.run(this.db, [...lists.values()]);
    EXPECTATION_ROWS.run(this.db, expectationRows);
    if (gone.length) {
      this.db.stmt('DELETE FROM node_expectations WHERE (node_id, config_id) IN (SELECT value ->> 0, value ->> 1 FROM json_each(?))').run(JSON.stringify(gone));
    }
    if (byConfig.size <= 8) {
      for (const [configId, nodes] of byConfig) {
        this.db.stmt('UPDATE nodes SET policy_config_id = ? WHERE id IN (SELECT value FROM json_each(?))').run(configId, JSON.stringify(nodes));
      }
    } else {
      // Bundles rendered per node have config ids of their own: one statement for all the pairs.
      this.db.stmt(`UPDATE nodes SET policy_config_id = j.value ->> 1 FROM json_each(?) AS j WHERE nodes.id = j.value ->> 0`)
        .run(JSON.stringify(live.map((it) => [it.bundle.node_id, it.bundle.config_id])));
    }
    // Each distinct text once (migration 41): nodes with the same groups share theirs.
    const { rows, before } = splitBundles(this.db, live.filter((it) => !it.expectationsOnly)
      .map((it) => ({ node_id: it.bundle.node_id, config_id: it.bundle.config_id, when: it.when, bundle: it.bundle.bundle })));
    BUNDLE_ROWS.run(this.db, rows);
    releaseTexts(this.db, before);
    this.compliance.recomputeMany(recompute, runs);
    return live.length;
  }
}
