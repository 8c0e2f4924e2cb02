/**
 * Node data end to end, with the real programs: an admin sets a global secret property and a
 * group property over HTTP, and a directive whose template reads the group property, a fact of
 * the node's inventory and the secret. The node's next run through a relay writes the rendered
 * file with the secret's value in place, while the bundle the relay holds and serves carries the
 * secret only sealed. A conflict between two groups then keeps the node's policy as it was, with
 * the problem shown on the node.
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BIN, runProgram, startProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';

const SECRET = 'pw-9f2c7e1d-not-for-relays';

/** Every file under `dir`, read whole. */
async function allFiles(dir: string): Promise<Array<[string, Buffer]>> {
  const out: Array<[string, Buffer]> = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push([join(e.parentPath, e.name), await readFile(join(e.parentPath, e.name))]);
  }
  return out;
}

t.test('a directive rendered with a group property, a fact and a sealed secret reaches the node through a relay', async (t) => {
  const dir = programDir(t, { 'relay-caching.toml': '[policies]\nmax_age = "1h"\n' });
  const { server, api } = await serverAndRelay(t, dir);
  // A relay that keeps the bundles it serves: what it holds is read below.
  const relay = await startProgram(BIN.relayd, ['--config', join(dir, 'relay-caching.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'caching'), '--upstream', server.url, '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  const target = join(dir, 'rendered.conf');
  const agent = (extra: string[] = []) => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error', ...extra]);

  t.equal((await agent()).code, 5, 'waits for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.total === 1 ? true : undefined), 'the pending node');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  const hostname = (await api('GET', `/api/1/nodes/${id}/inventory`)).json.data.inventory.hostname as string;
  t.ok(hostname, 'the inventory has the node\'s host name');

  t.equal((await api('PUT', '/api/1/properties/db_pw', { value: SECRET, secret: true })).status, 201);
  t.same((await api('GET', '/api/1/properties/db_pw')).json.data, { id: 'db_pw', secret: true, updated_at: (await api('GET', '/api/1/properties/db_pw')).json.data.updated_at }, 'the value is never returned');
  t.equal((await api('POST', '/api/1/groups', { id: 'dc1', name: 'DC 1', nodes: [id], properties: { dns: { value: '10.1.2.3' } } })).status, 201);
  t.equal((await api('POST', '/api/1/directives', {
    id: 'conf', name: 'Rendered config', method: 'file_content',
    params: { path: target, content: 'dns={{node.properties.dns}}\nhost={{hostname}}\npassword={{node.properties.db_pw}}\n', mode: '0600' },
  })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['conf'], groups: ['dc1'] })).status, 201);

  const r1 = await agent();
  t.equal(r1.code, 0, r1.stderr);
  t.match(r1.stdout, /1 repaired, 0 errors/);
  t.equal(await readFile(target, 'utf8'), `dns=10.1.2.3\nhost=${hostname}\npassword=${SECRET}\n`, 'rendered on the server, the secret opened on the node');
  t.notOk(r1.stdout.includes(SECRET) || r1.stderr.includes(SECRET), 'not in the agent\'s output');

  // What the relay holds and serves: the bundle, with the secret sealed only.
  const cached = JSON.parse(await readFile(join(dir, 'caching', 'cache', 'policies', `${id}.json`), 'utf8')) as { body: string };
  const signed = JSON.parse(cached.body) as { policy: string };
  const bundle = JSON.parse(Buffer.from(signed.policy, 'base64').toString('utf8')) as { properties: Record<string, unknown>; secrets: Record<string, { alg: string }>; directives: Array<{ params: { content: string } }> };
  t.match(bundle.secrets.db_pw, { v: 1, alg: 'RSA-OAEP-256+A256GCM' });
  t.same(bundle.properties, { dns: '10.1.2.3' }, 'the secret is not among the bundle properties');
  t.equal(bundle.directives[0]!.params.content, `dns=10.1.2.3\nhost=${hostname}\npassword=\uFFF9secret:db_pw\uFFFB\n`);
  const leaked = (await allFiles(join(dir, 'caching'))).filter(([, b]) => b.includes(SECRET));
  t.same(leaked.map(([p]) => p), [], 'no file of the relay holds the plaintext');
  t.ok(!Buffer.from(signed.policy, 'base64').includes(SECRET));

  // The run log the node sent back holds no plaintext either (the agent redacts it).
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}/runs`)).json.total >= 1 ? true : undefined), 'the run in the registry');

  // Two groups of equal priority disagree: the node keeps its policy, the problem is on the node.
  const config = /config (\S+):/.exec(r1.stdout)![1]!;
  t.equal((await api('POST', '/api/1/groups', { id: 'dc2', name: 'DC 2', nodes: [id], properties: { dns: { value: '10.9.9.9' } } })).status, 201);
  const eff = (await api('GET', `/api/1/nodes/${id}/properties/effective`)).json.data;
  t.match(eff, { conflicts: [{ path: ['dns'], groups: [{ id: 'dc1', value: '10.1.2.3' }, { id: 'dc2', value: '10.9.9.9' }] }], problem: { code: 'ERR_PROPERTY_CONFLICT' } });
  t.match((await api('GET', `/api/1/nodes/${id}/policy`)).json.data, { config_id: config, problem: { code: 'ERR_PROPERTY_CONFLICT' } });
  const r2 = await agent();
  t.match(r2.stdout, new RegExp(`config ${config}:`), 'the previous policy stays');
  t.match(r2.stdout, /0 repaired, 0 errors/);
});
