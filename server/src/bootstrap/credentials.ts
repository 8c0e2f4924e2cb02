/**
 * SSH credentials for bootstrap jobs: checked at the door, sealed with the identity keyring's
 * sealer (identity/seal.ts: AES-256-GCM, the row's id as additional data) before they reach the
 * database, and chosen per node by their selectors. The API only ever shows metadata: id, user,
 * port, selectors, the public key's fingerprint and the creation time.
 *
 * Selectors, from the most specific: `node:<id>`, `tag:<key>=<value>`, `group:<id>`,
 * `manager:<id>`, `*`. A credential applies to a node when one of its selectors matches; the
 * credential whose best match is the most specific wins, and two winning at the same level are
 * ambiguous (ERR_CREDENTIAL_AMBIGUOUS): an admin must make one of them more specific.
 */
import { capstanError } from '@capstan/shared/errors';
import { sshFingerprint, type SshCredential } from '@capstan/toolkit/bootstrap/ssh';
import type { KeySealer } from '../identity/seal.js';
import type { CredentialRecord, NodeRecord, SealedCredential } from '../store/store.js';

export const CREDENTIAL_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const USER = /^[a-z_][a-z0-9_.-]{0,31}\$?$/i;
const MAX_SELECTORS = 100;
const MAX_KEY_CHARS = 64 * 1024;
const MAX_PASSWORD_CHARS = 1024;

/** Specificity of each selector kind: the higher wins. */
const RANK = { node: 4, tag: 3, group: 2, manager: 1, any: 0 } as const;

export interface CredentialRequest {
  id: string;
  user: string;
  port: number;
  private_key?: string;
  passphrase?: string;
  password?: string;
  selectors: string[];
}

function bad(message: string): never {
  throw capstanError('ERR_CREDENTIAL_INVALID', message);
}

/** A selector's kind and argument, or null when it is not one. */
export function parseSelector(s: string): { kind: keyof typeof RANK; key: string; value?: string } | null {
  if (s === '*') return { kind: 'any', key: '' };
  const m = /^(node|group|manager|tag):(.+)$/.exec(s);
  if (!m || m[2]!.length > 255 || /[\u0000-\u001f]/.test(m[2]!)) return null;
  if (m[1] !== 'tag') return { kind: m[1] as 'node' | 'group' | 'manager', key: m[2]! };
  const eq = m[2]!.indexOf('=');
  if (eq <= 0) return null;
  return { kind: 'tag', key: m[2]!.slice(0, eq), value: m[2]!.slice(eq + 1) };
}

/** The body of POST /api/1/credentials, checked. */
export function parseCredentialRequest(raw: unknown): CredentialRequest {
  if (!raw || typeof raw !== 'object' || Array.isArray(raw)) bad('the body must be a JSON object');
  const { id, user, port, private_key, passphrase, password, selectors, ...rest } = raw as Record<string, unknown>;
  if (Object.keys(rest).length) bad(`unknown fields: ${Object.keys(rest).join(', ')}`);
  if (typeof id !== 'string' || !CREDENTIAL_ID.test(id)) bad(`id must match ${CREDENTIAL_ID.source}`);
  if (typeof user !== 'string' || !USER.test(user)) bad('user must be a login name');
  if (port !== undefined && (typeof port !== 'number' || !Number.isInteger(port) || port < 1 || port > 65535)) bad('port must be an integer from 1 to 65535');
  if (private_key !== undefined && (typeof private_key !== 'string' || private_key.length === 0 || private_key.length > MAX_KEY_CHARS)) bad('private_key must be a PEM or OpenSSH private key');
  if (passphrase !== undefined && (typeof passphrase !== 'string' || passphrase.length > MAX_PASSWORD_CHARS)) bad('passphrase must be a string');
  if (password !== undefined && (typeof password !== 'string' || password.length === 0 || password.length > MAX_PASSWORD_CHARS)) bad('password must be a non-empty string');
  if (private_key === undefined && password === undefined) bad('a credential needs a private_key, a password, or both');
  if (passphrase !== undefined && private_key === undefined) bad('passphrase goes with private_key');
  if (!Array.isArray(selectors) || selectors.length === 0 || selectors.length > MAX_SELECTORS) bad(`selectors must be an array of 1 to ${MAX_SELECTORS} selectors`);
  for (const s of selectors) {
    if (typeof s !== 'string' || parseSelector(s) === null) bad(`selector ${JSON.stringify(s)} is not node:<id>, tag:<key>=<value>, group:<id>, manager:<id> or *`);
  }
  return {
    id, user, port: (port as number | undefined) ?? 22,
    ...(private_key !== undefined && { private_key: private_key as string }),
    ...(passphrase !== undefined && { passphrase: passphrase as string }),
    ...(password !== undefined && { password: password as string }),
    selectors: [...new Set(selectors as string[])],
  };
}

