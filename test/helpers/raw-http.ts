/**
 * HTTP over a bare socket (node:net), for what no client library sends: malformed request lines,
 * Content-Lengths and chunks, oversized heads, bodies trickled or cut short. Writes the pieces
 * given (a number is a pause, in ms, the client takes before the next piece), then reads the first
 * answer until the connection closes or its Content-Length is in.
 */
import { connect } from 'node:net';

export interface RawAnswer {
  /** 0 when the program closed without answering. */
  status: number;
  headers: Record<string, string>;
  body: string;
  /** Time from the first byte sent to the answer (ms). */
  ms: number;
}

/** `localAddress`: the address to send from (any of 127/8 on loopback: another client). */
export function rawHttp(base: string, pieces: Array<string | Buffer | number>, timeoutMs = 10_000, localAddress?: string): Promise<RawAnswer> {
  const u = new URL(base);
  return new Promise((resolve, reject) => {
    const started = Date.now();
    // The answer to HEAD has a Content-Length but no body.
    const first = pieces[0];
    const head = (typeof first === 'string' ? first : Buffer.isBuffer(first) ? first.subarray(0, 5).toString('latin1') : '').startsWith('HEAD ');
    const socket = connect({ host: u.hostname, port: Number(u.port), ...(localAddress && { localAddress }) });
    const chunks: Buffer[] = [];
    let done = false;
    const timer = setTimeout(() => finish(new Error(`no answer within ${timeoutMs} ms`)), timeoutMs);
    const parse = (): RawAnswer | null => {
      let all = Buffer.concat(chunks);
      // Interim answers (100 Continue) come before the answer: skip them.
      while (/^HTTP\/1\.[01] 1\d\d /.test(all.subarray(0, 13).toString('latin1')) && all.indexOf('\r\n\r\n') >= 0) all = all.subarray(all.indexOf('\r\n\r\n') + 4);
      const end = all.indexOf('\r\n\r\n');
      if (end < 0) return null;
      const lines = all.subarray(0, end).toString('latin1').split('\r\n');
      const status = Number(/^HTTP\/1\.[01] (\d{3})/.exec(lines[0] ?? '')?.[1] ?? 0);
      const headers: Record<string, string> = {};
      for (const l of lines.slice(1)) {
        const i = l.indexOf(':');
        if (i > 0) headers[l.slice(0, i).trim().toLowerCase()] = l.slice(i + 1).trim();
      }
      const body = all.subarray(end + 4);
      const length = head ? 0 : headers['content-length'] === undefined ? null : Number(headers['content-length']);
      if (length !== null && body.length < length) return null;
      return { status, headers, body: body.subarray(0, length ?? body.length).toString('utf8'), ms: Date.now() - started };
    };
    function finish(err?: Error): void {
      if (done) return;
      done = true;
      clearTimeout(timer);
      socket.destroy();
      if (err) return reject(err);
      resolve(parse() ?? { status: 0, headers: {}, body: Buffer.concat(chunks).toString('utf8'), ms: Date.now() - started });
    }
    socket.on('data', (d: Buffer) => {
      chunks.push(d);
      const a = parse();
      // A 1xx (100-continue) is not the answer: keep reading.
      if (a && a.status >= 200 && a.headers['content-length'] !== undefined) finish();
    });
    socket.on('close', () => finish());
    socket.on('error', (err: NodeJS.ErrnoException) => {
      // Reset while we were still writing: the answer (if any) came before; report what we have.
      if (err.code === 'ECONNRESET' || err.code === 'EPIPE') finish();
      else finish(err);
    });
    void (async () => {
      for (const p of pieces) {
        if (done) return;
        if (typeof p === 'number') await new Promise((r) => setTimeout(r, p));
        else if (!socket.destroyed) socket.write(p);
      }
    })();
  });
}

/** The coded error of an answer, or undefined when its body is not `{"error":{"code":…}}`. */
export function codeOf(a: { body: string }): string | undefined {
  try {
    const j = JSON.parse(a.body) as { error?: { code?: unknown; message?: unknown } };
    return typeof j.error?.code === 'string' && /^ERR_[A-Z0-9_]+$/.test(j.error.code) && typeof j.error.message === 'string' ? j.error.code : undefined;
  } catch {
    return undefined;
  }
}
