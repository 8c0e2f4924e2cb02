/**
 * RUDDER's shared files (R/src/data/shared_file.rs, R/src/api/shared_files.rs): a node (source)
 * leaves a signed file for another (target). Stored as
 * `<root>/<target>/files/<source>/<file-id>` plus `<file-id>.metadata` in the
 * `rudder-signature-v1` format (one `key=value` a line), the server-computed `expires=` last.
 *
 * The upload is `metadata lines + bare blank line + raw content`; the content must carry an RSA
 * PKCS#1 v1.5 signature (`digest`, hex) by the key in `short_pubkey`, and that key must be the
 * source node's, i.e. hash (as the nodes list says) to the node's `key-hash`.
 */
import { createHash, createPublicKey, randomUUID, verify, type KeyObject } from 'node:crypto';
import { readdir, readFile, rename, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { parseDuration } from '@capstan/shared/config';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import type { KeyHash } from '../data/nodes.js';

export const METADATA_HEADER = 'rudder-signature-v1';
const REQUIRED = ['header', 'algorithm', 'digest', 'hash_value', 'short_pubkey', 'hostname', 'keydate', 'keyid'] as const;
const KNOWN = new Set<string>([...REQUIRED, 'expires']);

export interface Metadata {
  header: string;
  algorithm: 'sha256' | 'sha512';
  digest: string;
  hash_value: string;
  short_pubkey: string;
  hostname: string;
  keydate: string;
  keyid: string;
  /** Unix seconds. */
  expires?: number;
}

/** A shared-files id: RUDDER's `^[A-Za-z0-9\-_.]+$`, not `.` or `..`. */
export function validSharedId(id: string): boolean {
  return /^[A-Za-z0-9\-_.]+$/.test(id) && id !== '.' && id !== '..' && id.length <= 255;
}

/** File ids ending in `.metadata` would overwrite another file's metadata: reserved. */
export function reservedFileId(id: string): boolean {
  return id.toLowerCase().endsWith('.metadata');
}

/** Parse metadata text; any defect (missing or repeated key, unknown key, bad hex) → ERR_BAD_REQUEST. */
export function parseMetadata(text: string): Metadata {
  const out: Record<string, string> = {};
  for (const line of text.split('\n')) {
    if (line === '' || line === '\r') continue;
    const eq = line.indexOf('=');
    if (eq <= 0) throw capstanError('ERR_BAD_REQUEST', 'metadata line is not key=value');
    const key = line.slice(0, eq);
    const value = line.slice(eq + 1).replace(/\r$/, '');
    if (!KNOWN.has(key)) throw capstanError('ERR_BAD_REQUEST', `unknown metadata key ${key}`);
    if (key in out) throw capstanError('ERR_BAD_REQUEST', `metadata key ${key} appears twice`);
    out[key] = value;
  }
  for (const k of REQUIRED) if (!out[k]) throw capstanError('ERR_BAD_REQUEST', `metadata lacks ${k}`);
  if (out.header !== METADATA_HEADER) throw capstanError('ERR_BAD_REQUEST', `metadata header is not ${METADATA_HEADER}`);
  if (out.algorithm !== 'sha256' && out.algorithm !== 'sha512') throw capstanError('ERR_BAD_REQUEST', 'algorithm must be sha256 or sha512');
  for (const k of ['digest', 'hash_value'] as const) {
    if (!/^(?:[0-9a-fA-F]{2})+$/.test(out[k]!)) throw capstanError('ERR_BAD_REQUEST', `${k} is not hex`);
  }
  let expires: number | undefined;
  if (out.expires !== undefined) {
    if (!/^\d{1,15}$/.test(out.expires)) throw capstanError('ERR_BAD_REQUEST', 'expires is not a unix time');
    expires = Number(out.expires);
  }
  return { ...(out as unknown as Metadata), algorithm: out.algorithm, ...(expires !== undefined ? { expires } : {}) };
}

/** The stored form: the fields in RUDDER's order, then `expires=` (unix seconds). */
export function formatMetadata(m: Metadata): string {
  const lines = REQUIRED.map((k) => `${k}=${m[k]}`);
  if (m.expires !== undefined) lines.push(`expires=${m.expires}`);
  return `${lines.join('\n')}\n`;
}

/**
 * Split an upload body: metadata lines up to the first line of at most one byte (a bare `\n`; a
 * CRLF blank line does not end it, as in RUDDER), then the raw content, byte for byte.
 */
export function splitUpload(body: Buffer): { meta: string; content: Buffer } {
  let pos = 0;
  while (pos < body.length) {
    const nl = body.indexOf(0x0a, pos);
    const end = nl === -1 ? body.length : nl + 1;
    if (end - pos <= 1) return { meta: body.subarray(0, pos).toString('utf8'), content: body.subarray(end) };
    pos = end;
  }
  return { meta: body.toString('utf8'), content: Buffer.alloc(0) };
}

/** TTL of an upload: seconds or a duration (`1d 2h`, `1hour 2minutes`); overflow → null. */
export function parseTtlSeconds(text: string | undefined): number | null {
  if (text === undefined || text.trim() === '') return null;
  const ms = parseDuration(text);
  // Bound it to a century: anything beyond is a client error, and Date arithmetic stays exact.
  if (ms === null || ms > 100 * 365 * 86_400_000) return null;
  return Math.floor(ms / 1000);
}

export function publicKeyOf(shortPubkey: string): KeyObject {
  try {
    return createPublicKey({ key: Buffer.from(shortPubkey, 'base64'), format: 'der', type: 'pkcs1' });
  } catch (err) {
    throw capstanError('ERR_KEY', `short_pubkey is not a PKCS#1 RSA public key: ${(err as Error).message}`);
  }
}

/** Does this key hash (SubjectPublicKeyInfo DER, RUDDER's rule) to the node's key-hash? */
export function keyMatches(key: KeyObject, expected: KeyHash): boolean {
  const der = key.export({ type: 'spki', format: 'der' });
  return createHash(expected.algorithm).update(der).digest().equals(expected.value);
}

export function signatureValid(m: Metadata, key: KeyObject, content: Buffer): boolean {
  try {
    return verify(m.algorithm, content, key, Buffer.from(m.digest, 'hex'));
  } catch {
    return false;
  }
}

export class SharedFilesStore {
  constructor(readonly root: string) {}

  private dir(target: string, source: string): string {
    return join(this.root, target, 'files', source);
  }

  async readMetadata(target: string, source: string, fileId: string): Promise<Metadata | null> {
    let text: string;
    try {
      text = await readFile(join(this.dir(target, source), `${fileId}.metadata`), 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
      throw err;
    }
    return parseMetadata(text);
  }

  /**
   * Write content, then metadata, each to a temporary name then renamed: a reader that sees the
   * metadata (HEAD answers from it) always finds the whole content beside it.
   */
  async write(target: string, source: string, fileId: string, meta: Metadata, content: Buffer): Promise<void> {
    const dir = this.dir(target, source);
    await makeDir(dir);
    const tmpContent = join(dir, `.${randomUUID()}.tmp`);
    const tmpMeta = join(dir, `.${randomUUID()}.tmp`);
    try {
      await writeFile(tmpContent, content, { mode: 0o640 });
      await writeFile(tmpMeta, formatMetadata(meta), { mode: 0o640 });
      await rename(tmpContent, join(dir, fileId));
      await rename(tmpMeta, join(dir, `${fileId}.metadata`));
    } finally {
      await rm(tmpContent, { force: true });
      await rm(tmpMeta, { force: true });
    }
  }

  /**
   * Remove every file whose metadata has expired (and its metadata), plus temporary files left by
   * a crash. Walks `<root>/<target>/files/<source>/`. Returns how many files were removed.
   */
  async cleanup(nowSeconds = Math.floor(Date.now() / 1000), tmpMaxAgeMs = 3_600_000): Promise<number> {
    let removed = 0;
    const list = (p: string) => readdir(p, { withFileTypes: true }).catch(() => []);
    for (const t of await list(this.root)) {
      if (!t.isDirectory()) continue;
      for (const s of await list(join(this.root, t.name, 'files'))) {
        if (!s.isDirectory()) continue;
        const dir = join(this.root, t.name, 'files', s.name);
        for (const f of await list(dir)) {
          if (!f.isFile()) continue;
          if (f.name.startsWith('.') && f.name.endsWith('.tmp')) {
            const st = await stat(join(dir, f.name)).catch(() => null);
            if (st && Date.now() - st.mtimeMs > tmpMaxAgeMs) await rm(join(dir, f.name), { force: true });
            continue;
          }
          if (!f.name.endsWith('.metadata')) continue;
          const id = f.name.slice(0, -'.metadata'.length);
          const meta = await readFile(join(dir, f.name), 'utf8').then(parseMetadata).catch(() => null);
          if (meta?.expires !== undefined && meta.expires < nowSeconds) {
            await rm(join(dir, id), { force: true });
            await rm(join(dir, f.name), { force: true });
            removed++;
          }
        }
      }
    }
    return removed;
  }
}

/** Is this metadata expired at `nowSeconds`? (RUDDER's `it_reads_expire_metadata`.) */
export function isExpired(m: Metadata, nowSeconds = Math.floor(Date.now() / 1000)): boolean {
  return m.expires !== undefined && m.expires < nowSeconds;
}
