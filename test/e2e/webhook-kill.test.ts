/**
 * The outbox survives a kill -9: the server is killed while a webhook receiver holds its request
 * (delivery in flight, unanswered), started again on the same data directory, and the receiver
 * gets every event, each id at least once and none missing; the unanswered message is sent again
 * once its claim lapses. The events are written into the server's database by a second store on
 * the same SQLite file, as another server on the database would.
 */
import { createServer, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { openRegistry } from '@capstan/server/registry/open';
import { readFile, writeFile } from 'node:fs/promises';
import { adminClient, BIN, programDir, startProgram, waitFor } from '../helpers/programs.js';

t.test('a server killed with SIGKILL during a delivery delivers every event after its restart, each id at least once', async (t) => {
  const dir = programDir(t);
  const data = join(dir, 'server');
  const config = join(dir, 'server.toml');
  await writeFile(config, `[notifications]
poll_interval = "100ms"
webhook_timeout = "1s"
min_backoff = "200ms"
max_backoff = "1s"
group_window = "0s"
max_events = 4
`);
  // The receiver: the first request is held (never answered) until the server is dead; then 200.
  let holding = true;
  const held: ServerResponse[] = [];
  const heldIds: number[] = [];
  const delivered = new Map<number, number>();
  const rx = createServer((req, res) => {
    let body = '';
    req.on('data', (c: Buffer) => (body += c.toString()));
    req.on('end', () => {
      const ids = (JSON.parse(body) as { events: Array<{ id: number }> }).events.map((e) => e.id);
      if (holding) {
        heldIds.push(...ids);
        held.push(res);
        return;
      }
      for (const id of ids) delivered.set(id, (delivered.get(id) ?? 0) + 1);
      res.writeHead(204).end();
    });
  });
  await new Promise<void>((r) => rx.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => {
    for (const res of held) res.destroy();
    rx.closeAllConnections();
    rx.close(() => r());
  }));
  const url = `http://127.0.0.1:${(rx.address() as AddressInfo).port}/hook`;

  const start = () => startProgram(BIN.server, ['serve', '--config', config, '--listen', '127.0.0.1:0', '--data-dir', data, '--log-level', 'warn']);
  const first = await start();
  // Stopped by the test (killed), or by its teardown if it fails before.
  t.teardown(() => (first.proc.exitCode === null && first.proc.signalCode === null ? first.stop() : undefined));
  const token = (await readFile(join(data, 'admin.token'), 'utf8')).trim();
  const api = adminClient(first.url, token);
  t.equal((await api('POST', '/api/1/subscriptions', { id: 'hook', kind: 'webhook', url, types: ['node.*'] })).status, 201);

  const store = await openRegistry({ sqlitePath: join(data, 'capstan.db') });
  t.teardown(() => store.close());
  const ids = await store.insertEvents(Array.from({ length: 10 }, (_, i) => ({
    at: new Date().toISOString(), type: 'node.no_answer', severity: 'warning' as const, node_id: `node-${i}`, data: { relay: 'relay-1' },
  })));
  await waitFor(async () => (heldIds.length > 0 ? true : undefined), 'a delivery in flight');
  first.proc.kill('SIGKILL');
  await new Promise((r) => first.proc.once('exit', r));
  t.ok(heldIds.every((id) => ids.includes(id)), 'the held request carried some of the events');
  holding = false;

  const second = await start();
  t.teardown(() => second.stop());
  await waitFor(async () => (ids.every((id) => delivered.has(id)) ? true : undefined), 'every event delivered after the restart', 30_000);
  t.same([...delivered.keys()].sort((a, b) => a - b), ids, 'each id, none missing, none foreign');
  t.ok(heldIds.every((id) => delivered.has(id)), 'the message in flight at the kill was sent again');
  const after = adminClient(second.url, token);
  await waitFor(async () => ((await after('GET', '/api/1/deliveries?state=pending')).json.total === 0 ? true : undefined), 'nothing pending');
  const done = (await after('GET', '/api/1/deliveries?state=delivered')).json.data as Array<{ event_ids: number[] }>;
  t.same(done.flatMap((d) => d.event_ids).sort((a, b) => a - b), ids, 'the outbox holds each event in one delivered message');
});
