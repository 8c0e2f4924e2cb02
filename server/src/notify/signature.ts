/**
 * The webhook signature (docs/events.md has the recipe for receivers): HMAC-SHA256 with the
 * subscription's secret over `<timestamp>.<body>`, hex, sent as `Capstan-Signature: v1=<hex>`
 * with `Capstan-Timestamp: <unix seconds>`. The timestamp is inside what is signed, so a captured
 * request replayed later fails the receiver's age check, and cannot be re-dated.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';

/** How old a signed request a receiver should accept (the recipe's advice, and verify()'s default). */
export const SIGNATURE_TOLERANCE_S = 300;

export function sign(secret: string, timestamp: number, body: string | Buffer): string {
  return `v1=${createHmac('sha256', secret).update(`${timestamp}.`).update(body).digest('hex')}`;
}

/** The receiver's check: the signature matches and the timestamp is within `toleranceS` of `nowS`. */
export function verify(secret: string, headers: { timestamp: string | undefined; signature: string | undefined }, body: string | Buffer,
  nowS = Math.floor(Date.now() / 1000), toleranceS = SIGNATURE_TOLERANCE_S): boolean {
  const ts = Number(headers.timestamp);
  if (!headers.timestamp || !/^\d{1,12}$/.test(headers.timestamp) || Math.abs(nowS - ts) > toleranceS) return false;
  const want = Buffer.from(sign(secret, ts, body));
  const got = Buffer.from(headers.signature ?? '');
  return got.length === want.length && timingSafeEqual(got, want);
}
