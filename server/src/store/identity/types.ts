/**
 * The node-identity part of the registry (migration 4): the signing keyring, each node's current
 * token and the renewal nonces, shared by every server on one database. The store keeps private
 * keys only as the sealed text the identity service hands it (server/src/identity/seal.ts); it
 * never sees a key in clear.
 */
import { lookup, REFUSE, type NulRules } from '../guard.js';

export interface IdentityKeyRow {
  kid: string;
  alg: string;
  active: boolean;
  created_at: string;
  /** When another key became active (null for the active key). */
  retired_at: string | null;
  /** Latest `exp` (epoch seconds) of any token this key signed; 0 when none. */
  max_exp: number;
}

/** A key as stored: its public JWK (JSON text) and its sealed private JWK. */
export interface IdentityKeyRecord extends IdentityKeyRow {
  public_jwk: string;
  sealed_private: string;
}

export interface IdentityTokenRow {
  node_id: string;
  kid: string;
  jti: string;
  iat: number;
  exp: number;
  /** Tokens issued before this time (epoch seconds) are refused by the server; 0 = none. */
  forced_after: number;
}

/** What a keyring starts from: a first key, or the keys and tokens of an old identity.db. */
export interface IdentityInitial {
  keys: IdentityKeyRecord[];
  tokens: IdentityTokenRow[];
}

/** Nonces kept at most (each lives the renewal window, 5 min): beyond it, renewals are refused. */
export const MAX_NONCES = 1_000_000;

export interface IdentityStore {
  /**
   * When the keyring is empty, store `initial()` (called only then), serialised against every
   * other server on the database: of two servers starting at once on an empty database, one
   * stores its keyring and the other finds it. Returns whether `initial()` was stored. Tokens of
   * nodes the registry does not hold are skipped.
   */
  initKeyring(initial: () => IdentityInitial): Promise<boolean>;
  /** All keys, oldest first, without their private parts. */
  listKeys(): Promise<IdentityKeyRow[]>;
  getKey(kid: string): Promise<IdentityKeyRow | null>;
  /** Every key with its sealed private part (the service checks it can open them at start-up). */
  allKeys(): Promise<IdentityKeyRecord[]>;
  activeKey(): Promise<IdentityKeyRecord | null>;
  /** Public JWKs (JSON text) of the active key and of every key that signed a token unexpired at `nowSec`. */
  publishedKeys(nowSec: number): Promise<string[]>;
  /** Store a key and make it the active one; the previous active key is retired, not removed. */
  addActiveKey(key: Omit<IdentityKeyRecord, 'active' | 'retired_at' | 'max_exp'>): Promise<void>;
  deleteKey(kid: string): Promise<boolean>;
  /** Nodes whose current, unexpired token this key signed. */
  nodesUsingKey(kid: string, nowSec: number): Promise<number>;
  /** Record a node's new token (a pending forced-renewal time is kept: it is older than the token). False: unknown node. */
  recordToken(t: Omit<IdentityTokenRow, 'forced_after'>): Promise<boolean>;
  getToken(nodeId: string): Promise<IdentityTokenRow | null>;
  /** Tokens of these nodes issued before `atSec` are refused from now on; returns how many nodes exist of them. */
  forceRenewal(nodeIds: string[], atSec: number): Promise<number>;
  /** Every node with a forced renewal after `sinceSec` (node id → forced_after), for the nodes list relays sync. */
  forcedRenewals(sinceSec: number): Promise<Map<string, number>>;
  /** Remember a renewal nonce until `untilSec`; false when any server saw it already (a replay) or too many are kept. */
  rememberNonce(nonce: string, untilSec: number, nowSec: number): Promise<boolean>;
}

/** How each identity method treats U+0000 (guard.ts). */
export const IDENTITY_NUL: NulRules<IdentityStore> = {
  initKeyring: REFUSE,
  listKeys: REFUSE,
  getKey: lookup([0], () => null),
  allKeys: REFUSE,
  activeKey: REFUSE,
  publishedKeys: REFUSE,
  addActiveKey: REFUSE,
  deleteKey: lookup([0], () => false),
  nodesUsingKey: lookup([0], () => 0),
  recordToken: REFUSE,
  getToken: lookup([0], () => null),
  forceRenewal: lookup([0]),
  forcedRenewals: REFUSE,
  // A nonce no server could have stored is not remembered: the renewal is refused as a replay.
  rememberNonce: lookup([0], () => false),
};
