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

async function relay(t: { teardown: (fn: () => unknown) => void }, answer: (url: string) => [number, string]): Promise<string> {
  const server: Server = createServer((req, res) => {
    const [status, body] = answer(req.url ?? '');
    res.writeHead(status, { 'content-type': 'text/plain' }).end(body);
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise((r) => server.close(r)));
  return `http://127.0.0.1:${(server.address() as AddressInfo).port}`;
}

t.test('the relay\'s id from /uuid, remembered for when the relay cannot answer', async (t) => {
  const state = t.testdir();
  let id = 'relay-dc1.a';
  const url = await relay(t, (u) => (u === '/uuid' ? [200, `${id}\n`] : [404, '']));
  t.equal(await policyServerId(url, state, 1000, silentLogger), 'relay-dc1.a');
  t.equal((await readFile(join(state, 'policy-server'), 'utf8')).trim(), 'relay-dc1.a');
  id = 'relay-dc2';
  t.equal(await policyServerId(url, state, 1000, silentLogger), 'relay-dc2', 'a new relay id replaces the old one');
  // Unreachable: the last id the relay gave.
  t.equal(await policyServerId('http://127.0.0.1:1', state, 1000, silentLogger), 'relay-dc2');
});

t.test('no id ever given: the relay\'s host name; a bad answer is not taken', async (t) => {
  const state = t.testdir();
  const notFound = await relay(t, () => [404, 'nope']);
  t.equal(await policyServerId(notFound, state, 1000, silentLogger), '127.0.0.1');
  const bad = await relay(t, () => [200, '../../etc/passwd']);
  t.equal(await policyServerId(bad, state, 1000, silentLogger), '127.0.0.1');
  await writeFile(join(state, 'policy-server'), 'root\n');
  t.equal(await policyServerId(bad, state, 1000, silentLogger), 'root', 'the remembered id, not the bad answer');
  const huge = await relay(t, () => [200, 'x'.repeat(10_000)]);
  t.equal(await policyServerId(huge, state, 1000, silentLogger), 'root', 'an oversized answer is refused');
});
