/**
 * Policy key rotation: each new policy key is endorsed by the key before it, and agents that
 * pinned an older key follow that chain of endorsements to the key signing today's bundles, then
 * pin it. A key that no chain from the pinned key endorses is refused (ERR_POLICY_SIGNATURE),
 * however the bundle got to the agent.
 *
 * An endorsement is `{key_id, public_key, previous_key_id, created_at, signature}`, the signature
 * being the previous key's ed25519 signature (hex) over the canonical JSON of the other fields
 * plus a purpose string, so that no other signed object of the system can pass for one.
 */
import { createPrivateKey, createPublicKey, sign, verify } from 'node:crypto';
import { capstanError } from '../errors.js';
import { canonicalJson, policyKeyId } from './bundle.js';

export interface KeyEndorsement {
  key_id: string;
  /** SPKI PEM of the endorsed key. */
  public_key: string;
  previous_key_id: string;
  created_at: string;
  signature: string;
}

export interface PinnedPolicyKey {
  keyId: string;
  publicKeyPem: string;
}

const PURPOSE = 'capstan policy key endorsement v1';
/** Longest chain followed (one rotation a day for a decade is well below). */
export const MAX_ENDORSEMENT_CHAIN = 8192;

const message = (e: Omit<KeyEndorsement, 'signature'>) =>
  Buffer.from(canonicalJson({ purpose: PURPOSE, key_id: e.key_id, public_key: e.public_key, previous_key_id: e.previous_key_id, created_at: e.created_at }));

/** The previous key (private PEM) endorses the next one (public PEM). */
export function endorseKey(previousPrivatePem: string, nextPublicPem: string, createdAt: Date = new Date()): KeyEndorsement {
  const prev = createPrivateKey(previousPrivatePem);
  const body = {
    key_id: policyKeyId(nextPublicPem),
    public_key: createPublicKey(nextPublicPem).export({ type: 'spki', format: 'pem' }).toString(),
    previous_key_id: policyKeyId(createPublicKey(prev)),
    created_at: createdAt.toISOString(),
  };
  return { ...body, signature: sign(null, message(body), prev).toString('hex') };
}

function isEndorsement(x: unknown): x is KeyEndorsement {
  const e = x as Record<string, unknown>;
  return !!e && typeof e === 'object' && ['key_id', 'public_key', 'previous_key_id', 'created_at', 'signature'].every((f) => typeof e[f] === 'string');
}

/**
 * Follow endorsements from the pinned key to `targetKeyId`; returns the target key, or throws
 * ERR_POLICY_SIGNATURE. Every step is checked: the endorsement's key id is its public key's, and
 * the signature verifies with the key already trusted. Endorsements that do not verify are
 * ignored (a relay could add junk; it cannot add a verifying one).
 */
export function followEndorsements(pinned: PinnedPolicyKey, endorsements: unknown, targetKeyId: string): PinnedPolicyKey {
  if (pinned.keyId === targetKeyId) return pinned;
  if (!Array.isArray(endorsements) || endorsements.length === 0) {
    throw capstanError('ERR_POLICY_SIGNATURE', `bundle signed by key ${targetKeyId}, pinned key is ${pinned.keyId}, and no endorsement chain was offered`);
  }
  const byPrevious = new Map<string, KeyEndorsement[]>();
  for (const e of endorsements.slice(0, MAX_ENDORSEMENT_CHAIN)) {
    if (!isEndorsement(e)) continue;
    const list = byPrevious.get(e.previous_key_id) ?? [];
    list.push(e);
    byPrevious.set(e.previous_key_id, list);
  }
  // Breadth-first from the pinned key over verified edges only.
  const seen = new Set([pinned.keyId]);
  let frontier: PinnedPolicyKey[] = [pinned];
  while (frontier.length) {
    const next: PinnedPolicyKey[] = [];
    for (const k of frontier) {
      for (const e of byPrevious.get(k.keyId) ?? []) {
        if (seen.has(e.key_id)) continue;
        let ok = false;
        try {
          ok = policyKeyId(e.public_key) === e.key_id && /^[0-9a-f]{128}$/.test(e.signature)
            && verify(null, message(e), createPublicKey(k.publicKeyPem), Buffer.from(e.signature, 'hex'));
        } catch {
          ok = false;
        }
        if (!ok) continue;
        const key = { keyId: e.key_id, publicKeyPem: e.public_key };
        if (key.keyId === targetKeyId) return key;
        seen.add(key.keyId);
        next.push(key);
      }
    }
    frontier = next;
  }
  throw capstanError('ERR_POLICY_SIGNATURE', `bundle signed by key ${targetKeyId}, which no endorsement chain from the pinned key ${pinned.keyId} reaches`);
}
