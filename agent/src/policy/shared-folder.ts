/** Download a file of the server's shared folder through the relay (RUDDER's relay API path). */
import { request } from 'undici';
import { capstanError, userAgent } from '@capstan/shared';

/** Largest shared-folder file the agent downloads into memory before checking its hash. */
export const MAX_SHARED_FILE = 512 * 1024 * 1024;

export async function fetchShared(relay: string, path: string, timeoutMs: number): Promise<Buffer> {
  const url = `${relay}/rudder/relay-api/1/shared-folder/${path.split('/').map(encodeURIComponent).join('/')}`;
  let res;
  try {
    res = await request(url, { method: 'GET', headers: { 'user-agent': userAgent('capstan-agent') }, headersTimeout: timeoutMs, bodyTimeout: timeoutMs });
  } catch (err) {
    throw capstanError('ERR_UPSTREAM', `relay unreachable: ${(err as Error).message}`, { cause: err });
  }
  if (res.statusCode !== 200) {
    await res.body.dump();
    throw capstanError(res.statusCode === 404 ? 'ERR_NOT_FOUND' : 'ERR_UPSTREAM', `shared-folder ${path}: relay answered ${res.statusCode}`);
  }
  const chunks: Buffer[] = [];
  let size = 0;
  for await (const c of res.body) {
    size += (c as Buffer).length;
    if (size > MAX_SHARED_FILE) {
      res.body.destroy();
      throw capstanError('ERR_BODY_TOO_LARGE', `shared-folder ${path} is larger than ${MAX_SHARED_FILE} bytes`);
    }
    chunks.push(c as Buffer);
  }
  return Buffer.concat(chunks);
}
