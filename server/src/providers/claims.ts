/**
 * Claims (docs/providers.md, Claims): an agent's inventory naming the cloud identity of an
 * instance a manager discovered. Naming it proves nothing — any host can write any instance id —
 * so the node is registered on its own and the claim is only shown (GET /api/1/nodes/<id>/claim),
 * until it is proved: by a bootstrap job's single-use secret (the ingest joins at once) or by an
 * admin confirming it (POST /api/1/nodes/<id>/claim/confirm), which makes the node take over the
 * discovered row: its cloud identity, address, manager, tags, groups and history. Provider-signed
 * instance identity documents are not checked: there is no place for them yet.
 */
import { capstanError } from '@capstan/shared/errors';
import type { Actor } from '../audit/actor.js';
import { cloudIdentity, type InventoryDoc } from '../ingest/inventory.js';
import type { NodeRegistry } from '../registry/nodes.js';
import type { NodeRecord, Reads } from '../reads.js';

export interface NodeClaim {
  node_id: string;
  /** The identity the node's newest inventory names. */
  cloud: { source_id: string; region: string; account_id: string };
  /** The discovered row (no agent yet) with that identity; null when there is none (any more). */
  discovered: Pick<NodeRecord, 'id' | 'hostname' | 'address' | 'manager' | 'state' | 'tags' | 'groups'> | null;
  /** Always false here: a proved claim has joined its row already. */
  proved: false;
}

type ClaimReads = Pick<Reads, 'getNode' | 'getInventory'> & { managers: Pick<Reads['managers'], 'findDiscovered'> };

/** The node's open claim, or null (none named, or its row joined already). */
export async function nodeClaim(store: ClaimReads, nodeId: string): Promise<NodeClaim | null> {
  const node = await store.getNode(nodeId);
  if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is unknown`);
  if (node.source_id !== null) return null;
  const inv = await store.getInventory(nodeId);
  const doc = inv?.inventory;
  const cloud = doc && typeof doc === 'object' && !Array.isArray(doc) ? cloudIdentity(doc as InventoryDoc) : null;
  if (!cloud) return null;
  const d = await store.managers.findDiscovered(cloud);
  return {
    node_id: nodeId, cloud,
    discovered: d && { id: d.id, hostname: d.hostname, address: d.address, manager: d.manager, state: d.state, tags: d.tags, groups: d.groups },
    proved: false,
  };
}

/** An admin confirms the claim: the node takes over the discovered row. */
export async function confirmClaim(store: ClaimReads, nodes: NodeRegistry, nodeId: string, actor: Actor): Promise<NodeRecord> {
  const claim = await nodeClaim(store, nodeId);
  if (!claim) throw capstanError('ERR_NODE_CLAIM_NONE', `node ${nodeId} claims no cloud identity (or has joined its row already)`);
  if (!claim.discovered) throw capstanError('ERR_NODE_CLAIM_NONE', `no discovered node without an agent has the identity node ${nodeId} claims (${claim.cloud.source_id})`);
  const joined = await nodes.joinDiscovered(nodeId, claim.cloud, claim.discovered.id, actor);
  if (!joined) throw capstanError('ERR_NODE_CLAIM_NONE', `the discovered node ${claim.discovered.id} was taken or changed meanwhile`);
  return joined;
}
