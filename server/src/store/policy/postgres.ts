/**
 * Policy objects and generated bundles on PostgreSQL. A generation's batch locks its nodes' rows,
 * then sets their expectations and writes their bundles set-based, chunk by chunk (through the
 * compliance part, which recomputes a node's compliance only when its expectations change).
 */
import { type PostgresDb, postgresRows } from '../postgres/db.js';
import type { PostgresCompliance } from '../compliance/postgres.js';
import { RunJudge } from '../compliance/judged.js';
import type { PostgresEvents } from '../events/postgres.js';
import type { EventInsert } from '../events/types.js';
import { pick, unnestOf } from '../postgres/arrays.js';
import { toUtcIso } from '../time.js';
import { putCell } from '../nodes/properties.js';
import { checkBundleRecord, checkPolicyKey, checkPolicyWrites, policyBodyJson, policyFromRow } from './rows.js';
import { BUNDLE_READ_PG, sharedTexts, storedBundle, storeTexts, type TextBundle } from './postgres-texts.js';
import { bundleFromRow } from './texts.js';
import type {
  PolicyBundleRecord, PolicyKind, PolicyNodeInput, PolicyNodeRead, PolicyObjectRecord, PolicyProblemRecord, PolicySealRecord, PolicyStateWrite, PolicyStore, PolicyWrite,
} from './types.js';

/** Nodes whose generated policies are written with one set of statements (putPolicies). */
const POLICY_CHUNK = 500;

export class PostgresPolicy implements PolicyStore {
  constructor(private readonly db: PostgresDb, private readonly compliance: PostgresCompliance, private readonly events: PostgresEvents) {}

  async listPolicyObjects(kind: PolicyKind): Promise<PolicyObjectRecord[]> {
    const { rows } = await this.db.query('listPolicyObjects', this.db.pool, {
      text: 'SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = $1 ORDER BY id', values: [kind],
    });
    return rows.map((r) => policyFromRow(r, postgresRows));
  }

  async getPolicyObject(kind: PolicyKind, id: string): Promise<PolicyObjectRecord | null> {
    const { rows } = await this.db.query('getPolicyObject', this.db.pool, {
      text: 'SELECT kind, id, body, updated_at FROM policy_objects WHERE kind = $1 AND id = $2', values: [kind, id],
    });
    return rows[0] ? policyFromRow(rows[0], postgresRows) : null;
  }

  async putPolicyObject(kind: PolicyKind, id: string, body: Record<string, unknown>, at: string): Promise<boolean> {
    checkPolicyKey(kind, id);
    const json = policyBodyJson(body);
    const when = toUtcIso(at, 'at');
    // xmax = 0 only on a freshly inserted row: tells created from replaced in one statement.
    const { rows } = await this.db.query('putPolicyObject', this.db.pool, {
      text: `INSERT INTO policy_objects (kind, id, body, updated_at) VALUES ($1, $2, $3::jsonb, $4)
        ON CONFLICT (kind, id) DO UPDATE SET body = excluded.body, updated_at = excluded.updated_at
        RETURNING (xmax = 0) AS created`,
      values: [kind, id, json, when],
    });
    return rows[0]?.created === true;
  }

  async deletePolicyObject(kind: PolicyKind, id: string): Promise<boolean> {
    const res = await this.db.query('deletePolicyObject', this.db.pool, { text: 'DELETE FROM policy_objects WHERE kind = $1 AND id = $2', values: [kind, id] });
    return (res.rowCount ?? 0) > 0;
  }

  async getPolicyBundle(nodeId: string): Promise<PolicyBundleRecord | null> {
    const { rows } = await this.db.query('getPolicyBundle', this.db.pool, {
      name: 'bundle_get', text: `${BUNDLE_READ_PG} WHERE b.node_id = $1`, values: [nodeId],
    });
    const r = rows[0];
    return r ? bundleFromRow({ node_id: r.node_id, config_id: r.config_id, generated_at: new Date(r.generated_at).toISOString(), bundle: r.bundle, tail: r.tail }) : null;
  }

  async putPolicyBundle(b: PolicyBundleRecord): Promise<boolean> {
    checkBundleRecord(b);
    const when = toUtcIso(b.generated_at, 'generated_at');
    // INSERT … SELECT from nodes: an unknown node inserts nothing instead of failing on the key.
    const res = await this.db.query('putPolicyBundle', this.db.pool, {
      text: `INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle)
        SELECT id, $2, $3, $4 FROM nodes WHERE id = $1
        ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`,
      values: [b.node_id, b.config_id, when, b.bundle],
    });
    return (res.rowCount ?? 0) > 0;
  }

  async deletePolicyBundle(nodeId: string): Promise<boolean> {
    const res = await this.db.query('deletePolicyBundle', this.db.pool, { text: 'DELETE FROM policy_bundles WHERE node_id = $1', values: [nodeId] });
    return (res.rowCount ?? 0) > 0;
  }

