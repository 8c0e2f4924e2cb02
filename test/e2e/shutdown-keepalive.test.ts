/**
 * A program stopping while a request is in flight on a keep-alive connection (a relay's long poll
 * for policy changes, its batch upload) answers it and closes that connection, so its shutdown is
 * not held until the peer lets the connection go (it was, for tens of seconds, whenever a relay
 * was busy with the server at SIGTERM).
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { Pool } from 'undici';
import { BIN, programDir, startProgram, startServer, type Running } from '../helpers/programs.js';

const CHANGES = '/rudder/relay-api/1/policies/changes';

interface LongPoll {
  /** Asked first: its answer gives the cursor to wait from. */
  first: string;
  /** The long poll, from that answer. */
  then: (answer: { data: unknown; next_after?: number }) => string;
  headers?: Record<string, string>;
}

const POLICY_CHANGES: LongPoll = {
  first: CHANGES,
  then: (a) => `${CHANGES}?since=${(a.data as { cursor: string }).cursor}&wait=50s`,
};

/** A long poll in flight on a kept-alive connection when the program gets SIGTERM: its answer, and the exit code. */
async function pollThroughStop(t: Test, program: Running, poll: LongPoll = POLICY_CHANGES) {
  // The peer keeps its connection for a minute, as relays do with their upstream.
  const pool = new Pool(program.url, { connections: 1, keepAliveTimeout: 60_000, keepAliveMaxTimeout: 60_000 });
  t.teardown(() => pool.destroy());
  const first = await pool.request({ method: 'GET', path: poll.first, headers: poll.headers });
  t.equal(first.statusCode, 200);
  const cursorFrom = await first.body.json() as { data: unknown; next_after?: number };
  t.not(first.headers.connection, 'close', 'the connection is kept alive while the program runs');

  const polling = pool.request({ method: 'GET', path: poll.then(cursorFrom), headers: poll.headers });
  // Another request on another connection answered: the poll, sent first, is being served.
  const probe = new Pool(program.url, { connections: 1 });
  t.teardown(() => probe.destroy());
  await (await probe.request({ method: 'GET', path: CHANGES })).body.dump();
  const exited = program.stop();
  const answer = await polling;
  await answer.body.dump();
  t.equal(answer.headers.connection, 'close', 'the answer given while stopping closes its connection');
  t.equal(await exited, 0, 'and the program exits cleanly');
}

t.test('the server closes a kept-alive connection that was busy when it stopped', async (t) => {
  const { server } = await startServer(t, join(programDir(t), 'server'));
  await pollThroughStop(t, server);
});

t.test("the server's events long poll, answered as it stops, closes its connection too", async (t) => {
  const { server, token } = await startServer(t, join(programDir(t), 'server'));
  await pollThroughStop(t, server, {
    first: '/api/1/events?limit=1',
    then: (a) => `/api/1/events?after=${a.next_after ?? 0}&wait=50`,
    headers: { authorization: `Bearer ${token}` },
  });
});

t.test('a relay closes a kept-alive connection that was busy when it stopped', async (t) => {
  const dir = programDir(t);
  const { server } = await startServer(t, join(dir, 'server'));
  // Without push hints of its own, nothing but the stop answers the poll (the first hints from
  // the upstream would, as a reset).
  await writeFile(join(dir, 'relayd.toml'), '[policies]\npush_hints = false\n');
  const relay = await startProgram(BIN.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  await pollThroughStop(t, relay);
});
