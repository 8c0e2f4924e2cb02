/** Policy objects (directives, groups, rules, techniques) and the bundles generated from them, one per node. */
import type { ExpectedComponent } from '@capstan/shared/compliance/compute';
import type { JsonValue } from '@capstan/shared/filter/properties';
import { CHECKED, lookup, REFUSE, type NulRules } from '../guard.js';

/** The kinds of policy object the admin API manages (`property`: a global property, by name). */
export type PolicyKind = 'directive' | 'group' | 'rule' | 'technique' | 'property';

export interface PolicyObjectRecord {
  kind: PolicyKind;
  id: string;
  /** The object as validated by the policy model (server/src/policy/model.ts). */
  body: Record<string, unknown>;
  updated_at: string;
}

/** A node's generated policy bundle (unsigned JSON text; signed when served). */
export interface PolicyBundleRecord {
  node_id: string;
  config_id: string;
  generated_at: string;
  bundle: string;
}

/** One node's new bundle and the components it makes the node expected to report. */
export interface PolicyWrite {
  bundle: PolicyBundleRecord;
  expected: ExpectedComponent[];
  /**
   * The stored bundle is this one already (same config id): set the expectations only, keeping
   * the bundle and its generated_at (expectations written by an older server for the same content).
   */
  expectationsOnly?: boolean;
}

/** What generation reads of one node to render its policy (docs/policy.md, Node data). */
export interface PolicyNodeInput {
  hostname: string;
  /** Its policy server (relay) id; empty when none is known. */
  relay: string;
  /** The pinned certificate, PEM (secrets are sealed to it); null when none or not asked for. */
  certificate: string | null;
  /** The admin's properties of the node (the node level of its properties), JSON values by name. */
  properties: Record<string, JsonValue>;
  /**
   * The node's own secret properties, their text by name (sealed to the node, never shown);
   * absent when it has none.
   */
  secrets?: Record<string, string>;
  /** When its newest inventory was received, when asked for (null: none received). */
  inventory_at?: string | null;
  /** That inventory as JSON text: set by the generator for the nodes it renders (policyInventories). */
  inventory?: string | null;
}

export interface PolicyNodeRead {
  node?: boolean;
  certificate?: boolean;
  inventory?: boolean;
  /** With `inventory`: each node's inventory document too (`inventory`), in the same read. */
  documents?: boolean;
}

/** A secret sealed for a node (policy_seals): the sealed value as JSON text, and a digest of what it seals. */
export interface PolicySealRecord {
  node_id: string;
  name: string;
  digest: string;
  sealed: string;
}

/** Why a node's policy was last not generated (policy_problems), since when. */
export interface PolicyProblemRecord {
  node_id: string;
  at: string;
  problem: Record<string, unknown>;
}

/** What one generation batch changes of the kept policy state (putPolicyState). */
export interface PolicyStateWrite {
  /** Sealed secrets to keep (replacing the node's of the same name). */
  seals?: PolicySealRecord[];
  /** Sealed secrets a node no longer uses. */
  dropSeals?: Array<{ node_id: string; name: string }>;
  /** Problems to keep (replacing the node's). */
  problems?: PolicyProblemRecord[];
  /** Nodes whose policy was generated: their problem goes. */
  clearProblems?: string[];
}

export interface PolicyStore {
  listPolicyObjects(kind: PolicyKind): Promise<PolicyObjectRecord[]>;
  getPolicyObject(kind: PolicyKind, id: string): Promise<PolicyObjectRecord | null>;
  /** Create or replace; returns true when it was created. */
  putPolicyObject(kind: PolicyKind, id: string, body: Record<string, unknown>, at: string): Promise<boolean>;
  deletePolicyObject(kind: PolicyKind, id: string): Promise<boolean>;
  getPolicyBundle(nodeId: string): Promise<PolicyBundleRecord | null>;
  /** Store a node's bundle (replacing the previous); false when the node is unknown. */
  putPolicyBundle(b: PolicyBundleRecord): Promise<boolean>;
  deletePolicyBundle(nodeId: string): Promise<boolean>;
  /** The config ids of the stored bundles of these nodes (absent: none stored). */
  policyConfigIds(nodeIds: string[]): Promise<Map<string, string>>;
  /**
   * Store bundles and set their expectations (as setExpectations) in one transaction, for the
   * generator's batches; nodes that are gone are skipped. Returns how many were stored.
   */
  putPolicies(items: PolicyWrite[]): Promise<number>;
  /**
   * For the generator's batches, what `read` asks for: always the nodes' own properties; with
   * `node`, every known node's hostname and relay (without, only nodes with properties are in the
   * answer); with `certificate` its pinned certificate (secrets in play); with `inventory` when
   * its newest inventory was received (templates reading facts: what changed is rendered again). A plain generation reads the properties alone.
   */
  policyNodeInputs(nodeIds: string[], read: PolicyNodeRead): Promise<Map<string, PolicyNodeInput>>;
  /** The newest inventory of each of these nodes, as JSON text (absent: none received). */
  policyInventories(nodeIds: string[]): Promise<Map<string, string>>;
  /** The sealed secrets kept for these nodes (docs/policy.md, Secrets). */
  policySeals(nodeIds: string[]): Promise<PolicySealRecord[]>;
  /** The kept problems of these nodes, or of every node (null); sorted by node id. */
  policyProblems(nodeIds: string[] | null): Promise<PolicyProblemRecord[]>;
  /** Keep and drop sealed secrets and problems in one transaction; rows of unknown nodes are skipped. */
  putPolicyState(w: PolicyStateWrite): Promise<void>;
}

/** How each policy method treats U+0000 (guard.ts). */
export const POLICY_NUL: NulRules<PolicyStore> = {
  listPolicyObjects: lookup([0], () => []),
  getPolicyObject: lookup([0, 1], () => null),
  putPolicyObject: REFUSE,
  deletePolicyObject: lookup([0, 1], () => false),
  getPolicyBundle: lookup([0], () => null),
  putPolicyBundle: REFUSE,
  deletePolicyBundle: lookup([0], () => false),
  policyConfigIds: lookup([0]),
  // The generator's batches: every bundle and expectation is checked (checkBundleRecord,
  // checkExpectations) by each dialect before anything is written.
  putPolicies: CHECKED,
  policyNodeInputs: lookup([0]),
  policyInventories: lookup([0]),
  policySeals: lookup([0]),
  policyProblems: lookup([0]),
  putPolicyState: REFUSE,
};
