/**
 * Node identity at the server: issues tokens to accepted nodes on a signed renewal request,
 * publishes the JWKS, rotates and deletes keys, forces renewals, and verifies tokens for the
 * server's own node-facing routes (relays verify statelessly against the published JWKS).
 */
import { join } from 'node:path';
import { decompress } from '@capstan/shared/envelope/codec';
import { capstanError } from '@capstan/shared/errors';
import { RELAY_ROLE, type NodeClaims, type NodeRole } from '@capstan/shared/identity/claims';
import { generateSigningKey, jwksOf } from '@capstan/shared/identity/keyring';
import { checkRenewRequest, checkTokenRequestStamp, INVENTORY_TOKEN_FIELD } from '@capstan/shared/identity/renew';
import { issueNodeToken, verifyNodeToken, type SigningKey, type TokenAlg } from '@capstan/shared/identity/token';
import type { Logger } from '@capstan/shared/log';
import { parseInventoryName } from '@capstan/shared/runlog/name';
import { readSignedContentUnverified, verifySmime } from '@capstan/shared/smime/verify';
import type { IdentityInitial, IdentityKeyRecord, IdentityKeyRow, NodeRecord, Store } from '../store/store.js';
import { readLegacyIdentity, retireLegacyIdentity } from './legacy.js';
import { KeySealer } from './seal.js';
import type { Actor } from '../audit/actor.js';
import type { AuditLog } from '../audit/log.js';

type JWK = SigningKey['publicJwk'];

/** Largest renewal request read (a signed ~100-byte JSON document plus the signer's certificate). */
export const MAX_RENEW_BYTES = 64 * 1024;
/** Pages of 1000 nodes a group's forced renewal walks at most. */
export const MAX_GROUP_PAGES = 1000;
/**
 * How long this process reuses the published keys it read (the server's own checks of policy
 * downloads). Another server's rotation is seen within this time; a token signed by a key not in
 * the copy rereads it at once, and this process's own changes drop the copy.
 */
export const JWKS_CACHE_MS = 5000;

export interface IdentityOptions {
  dataDir: string;
  /** The key-encryption secret (a file, the same for every server on the database); default <dataDir>/identity.secret. */
  secretFile?: string;
  store: Store;
  log: Logger;
  /** Default token lifetime (ms) and per-group overrides (the first of a node's groups that has one wins). */
  ttlMs: number;
  groupTtlMs: ReadonlyMap<string, number>;
  alg: TokenAlg;
  clockSkewSeconds: number;
  clock?: () => Date;
  /** Accept SHA-1 signatures on renewal requests and inventories (`[signatures] allow_sha1`). */
  allowSha1?: boolean;
  /** Where admins' changes to the keyring and forced renewals are recorded (audit/log.ts). */
  audit?: AuditLog;
}

export interface KeyView extends IdentityKeyRow {
  /** Nodes whose current unexpired token this key signed. */
  nodes: number;
  published: boolean;
}

export interface IssuedToken {
  token: string;
  claims: NodeClaims;
}

/** The group named in a node's token: its first group, or `default`. */
export function nodeGroup(node: Pick<NodeRecord, 'groups'>): string {
  return node.groups[0] ?? 'default';
}

export function defaultSecretFile(dataDir: string): string {
  return join(dataDir, 'identity.secret');
}

export class NodeIdentity {
  private readonly clock: () => Date;
  private jwksCopy: { at: number; jwks: ReturnType<typeof jwksOf> } | null = null;

  private constructor(private readonly o: IdentityOptions, private readonly sealer: KeySealer) {
    this.clock = o.clock ?? (() => new Date());
  }

  /** The keyring's sealer, which also seals the bootstrap credentials (bootstrap/credentials.ts). */
  get keySealer(): KeySealer {
    return this.sealer;
  }

