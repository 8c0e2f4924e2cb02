/**
 * OAuth access tokens for the gcp driver, as Google's Application Default Credentials find them,
 * without the client library (see gcp.ts for why):
 *   1. a key file named by GOOGLE_APPLICATION_CREDENTIALS, else gcloud's well-known
 *      application_default_credentials.json: a `service_account` key (a JWT signed with its
 *      private key, exchanged at the key's token_uri: RFC 7523 jwt-bearer) or an
 *      `authorized_user` (its refresh token exchanged there);
 *   2. otherwise the metadata server of the instance running the provider (its service account),
 *      at GCE_METADATA_HOST when set, as Google's libraries honour it.
 * A manager may instead name variables holding an access token or a key file's path (`env`).
 * Tokens are cached until a minute before they expire. Every failure is ERR_PROVIDER with what
 * Google said (`error`, `error_description`), never a key or a token.
 */
import { readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join } from 'node:path';
import { importPKCS8, SignJWT } from 'jose';
import { capstanError } from '@capstan/shared/errors';
import { envCredential } from './common.js';
import type { CredentialsRef } from './types.js';

/** Read-only is all discovery needs. */
export const GCP_SCOPE = 'https://www.googleapis.com/auth/compute.readonly';
const DEFAULT_TOKEN_URI = 'https://oauth2.googleapis.com/token';
const METADATA_HOST = 'metadata.google.internal';
const MAX_KEY_FILE_BYTES = 64 * 1024;
const TOKEN_TIMEOUT_MS = 10_000;
/** A token is renewed this long before it expires. */
const EARLY_MS = 60_000;

interface KeyFile {
  type?: string;
  client_email?: string;
  private_key?: string;
  private_key_id?: string;
  token_uri?: string;
  client_id?: string;
  client_secret?: string;
  refresh_token?: string;
}

function fail(message: string, cause?: unknown): never {
  throw capstanError('ERR_PROVIDER', `gcp: ${message}`, cause === undefined ? undefined : { cause });
}

/** The token endpoint a key file names: https, or http on loopback only (a local test endpoint). */
function tokenUri(raw: string | undefined, file: string): string {
  const s = raw ?? DEFAULT_TOKEN_URI;
  let u: URL;
  try {
    u = new URL(s);
  } catch {
    return fail(`key file ${file}: token_uri is not a URL`);
  }
  const loopback = u.hostname === '127.0.0.1' || u.hostname === 'localhost' || u.hostname === '[::1]';
  if (u.protocol !== 'https:' && !(u.protocol === 'http:' && loopback)) fail(`key file ${file}: token_uri must be https`);
  return u.toString();
}

async function readKeyFile(file: string): Promise<KeyFile> {
  let text: string;
  try {
    const buf = await readFile(file);
    if (buf.length > MAX_KEY_FILE_BYTES) fail(`key file ${file} is larger than ${MAX_KEY_FILE_BYTES} bytes`);
    text = buf.toString('utf8');
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_PROVIDER') throw err;
    return fail(`cannot read key file ${file}: ${(err as Error).message}`, err);
  }
  try {
    const k = JSON.parse(text) as KeyFile;
    if (!k || typeof k !== 'object') throw new Error('not an object');
    return k;
  } catch {
    return fail(`key file ${file} is not a JSON object`);
  }
}

/** POST a form to a token endpoint; Google's error (`error`, `error_description`) when refused. */
async function exchange(uri: string, form: Record<string, string>, signal?: AbortSignal): Promise<{ token: string; until: number }> {
  const timeout = AbortSignal.timeout(TOKEN_TIMEOUT_MS);
  let res: Response;
  try {
    res = await fetch(uri, {
      method: 'POST', body: new URLSearchParams(form),
      headers: { 'content-type': 'application/x-www-form-urlencoded', accept: 'application/json' },
      signal: signal ? AbortSignal.any([signal, timeout]) : timeout,
    });
  } catch (err) {
    return fail(`token endpoint ${new URL(uri).host} unreachable: ${(err as Error).message}`, err);
  }
  return tokenAnswer(res, `token endpoint ${new URL(uri).host}`);
}

