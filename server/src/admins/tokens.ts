/** Admin tokens: how they are made and what is stored of them. */
import { createHash, randomBytes } from 'node:crypto';

/** The bootstrap admin's name and role: no named admin may take the name. */
export const BOOTSTRAP_ADMIN = 'admin';

/** A new admin token: 32 random bytes, base64url. */
export const newToken = (): string => randomBytes(32).toString('base64url');

/** What is stored of a token: sha256, hex (enough for 256 random bits: no salt or stretching needed). */
export const tokenDigest = (token: string): string => createHash('sha256').update(token).digest('hex');