  /**
   * The keyring of the registry database. The first start on an empty database makes the first
   * key (or imports an old <data-dir>/identity.db once); every start checks the secret file opens
   * every stored key, so a server given the wrong secret stops (ERR_STARTUP) instead of signing
   * with a keyring of its own.
   */
  static async open(o: IdentityOptions): Promise<NodeIdentity> {
    const ids = o.store.identity;
    const secretFile = o.secretFile || defaultSecretFile(o.dataDir);
    const hadKeys = (await ids.listKeys()).length > 0;
    // Only a keyring not made yet may come with a new secret; a stored one needs the secret it was sealed with.
    const { sealer, created } = await KeySealer.load(secretFile, !hadKeys);
    if (created) o.log.info({ file: secretFile }, 'identity secret created: give the same file to every server sharing this database');
    const self = new NodeIdentity(o, sealer);
    const legacyPath = join(o.dataDir, 'identity.db');
    const legacy = readLegacyIdentity(legacyPath);
    const at = self.clock().toISOString();
    let imported = false;
    const stored = await ids.initKeyring((): IdentityInitial => {
      if (legacy && legacy.keys.length > 0) {
        imported = true;
        return {
          keys: legacy.keys.map((k) => ({ ...k, sealed_private: sealer.seal(k.kid, k.private_jwk) })),
          tokens: legacy.tokens,
        };
      }
      return { keys: [self.sealKey(generateSigningKey(o.alg), at, true)], tokens: [] };
    });
    if (legacy) {
      if (stored) {
        // Imported (or empty: nothing to carry over); either way it is never read again.
        const to = retireLegacyIdentity(legacyPath);
        o.log.info({ keys: imported ? legacy.keys.length : 0, tokens: imported ? legacy.tokens.length : 0, renamedTo: to }, 'identity.db imported into the registry database');
      } else {
        o.log.warn({ file: legacyPath }, 'identity.db not imported: the registry database already holds a keyring');
      }
    }
    for (const k of await ids.allKeys()) {
      if (sealer.open(k.kid, k.sealed_private) === null) {
        throw capstanError('ERR_STARTUP', `identity secret ${secretFile} does not open signing key ${k.kid} stored in the database: every server sharing a database needs the same identity secret file`);
      }
    }
    if (!(await ids.activeKey())) throw capstanError('ERR_STARTUP', 'the signing keyring in the database has no active key: rotate one (capstan-server keys rotate)');
    return self;
  }

  /** The nbf/exp allowance of token checks, in seconds (a link opened with a token lasts until exp plus this). */
  get clockSkewSeconds(): number {
    return this.o.clockSkewSeconds;
  }

  /** The store belongs to the caller; kept so callers written for the file-backed keyring still work. */
  close(): void {}

  private sealKey(key: SigningKey, at: string, active: boolean): IdentityKeyRecord {
    return {
      kid: key.kid, alg: key.alg, active, created_at: at, retired_at: null, max_exp: 0,
      public_jwk: JSON.stringify(key.publicJwk), sealed_private: this.sealer.seal(key.kid, JSON.stringify(key.privateJwk)),
    };
  }

  private nowSec(): number {
    return Math.floor(this.clock().getTime() / 1000);
  }

  async jwks(fresh = false): Promise<ReturnType<typeof jwksOf>> {
    const now = this.clock().getTime();
    if (!fresh && this.jwksCopy && Math.abs(now - this.jwksCopy.at) < JWKS_CACHE_MS) return this.jwksCopy.jwks;
    const jwks = jwksOf((await this.o.store.identity.publishedKeys(this.nowSec())).map((j) => ({ publicJwk: JSON.parse(j) as JWK })));
    this.jwksCopy = { at: now, jwks };
    return jwks;
  }

  /** The active key, opened (in process only: issuing, and tests minting tokens with the real key). */
  async activeKey(): Promise<SigningKey> {
    const row = await this.o.store.identity.activeKey();
    if (!row) throw capstanError('ERR_INTERNAL', 'the keyring has no active key');
    const priv = this.sealer.open(row.kid, row.sealed_private);
    // Another server with another secret rotated: this one cannot sign with the new key.
    if (priv === null) throw capstanError('ERR_INTERNAL', `the identity secret does not open the active key ${row.kid}: servers sharing a database need the same identity secret file`);
    return { kid: row.kid, alg: row.alg as TokenAlg, privateJwk: JSON.parse(priv) as JWK, publicJwk: JSON.parse(row.public_jwk) as JWK };
  }

  ttlSecondsFor(node: Pick<NodeRecord, 'groups'>): number {
    for (const g of node.groups) {
      const ms = this.o.groupTtlMs.get(g);
      if (ms !== undefined) return Math.floor(ms / 1000);
    }
    return Math.floor(this.o.ttlMs / 1000);
  }

  /** Issue and record a token for an accepted node. */
  async issue(node: NodeRecord): Promise<IssuedToken> {
    const key = await this.activeKey();
    // A forced renewal refuses tokens issued before its second + 1 (forceRenewal): a token asked for
    // right after one is dated at that second, or it would be refused as soon as it is issued.
    const forcedAfterMs = ((await this.o.store.identity.getToken(node.id))?.forced_after ?? 0) * 1000;
    const now = this.clock();
    const out = await issueNodeToken({
      key,
      nodeId: node.id,
      group: nodeGroup(node),
      ...(node.region ? { datacenter: node.region } : {}),
      // A node an admin registered as a relay: only such tokens open the relay-only endpoints.
      ...(node.relay ? { role: RELAY_ROLE } : {}),
      ttlSeconds: this.ttlSecondsFor(node),
      now: forcedAfterMs > now.getTime() ? new Date(forcedAfterMs) : now,
    });
    await this.o.store.identity.recordToken({ node_id: node.id, kid: key.kid, jti: out.claims.jti, iat: out.claims.iat, exp: out.claims.exp });
    return out;
  }

