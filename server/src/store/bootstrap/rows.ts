/** Bootstrap rows to records, for both backends (see types.ts). */
import type { CredentialRecord, HostKeyRecord, SealedCredential } from './types.js';
import type { RowCodec } from '../row-codec.js';

type Row = Record<string, unknown>;

export function credentialFromRow(r: Row, codec: RowCodec): SealedCredential {
  return {
    id: String(r.id),
    user: String(r.user),
    port: Number(r.port),
    selectors: codec.json(r.selectors) as string[],
    fingerprint: (r.fingerprint as string | null) ?? null,
    has_password: codec.bool(r.has_password),
    created_at: codec.time(r.created_at)!,
    sealed: String(r.sealed),
  };
}

/** A credential as the API shows it: the sealed secret never leaves the server process. */
export const publicCredential = ({ sealed: _s, ...c }: SealedCredential): CredentialRecord => c;

export function hostKeyFromRow(r: Row, codec: RowCodec): HostKeyRecord {
  return { node_id: String(r.node_id), algorithm: String(r.algorithm), fingerprint: String(r.fingerprint), pinned_at: codec.time(r.pinned_at)!, job_id: (r.job_id as string | null) ?? null };
}