const kid = (id: string) => `ssh-credential:${id}`;

/**
 * Check the key opens (with its passphrase), then seal the secret parts. ssh2 is loaded here, on
 * first use: it costs a third of a second, which every command-line verb would otherwise pay.
 */
export async function sealCredential(req: CredentialRequest, sealer: KeySealer, now: Date): Promise<SealedCredential> {
  let fingerprint: string | null = null;
  if (req.private_key !== undefined) {
    const { utils } = (await import('ssh2')).default;
    const parsed = utils.parseKey(req.private_key, req.passphrase);
    const key = Array.isArray(parsed) ? parsed[0] : parsed;
    if (!key || key instanceof Error) bad(`private_key cannot be read${req.passphrase === undefined ? ' (encrypted keys need their passphrase)' : ' with this passphrase'}`);
    if (!key.isPrivateKey()) bad('private_key holds a public key');
    fingerprint = sshFingerprint(key.getPublicSSH());
  }
  const secret = JSON.stringify({ private_key: req.private_key, passphrase: req.passphrase, password: req.password });
  return {
    id: req.id, user: req.user, port: req.port, selectors: req.selectors, fingerprint,
    has_password: req.password !== undefined, created_at: now.toISOString(), sealed: sealer.seal(kid(req.id), secret),
  };
}

/** The credential as the SSH client needs it; ERR_CREDENTIAL_SEALED when this secret does not open it. */
export function openCredential(c: SealedCredential, sealer: KeySealer): SshCredential {
  const plain = sealer.open(kid(c.id), c.sealed);
  if (plain === null) throw capstanError('ERR_CREDENTIAL_SEALED', `credential ${c.id} does not open with this server's identity secret`);
  const s = JSON.parse(plain) as { private_key?: string; passphrase?: string; password?: string };
  return {
    user: c.user, port: c.port,
    ...(s.private_key !== undefined && { privateKey: s.private_key }),
    ...(s.passphrase !== undefined && { passphrase: s.passphrase }),
    ...(s.password !== undefined && { password: s.password }),
  };
}

/** How specifically a selector matches a node (RANK), or -1. */
export function selectorMatch(s: string, n: Pick<NodeRecord, 'id' | 'tags' | 'groups'> & { managers: string[] }): number {
  const p = parseSelector(s);
  if (!p) return -1;
  switch (p.kind) {
    case 'any': return RANK.any;
    case 'node': return p.key === n.id ? RANK.node : -1;
    case 'tag': return n.tags[p.key] === p.value ? RANK.tag : -1;
    case 'group': return n.groups.includes(p.key) ? RANK.group : -1;
    case 'manager': return n.managers.includes(p.key) ? RANK.manager : -1;
  }
}

/** The credential for a node: the most specific match; ERR_CREDENTIAL_NONE or ERR_CREDENTIAL_AMBIGUOUS otherwise. */
export function chooseCredential<C extends CredentialRecord>(n: Pick<NodeRecord, 'id' | 'tags' | 'groups'> & { managers: string[] }, creds: C[]): C {
  let best = -1;
  let winners: C[] = [];
  for (const c of creds) {
    const rank = Math.max(-1, ...c.selectors.map((s) => selectorMatch(s, n)));
    if (rank < 0 || rank < best) continue;
    if (rank > best) {
      best = rank;
      winners = [c];
    } else {
      winners.push(c);
    }
  }
  if (winners.length === 0) throw capstanError('ERR_CREDENTIAL_NONE', `no credential's selectors match node ${n.id}`);
  if (winners.length > 1) {
    throw capstanError('ERR_CREDENTIAL_AMBIGUOUS', `credentials ${winners.map((c) => c.id).join(', ')} match node ${n.id} equally specifically: make one more specific or name one in the job`);
  }
  return winners[0]!;
}
