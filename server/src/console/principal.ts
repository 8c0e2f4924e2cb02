/**
 * Who makes an admin request: the principal a token resolves to (the bootstrap admin, or a named
 * admin with a role; api/auth.ts resolves both). The console takes the same shapes as the API, so
 * a sign-in and a bearer token name the same principal.
 */

// One principal type for the API and the console: api/auth.ts owns it (with req.principal).
export type { Principal, ResolveToken } from '../api/auth.js';
