/**
 * The admin token: written to <data-dir>/admin.token (0600) on first start, then required as
 * `Authorization: Bearer <token>` on every /api/1/ route. Compared in constant time.
 */
import { randomBytes, timingSafeEqual, createHash } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import type { FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared';

export async function ensureAdminToken(dataDir: string): Promise<string> {
  const path = join(dataDir, 'admin.token');
  try {
    const token = (await readFile(path, 'utf8')).trim();
    if (token.length >= 16) return token;
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const token = randomBytes(32).toString('base64url');
  // 'wx' so two server processes starting at once cannot overwrite each other's token.
  await writeFile(path, `${token}\n`, { mode: 0o600, flag: 'wx' }).catch(async (err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  return (await readFile(path, 'utf8')).trim();
}

const digest = (s: string) => createHash('sha256').update(s).digest();

export function requireAdmin(token: string): (req: FastifyRequest) => Promise<void> {
  const expected = digest(token);
  return async (req) => {
    const h = req.headers.authorization;
    const m = typeof h === 'string' ? /^Bearer\s+(\S+)$/i.exec(h) : null;
    if (!m) throw capstanError('ERR_UNAUTHORIZED', 'missing bearer token');
    if (!timingSafeEqual(digest(m[1]!), expected)) throw capstanError('ERR_UNAUTHORIZED', 'invalid token');
  };
}
