/** Download a file of the server's shared folder through the relay (RUDDER's relay API path). */
import { httpRequest } from '../queue/http.js';
import type { NodeAuth } from './fetch.js';
import { capstanError, userAgent } from '@capstan/shared/agent';

/** Largest shared-folder file the agent downloads into memory before checking its hash. */
export const MAX_SHARED_FILE = 512 * 1024 * 1024;

export async function fetchShared(relay: string, path: string, timeoutMs: number, auth?: NodeAuth): Promise<Buffer> {
  const url = `${relay}/rudder/relay-api/1/shared-folder/${path.split('/').map(encodeURIComponent).join('/')}`;
  let res;
  try {
    const get = (token: string | null) =>
      httpRequest({
        method: 'GET',
        url,
        headers: { 'user-agent': userAgent('capstan-agent'), ...(token ? { authorization: `Bearer ${token}` } : {}) },
        timeoutMs,
        maxResponseBytes: MAX_SHARED_FILE,
      });
    res = await get((await auth?.current()) ?? null);
    if (res.status === 401 && auth) {
      const fresh = await auth.renew().catch(() => null);
      if (fresh) res = await get(fresh);
    }
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_BODY_TOO_LARGE') {
      throw capstanError('ERR_BODY_TOO_LARGE', `shared-folder ${path} is larger than ${MAX_SHARED_FILE} bytes`);
    }
    throw capstanError('ERR_UPSTREAM', `relay unreachable: ${(err as Error).message}`, { cause: err });
  }
  if (res.status !== 200) {
    throw capstanError(res.status === 404 ? 'ERR_NOT_FOUND' : 'ERR_UPSTREAM', `shared-folder ${path}: relay answered ${res.status}`);
  }
  return res.body;
}
