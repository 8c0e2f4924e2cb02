/**
 * Console sign-ins, without server-side state: the cookie is the sign-in, sealed (AES-256-GCM)
 * with the console secret. It carries a random sign-in id, the token the admin signed in with and
 * its expiry; each request opens it and resolves the token again, so a token revoked or a role
 * changed takes effect on the next click, and several servers sharing the secret file accept
 * each other's cookies. The CSRF token is an HMAC of the sign-in id: bound to that sign-in, never
 * stored. Signing out clears the cookie and records its id until it would have expired, in the
 * registry when one is given (`ended`): refused across restarts and by every server sharing it.
 */
import { createCipheriv, createDecipheriv, createHmac, hkdfSync, randomBytes, timingSafeEqual } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';

export const COOKIE_NAME = 'capstan_console';
/** Largest cookie value opened (a sealed token of up to ~2 kB); anything longer is not ours. */
const MAX_COOKIE_CHARS = 4096;

export interface Opened {
  sid: string;
  token: string;
  /** Expiry, epoch milliseconds. */
  exp: number;
}

export interface ConsoleSignInOptions {
  /** At least 32 bytes of secret. */
  secret: Buffer;
  ttlMs: number;
  /** Mark cookies Secure (the listener speaks TLS). */
  secure: boolean;
  now?: () => number;
  /** Where sign-outs are kept beyond this process (the registry); without it, in memory only. */
  ended?: SignOuts;
}

/** Sign-outs kept by id until their expiry (RFC 3339). */
export interface SignOuts {
  end(sid: string, expiresAt: string, now: string): Promise<void>;
  isEnded(sid: string, now: string): Promise<boolean>;
}

const b64 = (b: Buffer) => b.toString('base64url');

export class ConsoleSignIns {
  readonly ttlMs: number;
  private readonly sealKey: Buffer;
  private readonly csrfKey: Buffer;
  private readonly secure: boolean;
  private readonly now: () => number;
  /** Signed-out ids until they would have expired (pruned on each sign-out), kept here too. */
  private readonly ended = new Map<string, number>();
  private readonly signOuts: SignOuts | undefined;

  constructor(opts: ConsoleSignInOptions) {
    if (opts.secret.length < 32) throw new Error('the console secret must be at least 32 bytes');
    this.ttlMs = opts.ttlMs;
    this.secure = opts.secure;
    this.now = opts.now ?? Date.now;
    this.signOuts = opts.ended;
    this.sealKey = Buffer.from(hkdfSync('sha256', opts.secret, Buffer.alloc(0), 'capstan console cookie', 32));
    this.csrfKey = Buffer.from(hkdfSync('sha256', opts.secret, Buffer.alloc(0), 'capstan console csrf', 32));
  }

  /** A new sign-in for `token`: the cookie's value and its expiry. */
  create(token: string): Opened & { value: string } {
    const opened: Opened = { sid: b64(randomBytes(18)), token, exp: this.now() + this.ttlMs };
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.sealKey, iv);
    const body = Buffer.concat([c.update(JSON.stringify(opened), 'utf8'), c.final()]);
    return { ...opened, value: b64(Buffer.concat([iv, body, c.getAuthTag()])) };
  }

  /** The sign-in a cookie value holds; null when it is not one of ours, expired or signed out. */
  async open(value: string | undefined): Promise<Opened | null> {
    const s = this.unseal(value);
    if (!s || this.ended.has(s.sid)) return null;
    if (this.signOuts && (await this.signOuts.isEnded(s.sid, new Date(this.now()).toISOString()))) return null;
    return s;
  }

  /** The cookie's sign-in, unexpired, before any sign-out is looked up. */
  private unseal(value: string | undefined): Opened | null {
    if (!value || value.length > MAX_COOKIE_CHARS || !/^[A-Za-z0-9_-]+$/.test(value)) return null;
    const raw = Buffer.from(value, 'base64url');
    if (raw.length < 12 + 16 + 2) return null;
    let o: unknown;
    try {
      const d = createDecipheriv('aes-256-gcm', this.sealKey, raw.subarray(0, 12));
      d.setAuthTag(raw.subarray(raw.length - 16));
      o = JSON.parse(Buffer.concat([d.update(raw.subarray(12, raw.length - 16)), d.final()]).toString('utf8'));
    } catch {
      return null; // altered, sealed with another secret, or not a cookie of ours
    }
    const s = o as Partial<Opened>;
    if (typeof s?.sid !== 'string' || typeof s.token !== 'string' || typeof s.exp !== 'number') return null;
    if (s.exp <= this.now()) return null;
    return { sid: s.sid, token: s.token, exp: s.exp };
  }

  /** The CSRF token of a sign-in: what its writes must carry as X-CSRF-Token. */
  csrf(sid: string): string {
    return b64(createHmac('sha256', this.csrfKey).update(sid).digest());
  }

  csrfMatches(sid: string, given: unknown): boolean {
    if (typeof given !== 'string' || given.length > 128) return false;
    const want = Buffer.from(this.csrf(sid));
    const got = Buffer.from(given);
    return got.length === want.length && timingSafeEqual(got, want);
  }

  /** Sign out: this id is refused from now on (the browser drops the cookie). */
  async end(s: Opened): Promise<void> {
    const now = this.now();
    for (const [sid, exp] of this.ended) if (exp <= now) this.ended.delete(sid);
    this.ended.set(s.sid, s.exp);
    await this.signOuts?.end(s.sid, new Date(s.exp).toISOString(), new Date(now).toISOString());
  }

  /** Set-Cookie for a sign-in (value and lifetime) or, with null, one that deletes the cookie. */
  setCookie(s: (Opened & { value: string }) | null): string {
    const attrs = ['Path=/', 'HttpOnly', 'SameSite=Strict', ...(this.secure ? ['Secure'] : [])];
    if (!s) return [`${COOKIE_NAME}=`, 'Max-Age=0', ...attrs].join('; ');
    return [`${COOKIE_NAME}=${s.value}`, `Max-Age=${Math.max(0, Math.round((s.exp - this.now()) / 1000))}`, ...attrs].join('; ');
  }
}

/** The value of our cookie in a Cookie header (the first one, as browsers send the most specific first). */
export function cookieValue(header: string | undefined): string | undefined {
  if (!header) return undefined;
  for (const part of header.split(';')) {
    const i = part.indexOf('=');
    if (i > 0 && part.slice(0, i).trim() === COOKIE_NAME) return part.slice(i + 1).trim();
  }
  return undefined;
}

/** The console secret: read from `path`, or made there (0600) at the first start. */
export async function ensureConsoleSecret(path: string): Promise<Buffer> {
  try {
    const s = Buffer.from((await readFile(path, 'utf8')).trim(), 'base64url');
    if (s.length >= 32) return s;
    throw new Error(`${path} holds less than 32 bytes of secret: delete it to make a new one`);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  // 'wx': two servers starting at once on one data directory keep one secret.
  await writeFile(path, `${b64(randomBytes(32))}\n`, { mode: 0o600, flag: 'wx' }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  return Buffer.from((await readFile(path, 'utf8')).trim(), 'base64url');
}
