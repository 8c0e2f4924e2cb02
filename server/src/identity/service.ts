/**
 * Node identity at the server: issues tokens to accepted nodes on a signed renewal request,
 * publishes the JWKS, rotates and deletes keys, forces renewals, and verifies tokens for the
 * server's own node-facing routes (relays verify statelessly against the published JWKS).
 */
import { join } from 'node:path';
import {
  capstanError, checkRenewRequest, generateSigningKey, issueNodeToken, jwksOf, readSignedContentUnverified, verifyNodeToken,
  type Logger, type NodeClaims, type TokenAlg,
} from '@capstan/shared';
import type { NodeRecord, Store } from '../store/store.js';
import { IdentityState, type KeyRow } from './state.js';

/** Largest renewal request read (a signed ~100-byte JSON document plus the signer's certificate). */
export const MAX_RENEW_BYTES = 64 * 1024;
/** Pages of 1000 nodes a group's forced renewal walks at most. */
export const MAX_GROUP_PAGES = 1000;

export interface IdentityOptions {
  dataDir: string;
  store: Store;
  log: Logger;
  /** Default token lifetime (ms) and per-group overrides (the first of a node's groups that has one wins). */
  ttlMs: number;
  groupTtlMs: ReadonlyMap<string, number>;
  alg: TokenAlg;
  clockSkewSeconds: number;
  clock?: () => Date;
}

export interface KeyView extends KeyRow {
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

export class NodeIdentity {
  readonly state: IdentityState;
  private readonly clock: () => Date;

  constructor(private readonly o: IdentityOptions) {
    this.state = new IdentityState(join(o.dataDir, 'identity.db'));
    this.clock = o.clock ?? (() => new Date());
    // A keyring always has an active key: the first start makes one.
    if (!this.state.activeKey()) this.state.addActiveKey(generateSigningKey(o.alg), this.clock().toISOString());
  }

  close(): void {
    this.state.close();
  }

  private nowSec(): number {
    return Math.floor(this.clock().getTime() / 1000);
  }

  jwks(): ReturnType<typeof jwksOf> {
    return jwksOf(this.state.publishedJwks(this.nowSec()).map((publicJwk) => ({ publicJwk })));
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
    const key = this.state.activeKey();
    if (!key) throw capstanError('ERR_INTERNAL', 'the keyring has no active key');
    const out = await issueNodeToken({
      key,
      nodeId: node.id,
      group: nodeGroup(node),
      ...(node.region ? { datacenter: node.region } : {}),
      ttlSeconds: this.ttlSecondsFor(node),
      now: this.clock(),
    });
    this.state.recordToken({ node_id: node.id, kid: key.kid, jti: out.claims.jti, iat: out.claims.iat, exp: out.claims.exp });
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
    await checkRenewRequest(body, node.certificate, nodeId, (nonce, until) => this.state.rememberNonce(nonce, Math.ceil(until.getTime() / 1000), this.nowSec()), this.clock());
    const issued = await this.issue(node);
    this.o.log.info({ nodeId, jti: issued.claims.jti, exp: issued.claims.exp }, 'node token issued');
    return issued;
  }

  /**
   * Verify a node token at the server (its own keyring): the relay's checks, plus the forced
   * renewal time, which only the server knows.
   */
  async verify(token: string, nodeId?: string): Promise<NodeClaims> {
    const claims = await verifyNodeToken(token, this.jwks(), { nodeId, now: this.clock(), clockSkewSeconds: this.o.clockSkewSeconds });
    const row = this.state.getToken(claims.capstan_node_id);
    if (row && claims.iat < row.forced_after) throw capstanError('ERR_TOKEN_EXPIRED', 'node token was revoked by a forced renewal: renew it');
    return claims;
  }

  /** The node gets a new token at its next contact: tokens issued until now are refused. */
  async forceRenewal(nodeId: string): Promise<{ node_id: string; forced_at: string }> {
    const node = await this.o.store.getNode(nodeId);
    if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is unknown`);
    // +1: a token issued in this same second is older than the request too.
    const at = this.nowSec() + 1;
    this.state.forceRenewal(nodeId, at);
    return { node_id: nodeId, forced_at: new Date(at * 1000).toISOString() };
  }

  /** Force renewal for every node of a group (by pages, sorted by id so none is skipped or repeated). */
  async forceGroupRenewal(group: string): Promise<{ group: string; nodes: number; forced_at: string }> {
    const at = this.nowSec() + 1;
    let nodes = 0;
    // Bounded: MAX_GROUP_PAGES × 1000 nodes, far above any fleet this server is sized for.
    for (let page = 1; page <= MAX_GROUP_PAGES; page++) {
      const res = await this.o.store.listNodes({ filters: [{ key: 'group', values: [group], exclude: false }], sort: 'id', order: 'asc', page, per_page: 1000 });
      for (const n of res.data) this.state.forceRenewal(n.id, at);
      nodes += res.data.length;
      if (res.data.length < 1000) break;
    }
    this.o.log.info({ group, nodes }, 'forced renewal of a group');
    return { group, nodes, forced_at: new Date(at * 1000).toISOString() };
  }

  listKeys(): KeyView[] {
    const now = this.nowSec();
    return this.state.listKeys().map((k) => ({ ...k, nodes: this.state.nodesUsingKey(k.kid, now), published: k.active || k.max_exp > now }));
  }

  /** A new active key; the old one keeps verifying the tokens it signed until they expire. */
  rotate(alg: TokenAlg = this.o.alg): KeyView {
    const key = generateSigningKey(alg);
    this.state.addActiveKey(key, this.clock().toISOString());
    this.o.log.info({ kid: key.kid, alg }, 'signing key rotated');
    return this.listKeys().find((k) => k.kid === key.kid)!;
  }

  /** Delete a retired key; refused (409, with the node count) while it signs unexpired tokens, unless forced. */
  deleteKey(kid: string, force: boolean): { kid: string; nodes: number } {
    const key = this.state.getKey(kid);
    if (!key) throw capstanError('ERR_NOT_FOUND', `no signing key ${kid}`);
    if (key.active) throw capstanError('ERR_CONFLICT', `key ${kid} is the active key: rotate first`, { details: { kid } });
    const nodes = this.state.nodesUsingKey(kid, this.nowSec());
    if (nodes > 0 && !force) {
      throw capstanError('ERR_CONFLICT', `key ${kid} still signs the unexpired tokens of ${nodes} node(s); use force to delete it anyway`, { details: { kid, nodes } });
    }
    this.state.deleteKey(kid);
    this.o.log.warn({ kid, nodes }, 'signing key deleted');
    return { kid, nodes };
  }
}