  async policyNodeInputs(nodeIds: string[], read: PolicyNodeRead): Promise<Map<string, PolicyNodeInput>> {
    const out = new Map<string, PolicyNodeInput>();
    const blank = (): PolicyNodeInput => ({ hostname: '', relay: '', certificate: null, properties: {}, ...(read.inventory && { inventory_at: null }) });
    const q = (text: string) => this.db.query('policyNodeInputs', this.db.pool, { text, values: [nodeIds] });
    if (read.node) {
      const cert = read.certificate ? ', (SELECT certificate FROM node_certificates c WHERE c.node_id = n.id) AS certificate' : '';
      for (const r of (await q(`SELECT n.id, n.hostname, n.policy_server${cert} FROM nodes n WHERE n.id = ANY($1::text[])`)).rows) {
        out.set(r.id as string, { ...blank(), hostname: (r.hostname as string | null) ?? '', relay: (r.policy_server as string | null) ?? '', certificate: (r.certificate as string | null | undefined) ?? null });
      }
    }
    for (const r of (await q('SELECT node_id, key, value FROM node_properties WHERE node_id = ANY($1::text[])')).rows) {
      let n = out.get(r.node_id as string);
      if (!n && !read.node) out.set(r.node_id as string, (n = blank()));
      if (n) putCell(n, r.key as string, r.value as string);
    }
    if (read.inventory) {
      const document = read.documents ? ', document::text AS document' : '';
      for (const r of (await q(`SELECT node_id, received_at${document} FROM inventories WHERE node_id = ANY($1::text[])`)).rows) {
        const n = out.get(r.node_id as string);
        if (!n) continue;
        n.inventory_at = postgresRows.time(r.received_at);
        if (read.documents) n.inventory = r.document as string;
      }
    }
    return out;
  }

  async policyInventories(nodeIds: string[]): Promise<Map<string, string>> {
    const { rows } = await this.db.query('policyInventories', this.db.pool, {
      text: 'SELECT node_id, document::text AS document FROM inventories WHERE node_id = ANY($1::text[])', values: [nodeIds],
    });
    return new Map(rows.map((r) => [r.node_id as string, r.document as string]));
  }

  async policySeals(nodeIds: string[]): Promise<PolicySealRecord[]> {
    const { rows } = await this.db.query('policySeals', this.db.pool, {
      text: 'SELECT node_id, name, digest, sealed FROM policy_seals WHERE node_id = ANY($1::text[]) ORDER BY node_id, name', values: [nodeIds],
    });
    return rows as PolicySealRecord[];
  }

  async policyProblems(nodeIds: string[] | null): Promise<PolicyProblemRecord[]> {
    const { rows } = await this.db.query('policyProblems', this.db.pool, nodeIds === null
      ? { text: 'SELECT node_id, at, problem FROM policy_problems ORDER BY node_id' }
      : { text: 'SELECT node_id, at, problem FROM policy_problems WHERE node_id = ANY($1::text[]) ORDER BY node_id', values: [nodeIds] });
    return rows.map((r) => ({ node_id: r.node_id as string, at: postgresRows.time(r.at)!, problem: r.problem as Record<string, unknown> }));
  }

  async putPolicyState(w: PolicyStateWrite): Promise<void> {
    const problems = (w.problems ?? []).map((p) => ({ ...p, at: toUtcIso(p.at, 'at') }));
    const what = 'putPolicyState';
    await this.db.tx(what, async (c) => {
      if (w.dropSeals?.length) {
        await this.db.query(what, c, {
          text: 'DELETE FROM policy_seals s USING unnest($1::text[], $2::text[]) AS d (node_id, name) WHERE s.node_id = d.node_id AND s.name = d.name',
          values: [w.dropSeals.map((d) => d.node_id), w.dropSeals.map((d) => d.name)],
        });
      }
      if (w.seals?.length) {
        await this.db.query(what, c, {
          text: `INSERT INTO policy_seals (node_id, name, digest, sealed)
              SELECT s.* FROM unnest($1::text[], $2::text[], $3::text[], $4::text[]) AS s (node_id, name, digest, sealed) JOIN nodes n ON n.id = s.node_id
            ON CONFLICT (node_id, name) DO UPDATE SET digest = excluded.digest, sealed = excluded.sealed`,
          values: [w.seals.map((x) => x.node_id), w.seals.map((x) => x.name), w.seals.map((x) => x.digest), w.seals.map((x) => x.sealed)],
        });
      }
      if (w.clearProblems?.length) {
        await this.db.query(what, c, { text: 'DELETE FROM policy_problems WHERE node_id = ANY($1::text[])', values: [w.clearProblems] });
      }
      if (problems.length) {
        await this.db.query(what, c, {
          text: `INSERT INTO policy_problems (node_id, at, problem)
              SELECT p.node_id, p.at, p.problem FROM unnest($1::text[], $2::timestamptz[], $3::jsonb[]) AS p (node_id, at, problem) JOIN nodes n ON n.id = p.node_id
            ON CONFLICT (node_id) DO UPDATE SET at = excluded.at, problem = excluded.problem`,
          values: [problems.map((p) => p.node_id), problems.map((p) => p.at), problems.map((p) => JSON.stringify(p.problem))],
        });
      }
    });
  }

