/** Identity rows to records, for both backends (see types.ts). */
import type { IdentityKeyRecord, IdentityKeyRow } from './types.js';
import type { RowCodec } from '../row-codec.js';

export const KEY_COLUMNS = 'kid, alg, active, created_at, retired_at, max_exp';

export function keyRow(r: Record<string, unknown>, codec: RowCodec): IdentityKeyRow {
  return {
    kid: r.kid as string,
    alg: r.alg as string,
    active: codec.bool(r.active),
    created_at: codec.time(r.created_at)!,
    retired_at: codec.time(r.retired_at),
    max_exp: Number(r.max_exp),
  };
}

export function keyRecord(r: Record<string, unknown>, codec: RowCodec): IdentityKeyRecord {
  return { ...keyRow(r, codec), public_jwk: r.public_jwk as string, sealed_private: r.sealed_private as string };
}
