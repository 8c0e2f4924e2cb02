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
import { readSignedContentUnverified, verifySmime } from '@capstan/shared/smime/verify';
import { autoAcceptCause, MIN_SECRET_LENGTH, SECRET_FIELD } from '../registry/enrollment.js';
import { enrolDigest } from '../bootstrap/runner.js';
import type { NodeRecord } from '../store/store.js';
import type { IngestDeps } from './runlog.js';
import { verifiedOcs } from './ocs-ingest.js';
import { nodeActor } from '../audit/actor.js';
import { decompressUpload } from './runlog-prepare.js';

export interface InventoryDoc {
  node_id: string;
  hostname: string;
  certificate: string;
  agent_version: string;
  policy_server: string;
  os: { name: string; version: string; kernel: string; arch: string };
  [k: string]: unknown;
}

function invalid(msg: string): never {
  throw capstanError('ERR_INVENTORY_INVALID', msg);
}

/** Check the required fields of DESIGN.md's inventory contract; unknown fields are kept. */
export function validateInventory(doc: unknown): InventoryDoc {
  if (!doc || typeof doc !== 'object' || Array.isArray(doc)) invalid('inventory must be a JSON object');
  const d = doc as Record<string, unknown>;
  for (const f of ['node_id', 'hostname', 'certificate', 'agent_version', 'policy_server'] as const) {
    if (typeof d[f] !== 'string' || (d[f] as string).length === 0) invalid(`inventory.${f} must be a non-empty string`);
  }
  const os = d.os as Record<string, unknown> | undefined;
  if (!os || typeof os !== 'object') invalid('inventory.os must be an object');
  for (const f of ['name', 'version', 'kernel', 'arch']) {
    if (typeof os[f] !== 'string') invalid(`inventory.os.${f} must be a string`);
  }
  return d as InventoryDoc;
}

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

function parseJson(content: Buffer): unknown {
  try {
    return JSON.parse(content.toString('utf8'));
  } catch {
    return invalid('inventory is not valid JSON');
  }
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

/** A Capstan agent's inventory: S/MIME-signed JSON, compressed. */
async function verifiedJson(deps: IngestDeps, path: string, info: InventoryInfo, known: NodeRecord | null): Promise<InventoryDoc> {
  const raw = await readFile(path);
  const { out: signed, release } = await decompressUpload(raw, info.compression, deps.limits.maxDecompressedBytes, deps.limits);
  try {
    return verifiedJsonDecompressed(deps, signed, known);
  } finally {
    release();
  }
}

function verifiedJsonDecompressed(deps: IngestDeps, signed: Buffer, known: NodeRecord | null): InventoryDoc {
  // Which certificate must have signed it: the pinned one, or for a newcomer the one it carries.
  let signer: string;
  if (known?.accepted === 'accepted' && known.certificate) {
    signer = known.certificate;
  } else {
    const claimed = validateInventory(parseJson(readSignedContentUnverified(signed)));
    signer = claimed.certificate;
  }
  const verified = verifySmime(signed, [signer], { maxBytes: deps.limits.maxDecompressedBytes, allowSha1: deps.limits.allowSha1 === true });
  return validateInventory(parseJson(verified.content));
}

/**
 * `path` is the inventory itself, or for a RUDDER agent's OCS inventory, `{ ocsSignature }` names
 * the `.sign` uploaded beside it (ingest/ocs-ingest.ts pairs them).
 */
export async function ingestInventory(deps: IngestDeps, path: string, name: string, opts: { ocsSignature?: string } = {}): Promise<NodeRecord> {
  const info = parseInventoryName(name);
  const known = await deps.store.getNode(info.nodeId);
  if (known?.accepted === 'refused') throw capstanError('ERR_NODE_REFUSED', `node ${info.nodeId} was refused`);
  const doc = info.format === 'ocs'
    ? await verifiedOcs(deps, path, info, known, opts.ocsSignature)
    : await verifiedJson(deps, path, info, known);
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
  // An agent on an instance a manager discovered: its first inventory takes over that row
  // (pending again, so acceptance goes as for any newcomer) instead of making a second node.
  const cloud = known ? null : (bootstrap?.identity ?? cloudIdentity(doc));
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
    inventory: kept,
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
