/**
 * Node identity tokens: short-lived JWTs the server issues to accepted nodes (Nomad-style claims)
 * and relays verify statelessly against the server's published keys (JWKS). jose does the JOSE
 * work; this module fixes the claims, the audience and the error codes.
 */
import { randomUUID } from 'node:crypto';
import { SignJWT, createLocalJWKSet, decodeProtectedHeader, errors as joseErrors, importJWK, jwtVerify, type JSONWebKeySet, type JWK } from 'jose';
import { capstanError } from '../errors.js';

export const TOKEN_AUDIENCE = 'capstan';
export type TokenAlg = 'EdDSA' | 'RS256';
export { RELAY_ROLE, tokenNeedsRenewal, type NodeClaims, type NodeRole } from './claims.js';
import { RELAY_ROLE, type NodeClaims, type NodeRole } from './claims.js';

export interface SigningKey {
  kid: string;
  alg: TokenAlg;
  privateJwk: JWK;
  publicJwk: JWK;
}

export interface IssueOptions {
  key: SigningKey;
  nodeId: string;
  group: string;
  datacenter?: string;
  /** `relay` when the node is registered as a relay. */
  role?: NodeRole;
  ttlSeconds: number;
  now?: Date;
}

export async function issueNodeToken(o: IssueOptions): Promise<{ token: string; claims: NodeClaims }> {
  // No eternal tokens: a TTL of 0 (or less) would mean "never expires" in too many minds.
  if (!Number.isSafeInteger(o.ttlSeconds) || o.ttlSeconds <= 0) {
    throw capstanError('ERR_BAD_REQUEST', 'token TTL must be a positive number of seconds');
  }
  const iat = Math.floor((o.now ?? new Date()).getTime() / 1000);
  const claims: NodeClaims = {
    sub: `node:${o.nodeId}`,
    capstan_node_id: o.nodeId,
    capstan_node_group: o.group,
    ...(o.datacenter ? { capstan_datacenter: o.datacenter } : {}),
    ...(o.role ? { capstan_role: o.role } : {}),
    iat,
    nbf: iat,
    exp: iat + o.ttlSeconds,
    jti: randomUUID(),
    aud: TOKEN_AUDIENCE,
  };
  const key = await importJWK(o.key.privateJwk, o.key.alg);
  const token = await new SignJWT({ ...claims }).setProtectedHeader({ alg: o.key.alg, kid: o.key.kid, typ: 'JWT' }).sign(key);
  return { token, claims };
}

export interface VerifyTokenOptions {
  /** The node the request is about (the path's node id): a token of another node → 403. */
  nodeId?: string;
  /** `relay`: only a relay's token will do (another node's → 403 ERR_TOKEN_NOT_RELAY). */
  role?: NodeRole;
  now?: Date;
  clockSkewSeconds?: number;
}

/** The key id a token names, without verifying anything (to decide whether to refresh a JWKS). */
export function tokenKeyId(token: string): string | undefined {
  try {
    return decodeProtectedHeader(token).kid;
  } catch {
    return undefined;
  }
}

export async function verifyNodeToken(token: string, jwks: JSONWebKeySet, o: VerifyTokenOptions = {}): Promise<NodeClaims> {
  let payload;
  try {
    ({ payload } = await jwtVerify(token, createLocalJWKSet(jwks), {
      audience: TOKEN_AUDIENCE,
      algorithms: ['EdDSA', 'RS256'],
      clockTolerance: o.clockSkewSeconds ?? 60,
      currentDate: o.now,
      requiredClaims: ['exp', 'nbf', 'iat', 'sub'],
    }));
  } catch (err) {
    if (err instanceof joseErrors.JWTExpired) throw capstanError('ERR_TOKEN_EXPIRED', 'node token has expired: renew it');
    if (err instanceof joseErrors.JWKSNoMatchingKey) throw capstanError('ERR_TOKEN_UNKNOWN_KEY', 'node token is signed by an unknown key');
    throw capstanError('ERR_TOKEN_INVALID', `node token does not verify: ${(err as Error).message}`);
  }
  const claims = payload as unknown as NodeClaims;
  if (typeof claims.capstan_node_id !== 'string' || claims.sub !== `node:${claims.capstan_node_id}`) {
    throw capstanError('ERR_TOKEN_INVALID', 'node token has no consistent node id');
  }
  if (claims.capstan_role !== undefined && claims.capstan_role !== RELAY_ROLE) {
    throw capstanError('ERR_TOKEN_INVALID', 'node token names an unknown role');
  }
  // The role first: an agent's token shown for a relay's path is "not a relay", whatever node it names.
  if (o.role === RELAY_ROLE && claims.capstan_role !== RELAY_ROLE) {
    throw capstanError('ERR_TOKEN_NOT_RELAY', `node ${claims.capstan_node_id} is not registered as a relay: only a relay's token will do here`);
  }
  if (o.nodeId !== undefined && claims.capstan_node_id !== o.nodeId) {
    throw capstanError('ERR_TOKEN_WRONG_NODE', `token of node ${claims.capstan_node_id} cannot act for ${o.nodeId}`);
  }
  return claims;
}

