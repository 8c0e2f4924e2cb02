/**
 * Bootstrap in the store (both backends, migration 10): SSH credentials (sealed), host keys
 * pinned per node, and the enrollment tokens of bootstrap tasks (docs/bootstrap.md).
 */
import { lookup, REFUSE, type NulRules } from '../guard.js';

export interface CredentialRecord {
  id: string;
  user: string;
  port: number;
  /** `tag:<key>=<value>`, `group:<id>`, `manager:<id>`, `node:<id>` or `*`. */
  selectors: string[];
  /** `SHA256:…` of the public key, as ssh-keygen -l prints it; null for a password-only credential. */
  fingerprint: string | null;
  has_password: boolean;
  created_at: string;
}

/** A credential with its sealed secret: never leaves the server process. */
export interface SealedCredential extends CredentialRecord {
  sealed: string;
}

export interface HostKeyRecord {
  node_id: string;
  algorithm: string;
  fingerprint: string;
  pinned_at: string;
  /** The bootstrap job that pinned it. */
  job_id: string | null;
}

export interface EnrolTokenInsert {
  /** sha256 hex of the secret: the secret itself is never stored. */
  digest: string;
  job_id: string;
  node_id: string;
  expires_at: string;
}

export interface EnrolTokenUse {
  job_id: string;
  node_id: string;
}

export interface BootstrapStore {
  /** ERR_CONFLICT when the id exists. */
  createCredential(c: SealedCredential): Promise<CredentialRecord>;
  listCredentials(): Promise<CredentialRecord[]>;
  /** With its sealed secret, for the bootstrap runner only. */
  getSealedCredential(id: string): Promise<SealedCredential | null>;
  deleteCredential(id: string): Promise<boolean>;

  getHostKey(nodeId: string): Promise<HostKeyRecord | null>;
  /** Pin `key` unless one is pinned already; returns the pin in force afterwards. */
  pinHostKey(key: HostKeyRecord): Promise<HostKeyRecord>;
  clearHostKey(nodeId: string): Promise<boolean>;

  putEnrolToken(t: EnrolTokenInsert): Promise<void>;
  /**
   * Use a token once: the one with this digest, unused and not expired at `at`, is marked used by
   * `usedBy` (the enrolling node id). Returns whose it was, or null (unknown, used or expired).
   */
  useEnrolToken(digest: string, at: string, usedBy: string): Promise<EnrolTokenUse | null>;
  /** The node id that used the task's token, or null while unused. */
  enrolledBy(jobId: string, nodeId: string): Promise<string | null>;
  /** Delete tokens that expired before `before`; returns how many. */
  deleteEnrolTokensBefore(before: string, limit: number): Promise<number>;
}

/** How each bootstrap method treats U+0000 (guard.ts). */
export const BOOTSTRAP_NUL: NulRules<BootstrapStore> = {
  createCredential: REFUSE,
  listCredentials: REFUSE,
  getSealedCredential: lookup([0], () => null),
  deleteCredential: lookup([0], () => false),
  getHostKey: lookup([0], () => null),
  pinHostKey: REFUSE,
  clearHostKey: lookup([0], () => false),
  putEnrolToken: REFUSE,
  useEnrolToken: lookup([0, 2], () => null),
  enrolledBy: lookup([0, 1], () => null),
  deleteEnrolTokensBefore: REFUSE,
};