async function tokenAnswer(res: Response, where: string): Promise<{ token: string; until: number }> {
  const text = await res.text();
  let body: Record<string, unknown> = {};
  try {
    body = JSON.parse(text) as Record<string, unknown>;
  } catch {
    // not JSON: reported below by status
  }
  if (!res.ok) {
    const what = typeof body.error === 'string' ? `${body.error}${typeof body.error_description === 'string' ? `: ${body.error_description}` : ''}` : text.slice(0, 200);
    fail(`${where} answered HTTP ${res.status}: ${what.replace(/\s+/g, ' ')}`);
  }
  if (typeof body.access_token !== 'string' || body.access_token === '') fail(`${where} sent no access_token`);
  const expires = typeof body.expires_in === 'number' && body.expires_in > 0 ? body.expires_in : 3600;
  return { token: body.access_token, until: Date.now() + expires * 1000 - EARLY_MS };
}

async function fromKeyFile(file: string, signal?: AbortSignal): Promise<{ token: string; until: number }> {
  const k = await readKeyFile(file);
  const uri = tokenUri(k.token_uri, file);
  if (k.type === 'service_account') {
    if (!k.client_email || !k.private_key) fail(`key file ${file}: a service_account key needs client_email and private_key`);
    let key: Awaited<ReturnType<typeof importPKCS8>>;
    try {
      key = await importPKCS8(k.private_key, 'RS256');
    } catch (err) {
      return fail(`key file ${file}: private_key is not a PKCS#8 RSA key`, err);
    }
    const now = Math.floor(Date.now() / 1000);
    const assertion = await new SignJWT({ scope: GCP_SCOPE })
      .setProtectedHeader({ alg: 'RS256', typ: 'JWT', ...(k.private_key_id && { kid: k.private_key_id }) })
      .setIssuer(k.client_email).setAudience(uri).setIssuedAt(now).setExpirationTime(now + 3600)
      .sign(key);
    return exchange(uri, { grant_type: 'urn:ietf:params:oauth:grant-type:jwt-bearer', assertion }, signal);
  }
  if (k.type === 'authorized_user') {
    if (!k.client_id || !k.client_secret || !k.refresh_token) fail(`key file ${file}: an authorized_user needs client_id, client_secret and refresh_token`);
    return exchange(uri, { grant_type: 'refresh_token', client_id: k.client_id, client_secret: k.client_secret, refresh_token: k.refresh_token }, signal);
  }
  return fail(`key file ${file}: type ${JSON.stringify(k.type ?? null)} is not service_account or authorized_user`);
}

async function fromMetadata(env: NodeJS.ProcessEnv, signal?: AbortSignal): Promise<{ token: string; until: number }> {
  const host = env.GCE_METADATA_HOST || METADATA_HOST;
  const url = `http://${host}/computeMetadata/v1/instance/service-accounts/default/token?scopes=${encodeURIComponent(GCP_SCOPE)}`;
  const timeout = AbortSignal.timeout(TOKEN_TIMEOUT_MS);
  let res: Response;
  try {
    res = await fetch(url, { headers: { 'metadata-flavor': 'Google' }, signal: signal ? AbortSignal.any([signal, timeout]) : timeout });
  } catch (err) {
    return fail(`no credentials: no GOOGLE_APPLICATION_CREDENTIALS, no gcloud application default credentials, and the metadata server ${host} is unreachable (${(err as Error).message})`, err);
  }
  return tokenAnswer(res, `metadata server ${host}`);
}

/** gcloud's application default credentials file on this host, when there is one. */
function wellKnownFile(env: NodeJS.ProcessEnv): string | null {
  const dir = env.CLOUDSDK_CONFIG || (env.HOME ? join(env.HOME, '.config', 'gcloud') : null);
  const file = dir ? join(dir, 'application_default_credentials.json') : null;
  return file && existsSync(file) ? file : null;
}

export type TokenSource = (signal?: AbortSignal) => Promise<string>;

/** A cached token source for a manager's credentials reference, read on the provider's host. */
export function gcpTokenSource(c: CredentialsRef, env: NodeJS.ProcessEnv): TokenSource {
  let cached: { token: string; until: number } | null = null;
  let inflight: Promise<{ token: string; until: number }> | null = null;
  const fetchToken = (signal?: AbortSignal) => {
    if (c.source === 'env' && c.vars.credentials_file) return fromKeyFile(envCredential(env, c.vars, 'credentials_file'), signal);
    const file = env.GOOGLE_APPLICATION_CREDENTIALS || wellKnownFile(env);
    return file ? fromKeyFile(file, signal) : fromMetadata(env, signal);
  };
  return async (signal) => {
    if (c.source === 'env' && c.vars.access_token) return envCredential(env, c.vars, 'access_token');
    if (cached && cached.until > Date.now()) return cached.token;
    // One exchange at a time: pages and retries waiting for a token share it.
    inflight ??= fetchToken(signal).finally(() => {
      inflight = null;
    });
    cached = await inflight;
    return cached.token;
  };
}
