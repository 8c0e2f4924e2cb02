/**
 * Sealed secrets: a secret property travels in the bundle readable only by its node. Relays and
 * caches hold the signed bundle, so the value is sealed to the node's own key: a fresh
 * AES-256-GCM key encrypts it, and RSA-OAEP (SHA-256) with the public key of the node's pinned
 * certificate wraps that key. Only node:crypto is used.
 *
 *   { "v": 1, "alg": "RSA-OAEP-256+A256GCM", "kid": <first 16 hex of sha256 of the node's SPKI>,
 *     "key": <b64 wrapped key>, "iv": <b64 12 bytes>, "data": <b64 ciphertext>, "tag": <b64 16 bytes> }
 *
 * Where a rendered parameter uses a secret it holds a marker instead of the value,
 * U+FFF9 `secret:<name>` U+FFFB (or `secret:<name>:html` where the template escapes it for
 * HTML): the agent opens the secret right before applying and puts the value in its place. The
 * renderer refuses any other text holding U+FFF9 or U+FFFB, so a marker is always one it wrote.
 */
import { constants, createCipheriv, createDecipheriv, createHash, createPrivateKey, createPublicKey, privateDecrypt, publicEncrypt, randomBytes } from 'node:crypto';
import { capstanError } from '../errors.js';

export const SEALED_ALG = 'RSA-OAEP-256+A256GCM';

export interface SealedSecret {
  v: 1;
  alg: typeof SEALED_ALG;
  kid: string;
  key: string;
  iv: string;
  data: string;
  tag: string;
}

/** Limits: a secret's value, and the number of secrets one bundle (or directive) may carry. */
export const SECRET_LIMITS = { maxBytes: 64 * 1024, maxSecrets: 256, maxNameLength: 128 } as const;
/** A secret's name: a property path (`db.password`). */
export const SECRET_NAME = /^[A-Za-z0-9_][A-Za-z0-9_.-]{0,127}$/;

/** The characters that open and close a marker; ordinary rendered text may not hold them. */
export const MARKER_OPEN = '\uFFF9';
export const MARKER_CLOSE = '\uFFFB';
const MARKER = /\uFFF9secret:([A-Za-z0-9_][A-Za-z0-9_.-]{0,127})(:html)?\uFFFB/g;

/** Where a secret's value goes: raw, or HTML-escaped (a `{{x}}` of a file template). */
export function secretMarker(name: string, escape: 'raw' | 'html' = 'raw'): string {
  return `${MARKER_OPEN}secret:${name}${escape === 'html' ? ':html' : ''}${MARKER_CLOSE}`;
}

/** The key id a sealed value names: which node key opens it. */
export function sealKeyId(publicKeyOrCertPem: string): string {
  return createHash('sha256').update(createPublicKey(publicKeyOrCertPem).export({ type: 'spki', format: 'der' })).digest('hex').slice(0, 16);
}

const bad = (message: string) => capstanError('ERR_SECRET', message);

