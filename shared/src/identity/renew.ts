/**
 * The renewal request: how a node whose token expired (or never had one) gets a new one without
 * being locked out. It is a small JSON document signed with the node key (S/MIME, like run logs),
 * checked at the server against the pinned certificate, fresh within a window, never replayed.
 */
import { randomUUID } from 'node:crypto';
import { capstanError } from '../errors.js';
import { signSmime } from '../smime/sign.js';
import { verifySmime } from '../smime/verify.js';

export interface RenewRequest {
  node_id: string;
  timestamp: string;
  nonce: string;
}

export const RENEW_WINDOW_SECONDS = 300;

/**
 * The same request inside a signed inventory, under this field: `{timestamp, nonce}` (the node is
 * the inventory's). A server that answers the agent's upload itself hands the token back in its
 * answer; the server removes the field before it stores the inventory.
 */
export const INVENTORY_TOKEN_FIELD = 'identity_request';
/** Request header of an agent's inventory upload asking for its token in the answer (relays never pass it on). */
export const HEADER_TOKEN_REQUEST = 'x-capstan-token-request';

/** What makes a token request fresh and single-use: the node's clock and a random nonce. */
export function tokenRequestStamp(now = new Date()): Pick<RenewRequest, 'timestamp' | 'nonce'> {
  return { timestamp: now.toISOString(), nonce: randomUUID() };
}

export function makeRenewRequest(id: { keyPem: string; certPem: string }, nodeId: string, now = new Date()): Buffer {
  const req: RenewRequest = { node_id: nodeId, ...tokenRequestStamp(now) };
  return signSmime(Buffer.from(JSON.stringify(req)), id);
}

/**
 * Check the stamp of a verified token request: within RENEW_WINDOW_SECONDS of `now`, and a nonce
 * `remember` has not seen (it returns false for one already used: a replay).
 */
export async function checkTokenRequestStamp(
  stamp: { timestamp?: unknown; nonce?: unknown },
  remember: (nonce: string, until: Date) => boolean | Promise<boolean>,
  now = new Date(),
): Promise<void> {
  const at = typeof stamp.timestamp === 'string' ? Date.parse(stamp.timestamp) : NaN;
  if (!Number.isFinite(at) || Math.abs(now.getTime() - at) > RENEW_WINDOW_SECONDS * 1000) {
    throw capstanError('ERR_RENEW_STALE', `renewal request time is more than ${RENEW_WINDOW_SECONDS} s from the server's`);
  }
  if (typeof stamp.nonce !== 'string' || stamp.nonce.length < 16 || stamp.nonce.length > 64) throw capstanError('ERR_BAD_REQUEST', 'renewal request needs a nonce');
  if (!(await remember(stamp.nonce, new Date(at + RENEW_WINDOW_SECONDS * 1000)))) {
    throw capstanError('ERR_RENEW_REPLAY', 'renewal request was already used');
  }
}

/**
 * Verify a renewal request against the node's pinned certificate. `remember(nonce, expiresAt)`
 * returns false when the nonce was already used (replay).
 */
export async function checkRenewRequest(
  signed: Buffer,
  certPem: string,
  expectNodeId: string,
  remember: (nonce: string, until: Date) => boolean | Promise<boolean>,
  now = new Date(),
  opts: { allowSha1?: boolean } = {},
): Promise<RenewRequest> {
  const { content } = verifySmime(signed, [certPem], { maxBytes: 64 * 1024, allowSha1: opts.allowSha1 === true });
  let req: RenewRequest;
  try {
    req = JSON.parse(content.toString('utf8')) as RenewRequest;
  } catch {
    throw capstanError('ERR_BAD_REQUEST', 'renewal request is not JSON');
  }
  if (!req || typeof req !== 'object') throw capstanError('ERR_BAD_REQUEST', 'renewal request is not a JSON object');
  if (req.node_id !== expectNodeId) throw capstanError('ERR_TOKEN_WRONG_NODE', `renewal request names ${String(req.node_id)}`);
  await checkTokenRequestStamp(req, remember, now);
  return req;
}
