/**
 * Small HTTP pieces shared by tests that talk to the real programs: the remote-run stream's
 * JSON lines, and a refusal's status with its error code. (Not a .test.ts: a helper.)
 */
import type { IncomingMessage } from 'node:http';

/** Push every JSON line the response streams (a remote-run listen connection) into `events`. */
export function collectEvents<E = { type: string; id?: string }>(res: IncomingMessage, events: E[]): void {
  let buf = '';
  res.on('data', (chunk: Buffer) => {
    buf += chunk.toString();
    let nl: number;
    while ((nl = buf.indexOf('\n')) !== -1) {
      events.push(JSON.parse(buf.slice(0, nl)) as E);
      buf = buf.slice(nl + 1);
    }
  });
  res.on('error', () => {});
}

/** The JSON lines a streamed body carries (a remote-run listen connection), parsed as they come. */
export async function* jsonEvents<E = any>(body: AsyncIterable<Buffer | string>): AsyncGenerator<E> {
  let buf = '';
  for await (const chunk of body) {
    buf += chunk.toString();
    let nl: number;
    while ((nl = buf.indexOf('\n')) !== -1) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      yield JSON.parse(line) as E;
    }
  }
}

/** An answer's status and its `error.code` (undefined when the body is not a coded error). */
export async function statusAndCode(res: Response): Promise<{ status: number; code: string | undefined }> {
  const text = await res.text();
  let code: string | undefined;
  try {
    code = (JSON.parse(text) as { error?: { code?: string } }).error?.code;
  } catch {
    code = undefined;
  }
  return { status: res.status, code };
}