/** Seal `plaintext` for the node whose certificate (or public key) PEM is given. */
export function sealForNode(plaintext: string, nodeCertificatePem: string): SealedSecret {
  const bytes = Buffer.from(plaintext, 'utf8');
  if (bytes.length > SECRET_LIMITS.maxBytes) throw bad(`a secret holds at most ${SECRET_LIMITS.maxBytes} bytes`);
  const pub = createPublicKey(nodeCertificatePem);
  if (pub.asymmetricKeyType !== 'rsa') throw bad('secrets are sealed to RSA node keys');
  const cek = randomBytes(32);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', cek, iv);
  const data = Buffer.concat([cipher.update(bytes), cipher.final()]);
  const key = publicEncrypt({ key: pub, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha256' }, cek);
  return {
    v: 1, alg: SEALED_ALG, kid: sealKeyId(nodeCertificatePem),
    key: key.toString('base64'), iv: iv.toString('base64'), data: data.toString('base64'), tag: cipher.getAuthTag().toString('base64'),
  };
}

/** Whether `x` has a sealed secret's shape (the bundle check; opening checks the rest). */
export function isSealed(x: unknown): x is SealedSecret {
  const s = x as Record<string, unknown>;
  return !!s && typeof s === 'object' && s.v === 1 && s.alg === SEALED_ALG
    && ['kid', 'key', 'iv', 'data', 'tag'].every((f) => typeof s[f] === 'string' && (s[f] as string).length <= 2 * SECRET_LIMITS.maxBytes);
}

/** Open a sealed value with the node's private key; ERR_SECRET when it is not for this key or was altered. */
export function openSealed(sealed: unknown, nodeKeyPem: string): string {
  if (!isSealed(sealed)) throw bad('not a sealed secret');
  const priv = createPrivateKey(nodeKeyPem);
  const kid = sealKeyId(createPublicKey(priv).export({ type: 'spki', format: 'pem' }).toString());
  if (sealed.kid !== kid) throw bad(`sealed for key ${sealed.kid}, this node's key is ${kid}`);
  try {
    const cek = privateDecrypt({ key: priv, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha256' }, Buffer.from(sealed.key, 'base64'));
    const iv = Buffer.from(sealed.iv, 'base64');
    const tag = Buffer.from(sealed.tag, 'base64');
    if (cek.length !== 32 || iv.length !== 12 || tag.length !== 16) throw new Error('bad sizes');
    const decipher = createDecipheriv('aes-256-gcm', cek, iv);
    decipher.setAuthTag(tag);
    return Buffer.concat([decipher.update(Buffer.from(sealed.data, 'base64')), decipher.final()]).toString('utf8');
  } catch {
    throw bad('sealed secret does not open with this node key (altered, or sealed for another key)');
  }
}

/** The secret names a value's strings mark (deep), in order of first appearance. */
export function markedSecrets(v: unknown, out: Set<string> = new Set()): Set<string> {
  if (typeof v === 'string') {
    if (v.includes(MARKER_OPEN)) for (const m of v.matchAll(MARKER)) out.add(m[1]!);
  } else if (Array.isArray(v)) v.forEach((x) => markedSecrets(x, out));
  else if (v !== null && typeof v === 'object') Object.values(v).forEach((x) => markedSecrets(x, out));
  return out;
}

const HTML: Record<string, string> = { '&': '&amp;', '<': '&lt;', '>': '&gt;', '"': '&quot;', "'": '&#39;', '/': '&#x2F;', '`': '&#x60;', '=': '&#x3D;' };
/** The escaping mustache applies to `{{x}}`, so a secret reads as any other value would. */
export const escapeHtml = (s: string): string => s.replace(/[&<>"'`=/]/g, (c) => HTML[c]!);

/**
 * Every marker in `v`'s strings (deep) replaced by its secret's value; a copy. A marker naming a
 * secret `values` lacks is ERR_SECRET: nothing is applied with a hole in it.
 */
export function substituteSecrets<T>(v: T, values: ReadonlyMap<string, string>): T {
  if (typeof v === 'string') {
    if (!v.includes(MARKER_OPEN)) return v;
    return v.replace(MARKER, (_m, name: string, html?: string) => {
      const value = values.get(name);
      if (value === undefined) throw bad(`secret ${name} is used but not in the policy`);
      return html ? escapeHtml(value) : value;
    }) as T;
  }
  if (Array.isArray(v)) return v.map((x) => substituteSecrets(x, values)) as T;
  if (v !== null && typeof v === 'object') {
    return Object.fromEntries(Object.entries(v).map(([k, x]) => [k, substituteSecrets(x, values)])) as T;
  }
  return v;
}

export const REDACTED = '********';

/**
 * Replaces every opened secret's value (and its HTML-escaped and JSON-escaped forms) with
 * `********` in whatever the agent writes: run-log messages, keys, diffs and log lines.
 */
export class Redactor {
  private readonly values = new Set<string>();
  private pattern: RegExp | null = null;

  add(plaintext: string): void {
    if (plaintext.length === 0) return;
    for (const form of [plaintext, escapeHtml(plaintext), JSON.stringify(plaintext).slice(1, -1)]) this.values.add(form);
    // Longest first, so a secret that contains another is replaced whole.
    const alts = [...this.values].sort((a, b) => b.length - a.length).map((x) => x.replace(/[.*+?^${}()|[\]\\]/g, '\\$&'));
    this.pattern = new RegExp(alts.join('|'), 'g');
  }

  get empty(): boolean {
    return this.pattern === null;
  }

  redact(text: string): string {
    return this.pattern === null || typeof text !== 'string' ? text : text.replace(this.pattern, REDACTED);
  }
}
