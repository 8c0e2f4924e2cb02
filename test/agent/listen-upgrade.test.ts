/**
 * `capstan-agent listen` and the upgrade request of an upgrade job's run event: a request that
 * does not pass the agent's own check (a relay is not trusted to shape command lines) is answered
 * with an `error` event and nothing runs; a good one reaches the run, checked and completed with
 * its defaults. The relay here is a small HTTP server on loopback speaking the listen protocol.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { listen, type RunRequest } from '@capstan/agent/remote-run/listen';

t.test('a bad upgrade request is refused with an error event; a good one reaches the run', async (t) => {
  const outputs = new Map<string, Array<Record<string, unknown>>>();
  const ended = new Map<string, () => void>();
  const waits = new Map<string, Promise<void>>();
  for (const ch of ['bad', 'good']) waits.set(ch, new Promise<void>((r) => ended.set(ch, r)));
  const runs = [
    { type: 'run', id: 'bad', conditions: [], upgrade: { mode: 'packages', packages: ['--allow-unauthenticated'] } },
    { type: 'run', id: 'good', conditions: ['force_inventory'], keep_output: true, upgrade: { mode: 'packages', packages: ['openssl>=3.0.2'] } },
  ];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    if (req.method === 'GET' && req.url?.startsWith('/remote-run/listen/')) {
      res.writeHead(200, { 'content-type': 'application/x-ndjson' });
      res.write(`${JSON.stringify({ type: 'hello', node: 'n1', relay: 'r1', heartbeat_ms: 60_000 })}\n`);
      // One at a time: the second after the first was answered (the agent runs one at a time).
      res.write(`${JSON.stringify(runs[0])}\n`);
      void waits.get('bad')!.then(() => res.write(`${JSON.stringify(runs[1])}\n`));
      return;
    }
    const ch = /^\/remote-run\/output\/(\w+)$/.exec(req.url ?? '')?.[1];
    if (req.method === 'POST' && ch) {
      let body = '';
      req.on('data', (d: Buffer) => (body += d.toString()));
      req.on('end', () => {
        outputs.set(ch, body.trim().split('\n').map((l) => JSON.parse(l) as Record<string, unknown>));
        res.end();
        ended.get(ch)?.();
      });
      return;
    }
    res.writeHead(404).end();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  const stop = new AbortController();
  t.teardown(() => stop.abort());
  const seen: RunRequest[] = [];
  void listen({
    relay: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, nodeId: 'n1', log: silentLogger, signal: stop.signal,
    run: async (req, out) => {
      seen.push(req);
      out.line('upgraded');
      return 0;
    },
  });
  await waits.get('good');
  t.match(outputs.get('bad'), [{ node: 'n1', type: 'error', text: /^upgrade refused: packages\[0\]: .* is not a package name/ }]);
  t.equal(outputs.get('bad')!.length, 1, 'nothing started');
  t.same(seen, [{
    channel: 'good', conditions: ['force_inventory'], keepOutput: true,
    upgrade: { mode: 'packages', packages: [{ name: 'openssl', min_version: '3.0.2' }], pre: [], post: [], reboot: 'never' },
  }], 'only the good request ran, checked and completed');
  t.same(outputs.get('good')!.map((e) => e.type), ['started', 'line', 'done']);
});
