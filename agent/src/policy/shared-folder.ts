/** Download a file of the server's shared folder through the relay (RUDDER's relay API path). */
import { httpRequest } from '../queue/http.js';
import { capstanError, userAgent } from '@capstan/shared/agent';

/** Largest shared-folder file the agent downloads into memory before checking its hash. */
export const MAX_SHARED_FILE = 512 * 1024 * 1024;

export async function fetchShared(relay: string, path: string, timeoutMs: number): Promise<Buffer> {
  const url = `${relay}/rudder/relay-api/1/shared-folder/${path.split('/').map(encodeURIComponent).join('/')}`;
  let res;
  try {
    res = await httpRequest({ method: 'GET', url, headers: { 'user-agent': userAgent('capstan-agent') }, timeoutMs, maxResponseBytes: MAX_SHARED_FILE });
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