  async policyConfigIds(nodeIds: string[]): Promise<Map<string, string>> {
    const { rows } = await this.db.query('policyConfigIds', this.db.pool, {
      text: 'SELECT node_id, config_id FROM policy_bundles WHERE node_id = ANY($1::text[])', values: [nodeIds],
    });
    return new Map(rows.map((r) => [r.node_id as string, r.config_id as string]));
  }

  /**
   * A batch of generated policies (the generator writes a few thousand nodes at a time), as one
   * setExpectations and one bundle write per node would leave them, set-based: the batch's node
   * rows are locked in one statement in id order (the order the ingest's batches take them in,
   * so neither can wait on the other in a cycle, nor two servers generating at once), then each
   * chunk of POLICY_CHUNK nodes is written with a handful of statements (postgres-policy.ts for
   * the expectations and compliance, one for the bundles). One node at a time took about ten
   * round trips each: 100,000 nodes were a million statements.
   */
  async putPolicies(items: PolicyWrite[]): Promise<number> {
    const checked = checkPolicyWrites(items);
    // Last write wins for a node named twice, as one write per item would have it.
    const byNode = new Map(checked.map((it) => [it.bundle.node_id, it]));
    if (byNode.size === 0) return 0;
    const what = 'putPolicies';
    await this.compliance.storeLists(new Map([...byNode.values()].map((it) => [it.expected.digest, it.expected.json])));
    // The texts its bundles share, each stored once (migration 42), committed before the transaction as the lists are.
    const asText = (it: (typeof checked)[number]): TextBundle => ({ node_id: it.bundle.node_id, config_id: it.bundle.config_id, when: it.when, bundle: it.bundle.bundle });
    const texts = await storeTexts(this.db, sharedTexts([...byNode.values()].filter((it) => !it.expectationsOnly).map(asText)));
    return this.db.tx(what, async (c) => {
      const { rows } = await this.db.query<{ id: string; policy_config_id: string | null }>(what, c, {
        name: 'policy_nodes_lock',
        text: 'SELECT id, policy_config_id FROM nodes WHERE id = ANY($1::text[]) ORDER BY id FOR NO KEY UPDATE',
        values: [[...byNode.keys()]],
      });
      const previous = new Map(rows.map((r) => [r.id, r.policy_config_id]));
      // Nodes that are gone are skipped.
      const live = [...byNode.values()].filter((it) => previous.has(it.bundle.node_id));
      const sink: EventInsert[] = [];
      // The write's nodes whose runs reported the same are judged once, across its chunks.
      const runs = new RunJudge(this.compliance.onUnreadable);
      for (let i = 0; i < live.length; i += POLICY_CHUNK) {
        const chunk = live.slice(i, i + POLICY_CHUNK);
        await this.compliance.expectationsMany(c, chunk.map((it) => ({
          nodeId: it.bundle.node_id, configId: it.bundle.config_id, previous: previous.get(it.bundle.node_id) ?? null, when: it.when, expected: it.expected,
        })), sink, runs);
        const bundles = chunk.filter((it) => !it.expectationsOnly);
        if (bundles.length === 0) continue;
        // The bundles as one JSON array ('' where the text is kept apart): node-pg escapes each element of a text[] in
        // JavaScript (15 ms for 500 bundles of 1.8 kB), JSON.stringify in native code (1.6 ms).
        await this.db.query(what, c, {
          name: 'bundle_put_batch',
          text: `INSERT INTO policy_bundles (node_id, config_id, generated_at, bundle)
              SELECT u.node_id, u.config_id, u.generated_at, b.bundle
              FROM ${unnestOf(['text', 'text', 'timestamptz'])} WITH ORDINALITY AS u(node_id, config_id, generated_at, i)
              JOIN json_array_elements_text($4::json) WITH ORDINALITY AS b(bundle, i) ON b.i = u.i
            ON CONFLICT (node_id) DO UPDATE SET config_id = excluded.config_id, generated_at = excluded.generated_at, bundle = excluded.bundle`,
          values: [pick(bundles, (it) => it.bundle.node_id), pick(bundles, (it) => it.bundle.config_id), pick(bundles, (it) => it.when),
            JSON.stringify(pick(bundles, (it) => storedBundle(asText(it), texts)))],
        });
      }
      // Last: the events' lock is held from here to the commit only.
      await this.events.write(c, sink);
      return live.length;
    });
  }
}
