/**
 * Sealing the keyring's private keys before they go into the registry database, which several
 * servers share and which is dumped and replicated like any database. The key-encryption secret
 * is a file (`[identity] secret_file`, default <data-dir>/identity.secret), made 0600 at the first
 * start when absent; every server sharing a database must be given the same file.
 *
 * AES-256-GCM with a fresh 96-bit IV per seal; the kid is the additional data, so a sealed key
 * moved to another row does not open. The AES key is derived from the file with HKDF, so the file
 * may hold any secret of at least 32 characters (the generated one is 32 random bytes, base64url).
 */
import { createCipheriv, createDecipheriv, hkdfSync, randomBytes } from 'node:crypto';
import { chmod, link, open, readFile, stat, unlink } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';

const VERSION = 'v1';
const MIN_SECRET_CHARS = 32;

export class KeySealer {
  private constructor(private readonly key: Buffer, readonly path: string) {}

  static fromSecret(secret: string, path = '(given)'): KeySealer {
    const s = secret.trim();
    if (s.length < MIN_SECRET_CHARS) throw capstanError('ERR_STARTUP', `identity secret ${path} must hold at least ${MIN_SECRET_CHARS} characters`);
    const key = Buffer.from(hkdfSync('sha256', Buffer.from(s, 'utf8'), Buffer.alloc(0), 'capstan identity key sealing v1', 32));
    return new KeySealer(key, path);
  }

  /**
   * Read the secret file; when it is absent and `create` is true, make one (0600; of two processes
   * racing, one makes it and the other reads what it made).
   */
  static async load(path: string, create: boolean): Promise<{ sealer: KeySealer; created: boolean }> {
    let created = false;
    if (create) {
      // Written whole under a temporary name, then linked into place: link() fails if the file
      // exists, so a process racing us reads either nothing (ENOENT → it creates) or all of it.
      const tmp = `${path}.${process.pid}.${randomBytes(4).toString('hex')}.tmp`;
      try {
        const fh = await open(tmp, 'wx', 0o600);
        try {
          await fh.writeFile(`${randomBytes(32).toString('base64url')}\n`);
          await fh.sync();
        } finally {
          await fh.close();
        }
        await link(tmp, path);
        created = true;
      } catch (err) {
        if ((err as NodeJS.ErrnoException).code !== 'EEXIST') throw capstanError('ERR_STARTUP', `cannot create identity secret ${path}: ${(err as Error).message}`, { cause: err });
      } finally {
        await unlink(tmp).catch(() => undefined);
      }
    }
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      if ((err as NodeJS.ErrnoException).code === 'ENOENT') {
        throw capstanError('ERR_STARTUP', `identity secret ${path} does not exist, but the database already holds a signing keyring: every server sharing a database needs the same identity secret file (copy it from the server that created the keyring)`);
      }
      throw capstanError('ERR_STARTUP', `cannot read identity secret ${path}: ${(err as Error).message}`, { cause: err });
    }
    // Tighten a file someone created with the umask: it opens every signing key.
    const st = await stat(path);
    if ((st.mode & 0o077) !== 0) await chmod(path, 0o600).catch(() => undefined);
    return { sealer: KeySealer.fromSecret(text, path), created };
  }

  seal(kid: string, plain: string): string {
    const iv = randomBytes(12);
    const c = createCipheriv('aes-256-gcm', this.key, iv);
    c.setAAD(Buffer.from(kid, 'utf8'));
    const ct = Buffer.concat([c.update(plain, 'utf8'), c.final()]);
    return [VERSION, iv.toString('base64url'), c.getAuthTag().toString('base64url'), ct.toString('base64url')].join('.');
  }

  /** Open a sealed key; null when this secret does not open it (another secret, or tampered). */
  open(kid: string, sealed: string): string | null {
    const [v, iv, tag, ct] = sealed.split('.');
    if (v !== VERSION || !iv || !tag || ct === undefined) return null;
    try {
      const d = createDecipheriv('aes-256-gcm', this.key, Buffer.from(iv, 'base64url'));
      d.setAAD(Buffer.from(kid, 'utf8'));
      d.setAuthTag(Buffer.from(tag, 'base64url'));
      return Buffer.concat([d.update(Buffer.from(ct, 'base64url')), d.final()]).toString('utf8');
    } catch {
      return null;
    }
  }
}
