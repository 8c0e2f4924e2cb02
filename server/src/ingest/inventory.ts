/**
 * Inventory ingest. An inventory carries the node's certificate; its S/MIME signature proves the
 * sender holds that key. For an unknown node that is enough to register it as pending; for a known,
 * accepted node the signature must verify against the certificate pinned at acceptance, so another
 * key can never take over a node id.
 */
import { readFile } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';
import { INVENTORY_TOKEN_FIELD } from '@capstan/shared/identity/renew';
import { type InventoryInfo, parseInventoryName } from '@capstan/shared/runlog/name';
import { certificateFingerprint, certificateNodeId } from '@capstan/shared/smime/identity';
import { autoAcceptCause, MIN_SECRET_LENGTH, SECRET_FIELD } from '../registry/enrollment.js';
import { enrolDigest } from '../bootstrap/runner.js';
import type { NodeRecord } from '../store/store.js';
import type { IngestDeps } from './runlog.js';
import { readSignFile } from './ocs-ingest.js';
import { readInventory, readSmallInventory, type InventoryJob } from './inventory-read.js';
import { nodeActor } from '../audit/actor.js';
import { normaliseInventory } from './inventory-fields.js';

export interface InventoryDoc {
  node_id: string;
  hostname: string;
  certificate: string;
  agent_version: string;
  policy_server: string;
  os: { name: string; version: string; kernel: string; arch: string };
  [k: string]: unknown;
}

export { validateInventory } from './inventory-read.js';

/**
 * The cloud identity an inventory carries: `cloud: {instance_id, region, account_id}` (the agent
 * reads its instance metadata), or the same under `facts.cloud`. Absent or partial → null.
 */
export function cloudIdentity(doc: InventoryDoc): { source_id: string; region: string; account_id: string } | null {
  const facts = doc.facts as Record<string, unknown> | undefined;
  const c = (doc.cloud ?? (facts && typeof facts === 'object' ? facts.cloud : undefined)) as Record<string, unknown> | undefined;
  if (!c || typeof c !== 'object') return null;
  const { instance_id: id, region, account_id: account } = c;
  const ok = (v: unknown): v is string => typeof v === 'string' && v.length > 0 && v.length <= 255 && !/[\u0000-\u001f]/.test(v);
  return ok(id) && ok(region) && ok(account) ? { source_id: id, region, account_id: account } : null;
}

/**
 * A bootstrap task's secret in a newcomer's inventory: used once (a second inventory with it is
 * an ordinary newcomer), it yields the cloud identity of the row to join and the acceptance cause.
 */
async function bootstrapEnrolment(
  deps: IngestDeps, nodeId: string, secret: unknown, at: string,
): Promise<{ cause: string; identity: { source_id: string; region: string; account_id: string } | null } | null> {
  if (typeof secret !== 'string' || secret.length < MIN_SECRET_LENGTH || secret.length > 256) return null;
  const use = await deps.store.bootstrap.useEnrolToken(enrolDigest(secret), at, nodeId);
  if (!use) return null;
  const row = await deps.store.getNode(use.node_id);
  const identity = row?.source_id && row.region && row.account_id ? { source_id: row.source_id, region: row.region, account_id: row.account_id } : null;
  return { cause: `auto-accept: bootstrap job ${use.job_id}`, identity };
}

/** Reads inventories off the event loop (inventory-pool.ts); `accepted` ones go first. */
export interface InventoryReader {
  read(job: InventoryJob, accepted: boolean): Promise<InventoryDoc>;
  /** Inventories of at most this many bytes decompressed are read in this thread (0: none). */
  inlineBytes: number;
}

/** The inventory at `path` (and its `.sign`), read by the pool when there is one, else here. */
async function readUpload(deps: IngestDeps, path: string, info: InventoryInfo, known: NodeRecord | null, signPath: string | undefined): Promise<InventoryDoc> {
  if (info.format === 'ocs' && (info.signature || !signPath)) {
    throw capstanError('ERR_OCS_UNPAIRED', `${info.fileName} is one half of an OCS inventory; the pair is read through its inventory`);
  }
  const job: InventoryJob = {
    format: info.format, compression: info.compression, raw: await readFile(path),
    ...(info.format === 'ocs' && signPath ? { sign: await readSignFile(signPath) } : {}),
    known: known ? { accepted: known.accepted, certificate: known.certificate ?? null } : null,
    limits: deps.limits,
  };
  const pool = deps.inventoryReader;
  if (!pool) return readInventory(job);
  return (pool.inlineBytes > 0 ? await readSmallInventory(job, pool.inlineBytes) : null) ?? pool.read(job, known?.accepted === 'accepted');
}

