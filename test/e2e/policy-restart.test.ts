/**
 * What policy generation keeps survives a restart of the real server (migration 24): a node using
 * a secret keeps its config id (its sealed value is the stored one, not sealed afresh), so the
 * start-up generation finds nothing to change; and a node whose groups conflict still shows its
 * problem, found when it was first found, and told once (no second `policy.failed`). Node
 * properties are JSON values here: the agent writes a file rendered from an object's key.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BIN, runProgram, startProgram, startServer, waitFor, programDir, type Running } from '../helpers/programs.js';

const SECRET = 'pw-3e1b-kept-across-restarts';

/** The `changed` count of the server's start-up generation ("policies checked" in its log). */
async function startupChanged(server: Running): Promise<number> {
  return waitFor(async () => {
    for (const line of [...server.stderr.join('').split('\n'), ...server.output]) {
      if (!line.includes('policies checked')) continue;
      const rec = JSON.parse(line) as { changed?: number };
      if (typeof rec.changed === 'number') return rec.changed;
    }
    return undefined;
  }, 'the start-up generation\'s log line', 60_000);
}

t.test('a restarted server regenerates nothing unchanged and keeps node problems', async (t) => {
  const dir = programDir(t);
  const first = await startServer(t, join(dir, 'server'), { logLevel: 'info' });
  const relay = await startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', first.server.url, '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  const api = first.api;
  const target = join(dir, 'rendered.conf');
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error']);

  t.equal((await agent()).code, 5, 'waits for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.total === 1 ? true : undefined), 'the pending node');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  // A second node, made by the admin: its two groups of equal priority disagree.
  t.match((await api('POST', '/api/1/nodes', { id: 'other', hostname: 'other.test' })).json, { data: { accepted: 'accepted' } });

  t.equal((await api('PUT', '/api/1/properties/db_pw', { value: SECRET, secret: true })).status, 201);
  const site = { room: 'R7', racks: [3, 4] };
  t.same((await api('PUT', `/api/1/nodes/${id}/properties`, { site, weight: 2 })).json.data, { site, weight: 2 }, 'node properties are JSON values');
  t.same((await api('GET', `/api/1/nodes/${id}/properties`)).json.data, { site, weight: 2 });
  const listed = (await api('GET', `/api/1/nodes?q=${encodeURIComponent('property:site.racks.1 = 4 and property:weight > 1')}`)).json.data as Array<{ id: string }>;
  t.same(listed.map((n) => n.id), [id], 'filtered by a path into a node property');
  t.equal((await api('POST', '/api/1/groups', { id: 'mine', name: 'Mine', nodes: [id] })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'a', name: 'A', nodes: ['other'], properties: { port: { value: 80 } } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'b', name: 'B', nodes: ['other'], properties: { port: { value: 81 } } })).status, 201);
  t.equal((await api('POST', '/api/1/directives', {
    id: 'conf', name: 'Rendered config', method: 'file_content',
    params: { path: target, content: 'room={{node.properties.site.room}}\npassword={{node.properties.db_pw}}\n', mode: '0600' },
  })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['conf'], groups: ['mine'] })).status, 201);

  const r1 = await agent();
  t.equal(r1.code, 0, r1.stderr);
  t.equal(await readFile(target, 'utf8'), `room=R7\npassword=${SECRET}\n`, 'rendered from a node object\'s key, the secret opened on the node');
  const before = (await api('GET', `/api/1/nodes/${id}/policy`)).json.data as { config_id: string };
  const problem = (await api('GET', '/api/1/nodes/other/policy')).json.data.problem as { code: string; at: string };
  t.match(problem, { code: 'ERR_PROPERTY_CONFLICT', conflicts: [{ path: ['port'], groups: [{ id: 'a', value: 80 }, { id: 'b', value: 81 }] }] });
  const failed = async () => ((await api('GET', '/api/1/events?type=policy.failed&limit=100')).json.data as unknown[]).length;
  t.equal(await failed(), 1, 'the conflict is told once');

  // Restarted on the same data directory.
  t.equal(await first.server.stop(), 0);
  const second = await startServer(t, join(dir, 'server'), { logLevel: 'info' });
  t.equal(await startupChanged(second.server), 0, 'the start-up generation changes no bundle');
  t.equal((await second.api('GET', `/api/1/nodes/${id}/policy`)).json.data.config_id, before.config_id, 'the secret user keeps its config id');
  t.same((await second.api('GET', '/api/1/nodes/other/policy')).json.data.problem, problem, 'the problem is there after the restart, as it was');
  t.match((await second.api('GET', '/api/1/nodes/other/properties/effective')).json.data, { problem: { code: 'ERR_PROPERTY_CONFLICT', at: problem.at } });
  t.equal(((await second.api('GET', '/api/1/events?type=policy.failed&limit=100')).json.data as unknown[]).length, 1, 'and not told again');

  // Fixed: the problem goes, and stays gone after another restart.
  t.equal((await second.api('PUT', '/api/1/groups/b', { id: 'b', name: 'B', nodes: ['other'], priority: 1, properties: { port: { value: 81 } } })).status, 200);
  t.equal((await second.api('GET', '/api/1/nodes/other/policy')).json.data.problem, null, 'cleared once generated');
  t.equal(await second.server.stop(), 0);
  const third = await startServer(t, join(dir, 'server'), { logLevel: 'info' });
  t.equal(await startupChanged(third.server), 0, 'again nothing to change');
  t.equal((await third.api('GET', '/api/1/nodes/other/policy')).json.data.problem, null, 'a cleared problem stays cleared');
});
