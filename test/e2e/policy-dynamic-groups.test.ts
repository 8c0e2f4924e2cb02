/**
 * Dynamic groups follow inventories, with the real server: a node's signed inventory arrives
 * over HTTP, the server's ingest stores it, and the node's policy follows the group filter it now
 * matches or no longer matches — no admin action, no restart. (The generator's own tests call it
 * directly; this one goes through the ingest that has to trigger it.)
 */
import { randomUUID } from 'node:crypto';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { compressSync, createNodeIdentity, inventoryFileName, signSmime } from '@capstan/shared';
import { adminClient, BIN, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';

t.test('a node moves in and out of a dynamic group as its inventories change', async (t) => {
  const dir = programDir(t);
  // Policies fetched here without a node token: this test is about membership, not identity.
  await writeFile(join(dir, 'server.toml'), '[identity]\nrequire_token = false\n');
  const { server, api } = await startServer(t, join(dir, 'server'), { config: join(dir, 'server.toml') });

  const nodeId = randomUUID();
  const identity = createNodeIdentity(nodeId);
  let second = 0;
  const sendInventory = async (hostname: string) => {
    const doc = {
      node_id: nodeId, hostname, certificate: identity.certPem, agent_version: '0.1.0', policy_server: 'server',
      os: { name: 'debian', version: '12', kernel: '6.1', arch: 'x86_64' },
    };
    const name = inventoryFileName(nodeId, new Date(Date.UTC(2026, 0, 1, 0, 0, ++second)), 'zstd');
    const res = await fetch(`${server.url}/inventories/${name}`, { method: 'PUT', body: compressSync(signSmime(Buffer.from(JSON.stringify(doc)), identity), 'zstd') });
    t.ok(res.status >= 200 && res.status < 300, `inventory as ${hostname} accepted (${res.status})`);
    await res.body?.cancel();
  };
  const directives = async (): Promise<string[] | null> => {
    const res = await fetch(`${server.url}/policies/${nodeId}/rules`);
    if (res.status !== 200) {
      await res.body?.cancel();
      return null;
    }
    const signed = (await res.json()) as { policy: string };
    return (JSON.parse(Buffer.from(signed.policy, 'base64').toString('utf8')) as { directives: Array<{ id: string }> }).directives.map((d) => d.id);
  };
  const hostname = async () => (await api('GET', `/api/1/nodes/${nodeId}`)).json?.data?.hostname as string | undefined;

  await sendInventory('web-1.example.com');
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${nodeId}`)).status === 200 ? true : undefined), 'the node to register');
  t.equal((await api('POST', `/api/1/nodes/${nodeId}/accept`)).status, 200);
  t.equal((await api('POST', '/api/1/directives', { id: 'web-conf', method: 'file_content', params: { path: '/etc/web.conf', content: 'x\n' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'web', filter: [{ key: 'hostname', values: ['web-*'] }] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'web', directives: ['web-conf'], groups: ['web'] })).status, 201);
  t.same(await directives(), ['web-conf'], 'in the group by its hostname');

  // A later inventory with another hostname: out of the group, an empty policy (not the old one).
  await sendInventory('db-1.example.com');
  await waitFor(async () => ((await hostname()) === 'db-1.example.com' ? true : undefined), 'the new inventory to be stored');
  t.same(await waitFor(async () => {
    const d = await directives();
    return d && d.length === 0 ? d : undefined;
  }, 'the node to leave the group'), []);

  // And back in.
  await sendInventory('web-2.example.com');
  t.same(await waitFor(async () => {
    const d = await directives();
    return d && d.length === 1 ? d : undefined;
  }, 'the node to join the group again'), ['web-conf']);
});