/**
 * `path` is the inventory itself, or for a RUDDER agent's OCS inventory, `{ ocsSignature }` names
 * the `.sign` uploaded beside it (ingest/ocs-ingest.ts pairs them).
 */
export async function ingestInventory(deps: IngestDeps, path: string, name: string, opts: { ocsSignature?: string } = {}): Promise<NodeRecord> {
  const info = parseInventoryName(name);
  const known = await deps.store.getNode(info.nodeId);
  if (known?.accepted === 'refused') throw capstanError('ERR_NODE_REFUSED', `node ${info.nodeId} was refused`);
  const doc = await readUpload(deps, path, info, known, opts.ocsSignature);
  if (doc.node_id !== info.nodeId) {
    throw capstanError('ERR_NODE_MISMATCH', `inventory names node ${doc.node_id} but was sent as ${info.nodeId}`);
  }
  if (certificateNodeId(doc.certificate) !== info.nodeId) {
    throw capstanError('ERR_NODE_MISMATCH', 'certificate subject UID does not match the node id');
  }
  // Lifecycle hook: auto-accept rules. The secret proves enrollment once; it is not kept, nor is
  // a token request (a one-time nonce, answered at upload time: identity/service.ts).
  const { [SECRET_FIELD]: secret, [INVENTORY_TOKEN_FIELD]: _tokenRequest, ...kept } = doc;
  const receivedAt = (deps.now?.() ?? new Date()).toISOString();
  // An agent a bootstrap job installed: the job's single-use secret names the row it was
  // installed for; that row is joined and the node accepted (the job's credential proved the host).
  const bootstrap = known ? null : await bootstrapEnrolment(deps, info.nodeId, secret, receivedAt);
  const autoAccept = bootstrap?.cause ?? (deps.enrollment
    ? autoAcceptCause(deps.enrollment, { nodeId: info.nodeId, hostname: doc.hostname, secret })
    : null);
  // An agent a bootstrap installed on a discovered instance takes over that row (pending again,
  // so acceptance goes as for any newcomer). A cloud identity the inventory merely names proves
  // nothing: the node is registered on its own, and the claim waits for an admin's confirmation
  // (providers/claims.ts, POST /api/1/nodes/<id>/claim/confirm).
  const cloud = known ? null : (bootstrap?.identity ?? null);
  const actor = nodeActor(info.nodeId);
  if (cloud) await deps.nodes.adoptDiscovered(info.nodeId, cloud, receivedAt, actor);
  const fingerprint = certificateFingerprint(doc.certificate);
  const node = await deps.nodes.recordInventory({
    id: info.nodeId,
    hostname: doc.hostname,
    certificate: doc.certificate,
    certificate_fingerprint: fingerprint,
    os_name: doc.os.name,
    os_version: doc.os.version,
    agent_version: doc.agent_version,
    policy_server: doc.policy_server,
    // Optional fields of the wrong type are left out and named in `errors` (inventory-fields.ts).
    inventory: normaliseInventory(kept).doc,
    received_at: receivedAt,
    sent_at: info.timestamp,
    auto_accept: autoAccept,
  }, actor);
  // Another key claiming a node that is not accepted yet: recorded for the admin, and the file
  // goes to failed/ with this reason (the node's own certificate stays pinned).
  if (node.conflict_fingerprint === fingerprint && node.certificate_fingerprint !== fingerprint) {
    throw capstanError('ERR_CERTIFICATE_CONFLICT', `node ${info.nodeId} holds certificate ${node.certificate_fingerprint}; this inventory carries ${fingerprint}: an admin chooses at acceptance`);
  }
  await deps.onInventory?.(node.id, kept);
  return node;
}
