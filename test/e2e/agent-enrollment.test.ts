/**
 * What a new node's agent says while the server has not accepted it, and once it refused it.
 * It used to exit 0 with "compliance 100%; sent 1" either way, and to log the server's refusal
 * of its token (ERR_NODE_UNKNOWN, ERR_NODE_PENDING) as a warning with a stack trace. Now: a plain
 * line, exit 5 while waiting and 6 when refused, and no stack in any program's log for these
 * expected conditions, whose lines carry a level name.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';

/** Every log line in `text` (JSON with a time; the `{"ready":true…}` line is not a log line). */
function logLines(text: string): Array<Record<string, unknown>> {
  return text.split('\n').filter((l) => l.startsWith('{')).map((l) => JSON.parse(l) as Record<string, unknown>).filter((l) => 'time' in l);
}

function noStacks(t: Test, what: string, text: string): void {
  t.notMatch(text, /"stack"/, `${what}: no stack trace for an expected condition`);
  for (const line of logLines(text)) {
    if (!['trace', 'debug', 'info', 'warn', 'error', 'fatal'].includes(line.level as string)) t.fail(`${what}: level ${String(line.level)} is not a name`);
  }
}

t.test('waiting for acceptance, accepted, refused: through a relay and straight to the server', async (t) => {
  const dir = programDir(t);
  const { server, relay, api } = await serverAndRelay(t, dir, { logLevel: 'info' });
  const agent = (state: string, via: string) => runProgram(BIN.agent, ['run', '--relay', via, '--state-dir', join(dir, state), '--log-level', 'info']);
  const nodeId = async (state: string) => (await readFile(join(dir, state, 'node-id'), 'utf8')).trim();

  // Through the relay the first renewal may reach the server before the inventory does (unknown),
  // or after it (pending): waiting for acceptance either way.
  const first = await agent('a', relay.url);
  const a = await nodeId('a');
  t.equal(first.code, 5, first.stderr);
  t.match(first.stdout, `node ${a} is waiting for acceptance`);
  noStacks(t, 'agent, first run', first.stderr);
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${a}`)).json?.data?.accepted === 'pending' ? true : undefined), 'node a pending');
  const again = await agent('a', relay.url);
  t.equal(again.code, 5, again.stderr);
  t.match(again.stdout, 'is waiting for acceptance');
  t.match(logLines(again.stderr).find((l) => l.code === 'ERR_NODE_PENDING'), { level: 'info', msg: /waiting for acceptance/ }, 'said once, at info, with its code');

  // Straight to the server: the same.
  const direct = await agent('b', server.url);
  const b = await nodeId('b');
  t.equal(direct.code, 5, direct.stderr);
  t.match(direct.stdout, `node ${b} is waiting for acceptance`);

  t.equal((await api('POST', `/api/1/nodes/${a}/accept`)).status, 200);
  const accepted = await agent('a', relay.url);
  t.equal(accepted.code, 0, accepted.stderr);
  t.notMatch(accepted.stdout, /acceptance|refused/);

  t.equal((await api('POST', `/api/1/nodes/${b}/refuse`)).status, 200);
  const refused = await agent('b', relay.url);
  t.equal(refused.code, 6, refused.stderr);
  t.match(refused.stdout, `node ${b} is refused by the server`);
  t.match(logLines(refused.stderr).find((l) => l.code === 'ERR_NODE_REFUSED'), { level: 'warn', msg: /refused/ });
  noStacks(t, 'agent, refused', refused.stderr);

  // The server and the relay refused files and tokens meanwhile: coded lines, no stacks.
  noStacks(t, 'server', server.output.join('\n'));
  noStacks(t, 'relay', relay.output.join('\n'));
  t.match(server.output.join('\n'), /"code":"ERR_NODE_(PENDING|UNKNOWN)"/, 'the server said why it refused the pending node\'s run log');
});
