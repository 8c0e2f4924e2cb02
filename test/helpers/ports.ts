/**
 * Ports for tests that must know a port before anything listens on it (an upstream that comes
 * back after an outage, an sshd told where to listen), and listening again on a port a server
 * had. Tests run two files at a time, each making thousands of loopback connections: a port the
 * kernel handed out once (`listen(0)`) may be the local end of another connection by the time
 * it is used again, and the listen then fails with EADDRINUSE.
 */
import { readFileSync } from 'node:fs';
import { createServer, type Server } from 'node:net';

/** The kernel's ephemeral range: `listen(0)` and outgoing connections take their ports from it. */
function ephemeralLow(): number {
  try {
    const low = Number(readFileSync('/proc/sys/net/ipv4/ip_local_port_range', 'utf8').trim().split(/\s+/)[0]);
    return Number.isInteger(low) && low > 2048 ? low : 32768;
  } catch {
    return 32768;
  }
}

/** One listen: null once listening, else its error (both listeners removed either way, for a retry). */
function tryListen(server: Server, port: number, host: string): Promise<NodeJS.ErrnoException | null> {
  return new Promise((resolve) => {
    const onError = (err: NodeJS.ErrnoException) => {
      server.off('listening', onListening);
      resolve(err);
    };
    const onListening = () => {
      server.off('error', onError);
      resolve(null);
    };
    server.once('error', onError);
    server.once('listening', onListening);
    server.listen(port, host);
  });
}

/**
 * A free port below the ephemeral range, where neither a `listen(0)` nor an outgoing connection
 * of another test can take it in the meantime.
 */
export async function freePort(host = '127.0.0.1'): Promise<number> {
  const high = ephemeralLow() - 1;
  const low = Math.max(1025, high - 12_000);
  for (let i = 0; i < 100; i++) {
    const port = low + Math.floor(Math.random() * (high - low + 1));
    const probe = createServer();
    if ((await tryListen(probe, port, host)) === null) {
      await new Promise<void>((r) => probe.close(() => r()));
      return port;
    }
  }
  throw new Error(`no free port found between ${low} and ${high}`);
}

/**
 * `server.listen(port, host)`, where a fixed port that is briefly in use (the local end of a
 * closing connection) is tried again every 50 ms for up to `timeoutMs`. Port 0 is never retried.
 * Resolves with the port listened on; rejects with the last error.
 */
export async function listenOn(server: Server, port: number, host = '127.0.0.1', timeoutMs = 15_000): Promise<number> {
  const until = Date.now() + timeoutMs;
  for (;;) {
    const err = await tryListen(server, port, host);
    if (!err) return (server.address() as { port: number }).port;
    if (err.code !== 'EADDRINUSE' || port === 0 || Date.now() > until) throw err;
    await new Promise((r) => setTimeout(r, 50));
  }
}