  /**
   * `POST /identity/renew`: the body is the S/MIME signed request. The node named inside is looked
   * up first (unverified read), then the signature is checked against that node's pinned
   * certificate only — a request signed by any other key fails there.
   */
  async renew(body: Buffer): Promise<IssuedToken> {
    if (body.length > MAX_RENEW_BYTES) throw capstanError('ERR_BODY_TOO_LARGE', `renewal request is larger than ${MAX_RENEW_BYTES} bytes`);
    let nodeId: unknown;
    try {
      nodeId = (JSON.parse(readSignedContentUnverified(body, { maxBytes: MAX_RENEW_BYTES }).toString('utf8')) as { node_id?: unknown }).node_id;
    } catch (err) {
      if ((err as { code?: string }).code?.startsWith('ERR_SMIME')) throw err;
      throw capstanError('ERR_BAD_REQUEST', 'renewal request is not signed JSON');
    }
    if (typeof nodeId !== 'string' || nodeId === '') throw capstanError('ERR_BAD_REQUEST', 'renewal request names no node');
    const node = await this.o.store.getNode(nodeId);
    // Unknown is a 403 here, not a 404: the caller is refused an identity, nothing is "not found".
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is unknown`, { statusCode: 403 });
    if (node.accepted === 'pending') throw capstanError('ERR_NODE_PENDING', `node ${nodeId} is not accepted yet`);
    if (node.accepted === 'refused') throw capstanError('ERR_NODE_REFUSED', `node ${nodeId} is refused`);
    if (!node.certificate) throw capstanError('ERR_NODE_PENDING', `node ${nodeId} has no pinned certificate`);
    await checkRenewRequest(body, node.certificate, nodeId, (nonce, until) => this.o.store.identity.rememberNonce(nonce, Math.ceil(until.getTime() / 1000), this.nowSec()), this.clock(), { allowSha1: this.o.allowSha1 === true });
    const issued = await this.issue(node);
    this.o.log.info({ nodeId, jti: issued.claims.jti, exp: issued.claims.exp }, 'node token issued');
    return issued;
  }

  /**
   * The token a node asks for inside its signed inventory (INVENTORY_TOKEN_FIELD: a fresh time
   * and a nonce), handed back in the answer to the upload when this server receives it from the
   * agent itself. The renewal request's checks: the pinned certificate of an accepted node, the
   * time window, a nonce never used. Null when the inventory asks for none or its node is not
   * accepted (a newcomer renews once accepted); coded errors otherwise.
   */
  async issueForInventory(name: string, data: Buffer, maxDecompressedBytes: number): Promise<IssuedToken | null> {
    const info = parseInventoryName(name);
    // RUDDER agents' OCS inventories carry no token request (their agents renew nothing).
    if (info.format === 'ocs') return null;
    const node = await this.o.store.getNode(info.nodeId);
    if (!node || node.accepted !== 'accepted' || !node.certificate) return null;
    const signed = await decompress(data, info.compression, { maxBytes: maxDecompressedBytes });
    const { content } = verifySmime(signed, [node.certificate], { maxBytes: maxDecompressedBytes, allowSha1: this.o.allowSha1 === true });
    let doc: Record<string, unknown>;
    try {
      doc = JSON.parse(content.toString('utf8')) as Record<string, unknown>;
    } catch {
      throw capstanError('ERR_BAD_REQUEST', 'inventory is not JSON');
    }
    const stamp = doc?.[INVENTORY_TOKEN_FIELD];
    if (!stamp || typeof stamp !== 'object') return null;
    if (doc.node_id !== info.nodeId) throw capstanError('ERR_TOKEN_WRONG_NODE', `inventory names ${String(doc.node_id)}, sent as ${info.nodeId}`);
    await checkTokenRequestStamp(stamp as Record<string, unknown>, (nonce, until) => this.o.store.identity.rememberNonce(nonce, Math.ceil(until.getTime() / 1000), this.nowSec()), this.clock());
    const issued = await this.issue(node);
    this.o.log.info({ nodeId: node.id, jti: issued.claims.jti, exp: issued.claims.exp }, 'node token issued with an inventory');
    return issued;
  }

  /**
   * Verify a node token at the server (its own keyring): the relay's checks, plus the forced
   * renewal time, which only the server knows.
   */
  async verify(token: string, nodeId?: string, role?: NodeRole): Promise<NodeClaims> {
    const opts = { nodeId, role, now: this.clock(), clockSkewSeconds: this.o.clockSkewSeconds };
    let claims: NodeClaims;
    try {
      claims = await verifyNodeToken(token, await this.jwks(), opts);
    } catch (err) {
      // A key another server made since this copy was read: read the keys again, once.
      if ((err as { code?: string }).code !== 'ERR_TOKEN_UNKNOWN_KEY') throw err;
      claims = await verifyNodeToken(token, await this.jwks(true), opts);
    }
    const row = await this.o.store.identity.getToken(claims.capstan_node_id);
    if (row && claims.iat < row.forced_after) throw capstanError('ERR_TOKEN_EXPIRED', 'node token was revoked by a forced renewal: renew it');
    return claims;
  }

  /** The node gets a new token at its next contact: tokens issued until now are refused. */
  async forceRenewal(nodeId: string, actor: Actor): Promise<{ node_id: string; forced_at: string }> {
    const node = await this.o.store.getNode(nodeId);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is unknown`);
    // +1: a token issued in this same second is older than the request too.
    const at = this.nowSec() + 1;
    await this.o.store.identity.forceRenewal([nodeId], at);
    const forced = { node_id: nodeId, forced_at: new Date(at * 1000).toISOString() };
    await this.o.audit?.record(actor, { action: 'node.identity.renew', target: nodeId, before: null, after: forced });
    return forced;
  }

  /** Force renewal for every node of a group (by pages, sorted by id so none is skipped or repeated). */
  async forceGroupRenewal(group: string, actor: Actor): Promise<{ group: string; nodes: number; forced_at: string }> {
    const at = this.nowSec() + 1;
    let nodes = 0;
    // Bounded: MAX_GROUP_PAGES × 1000 nodes, far above any fleet this server is sized for.
    for (let page = 1; page <= MAX_GROUP_PAGES; page++) {
      const res = await this.o.store.listNodes({ filters: [{ key: 'group', values: [group], exclude: false }], sort: 'id', order: 'asc', page, per_page: 1000 });
      await this.o.store.identity.forceRenewal(res.data.map((n) => n.id), at);
      nodes += res.data.length;
      if (res.data.length < 1000) break;
    }
    this.o.log.info({ group, nodes }, 'forced renewal of a group');
    const forced = { group, nodes, forced_at: new Date(at * 1000).toISOString() };
    await this.o.audit?.record(actor, { action: 'group.identity.renew', target: group, before: null, after: forced });
    return forced;
  }

  async listKeys(): Promise<KeyView[]> {
    const now = this.nowSec();
    const out: KeyView[] = [];
    for (const k of await this.o.store.identity.listKeys()) {
      out.push({ ...k, nodes: await this.o.store.identity.nodesUsingKey(k.kid, now), published: k.active || k.max_exp > now });
    }
    return out;
  }

  /** A new active key; the old one keeps verifying the tokens it signed until they expire. */
  async rotate(actor: Actor, alg: TokenAlg = this.o.alg): Promise<KeyView> {
    const key = generateSigningKey(alg);
    const { active: _a, retired_at: _r, max_exp: _m, ...row } = this.sealKey(key, this.clock().toISOString(), true);
    await this.o.store.identity.addActiveKey(row);
    this.jwksCopy = null;
    this.o.log.info({ kid: key.kid, alg }, 'signing key rotated');
    const view = (await this.listKeys()).find((k) => k.kid === key.kid)!;
    await this.o.audit?.record(actor, { action: 'key.rotate', target: key.kid, before: null, after: view });
    return view;
  }

  /** Delete a retired key; refused (409, with the node count) while it signs unexpired tokens, unless forced. */
  async deleteKey(kid: string, force: boolean, actor: Actor): Promise<{ kid: string; nodes: number }> {
    const key = await this.o.store.identity.getKey(kid);
    if (!key) throw capstanError('ERR_NOT_FOUND', `no signing key ${kid}`);
    if (key.active) throw capstanError('ERR_CONFLICT', `key ${kid} is the active key: rotate first`, { details: { kid } });
    const nodes = await this.o.store.identity.nodesUsingKey(kid, this.nowSec());
    if (nodes > 0 && !force) {
      throw capstanError('ERR_CONFLICT', `key ${kid} still signs the unexpired tokens of ${nodes} node(s); use force to delete it anyway`, { details: { kid, nodes } });
    }
    await this.o.store.identity.deleteKey(kid);
    this.jwksCopy = null;
    this.o.log.warn({ kid, nodes }, 'signing key deleted');
    await this.o.audit?.record(actor, { action: 'key.delete', target: kid, before: { ...key, sealed_private: undefined }, after: null });
    return { kid, nodes };
  }
}
