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

export function makeRenewRequest(id: { keyPem: string; certPem: string }, nodeId: string, now = new Date()): Buffer {
  const req: RenewRequest = { node_id: nodeId, timestamp: now.toISOString(), nonce: randomUUID() };
  return signSmime(Buffer.from(JSON.stringify(req)), id);
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
): Promise<RenewRequest> {
  const { content } = verifySmime(signed, [certPem], { maxBytes: 64 * 1024 });
  let req: RenewRequest;
  try {
    req = JSON.parse(content.toString('utf8')) as RenewRequest;
  } catch {
    throw capstanError('ERR_BAD_REQUEST', 'renewal request is not JSON');
  }
  if (req.node_id !== expectNodeId) throw capstanError('ERR_TOKEN_WRONG_NODE', `renewal request names ${String(req.node_id)}`);
  const at = Date.parse(req.timestamp);
  if (!Number.isFinite(at) || Math.abs(now.getTime() - at) > RENEW_WINDOW_SECONDS * 1000) {
    throw capstanError('ERR_RENEW_STALE', `renewal request time is more than ${RENEW_WINDOW_SECONDS} s from the server's`);
  }
  if (typeof req.nonce !== 'string' || req.nonce.length < 16 || req.nonce.length > 64) throw capstanError('ERR_BAD_REQUEST', 'renewal request needs a nonce');
  if (!(await remember(req.nonce, new Date(at + RENEW_WINDOW_SECONDS * 1000)))) {
    throw capstanError('ERR_RENEW_REPLAY', 'renewal request was already used');
  }
  return req;
}
