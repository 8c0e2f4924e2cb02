/**
 * The inventory's policy_server is the relay's node id, asked at GET /uuid (relays route by the
 * chain of those ids; the relay's host name there, as before, matched no relay and left nodes
 * behind a sub-relay unreachable through a synced nodes list).
 */
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { policyServerId } from '@capstan/agent/identity/policy-server';
import { programDir } from '../helpers/programs.js';

async function relay(t: { teardown: (fn: () => unknown) => void }, answer: (url: string) => [number, string]): Promise<{ url: string; asked: () => number }> {
  let asked = 0;
  const server: Server = createServer((req, res) => {
    asked++;
    const [status, body] = answer(req.url ?? '');
    res.writeHead(status, { 'content-type': 'text/plain' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => server.close(r)));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, asked: () => asked };
}

const DAY = 24 * 3600_000;

t.test('the relay\'s id from /uuid, asked once a day or when the relay changes, remembered when it cannot answer', async (t) => {
  const state = programDir(t);
  let id = 'relay-dc1.a';
  const r = await relay(t, (u) => (u === '/uuid' ? [200, `${id}\n`] : [404, '']));
  const now = Date.now();
  t.equal(await policyServerId(r.url, state, 1000, silentLogger, now), 'relay-dc1.a');
  t.match(JSON.parse(await readFile(join(state, 'policy-server'), 'utf8')), { relay: r.url, id: 'relay-dc1.a' });
  id = 'relay-dc2';
  t.equal(await policyServerId(r.url, state, 1000, silentLogger, now + 60_000), 'relay-dc1.a', 'within a day: no request');
  t.equal(r.asked(), 1);
  t.equal(await policyServerId(r.url, state, 1000, silentLogger, now + DAY), 'relay-dc2', 'a day later: asked again');
  // A relay URL that does not answer: the last id a relay gave (the inventory does not flap to a
  // host name and back at every outage).
  t.equal(await policyServerId('http://127.0.0.1:1', state, 1000, silentLogger, now + DAY), 'relay-dc2');
});

t.test('no id ever given: the relay\'s host name; a bad or oversized answer is not taken', async (t) => {
  const state = programDir(t);
  const notFound = await relay(t, () => [404, 'nope']);
  t.equal(await policyServerId(notFound.url, state, 1000, silentLogger), '127.0.0.1');
  const bad = await relay(t, () => [200, '../../etc/passwd']);
  t.equal(await policyServerId(bad.url, state, 1000, silentLogger), '127.0.0.1');
  // Remembered for this relay a week ago, and now it answers nonsense: the remembered id.
  await writeFile(join(state, 'policy-server'), JSON.stringify({ relay: bad.url, id: 'root', at: Date.now() - 7 * DAY }));
  t.equal(await policyServerId(bad.url, state, 1000, silentLogger), 'root', 'the remembered id, not the bad answer');
  const huge = await relay(t, () => [200, 'x'.repeat(10_000)]);
  await writeFile(join(state, 'policy-server'), 'not json');
  t.equal(await policyServerId(huge.url, state, 1000, silentLogger), '127.0.0.1', 'an oversized answer is refused; a damaged file is ignored');
});
