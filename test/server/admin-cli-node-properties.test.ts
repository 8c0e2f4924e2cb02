/**
 * A node's own properties through the API and `capstan`, against one real server on a loopback
 * port: plain and secret ones in the level form (`properties/own`), the plain form keeping the
 * secrets, and node files in policy as code — exported with secrets as `secret = true`, diffed
 * (which values change, the effective ones with their origin), applied once, refused in a change
 * request. The secret's value is in no answer, no output and no audit record.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { EXIT } from '@capstan/server/admin-cli/output';
import { serverWithApi } from '../helpers/admin-app.js';
import { capstan } from '../helpers/capstan.js';
import { inventory } from './store-suite.js';

const SECRET = 'node-pw-3c9a-never-shown';
const TOKEN = 'node-token-77d1-never-shown';

t.test('node properties, plain and secret, by the API, the CLI and policy files', async (t) => {
  const { server, api, dir } = await serverWithApi(t);
  const env = { CAPSTAN_URL: server.url, CAPSTAN_TOKEN: server.adminToken };
  const seen: string[] = [];
  const cli = async (...args: string[]) => {
    const r = await capstan(args, env);
    seen.push(r.out, r.err);
    return r;
  };
  const call = async (method: string, path: string, body?: unknown) => {
    const r = await api(method, path, body);
    seen.push(JSON.stringify(r.json ?? null));
    return r;
  };
  for (const id of ['web1', 'web2']) {
    await server.store.upsertFromInventory(inventory(id));
    t.equal((await call('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  }
  await call('PUT', '/api/1/properties/owner', { value: 'ops' });
  t.equal((await call('POST', '/api/1/groups', { id: 'web', name: 'Web', nodes: ['web1', 'web2'], priority: 1, properties: { site: { value: { room: 'R1' } } } })).status, 201);
  await call('POST', '/api/1/directives', { id: 'motd', name: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'owner {{node.properties.owner}} in {{node.properties.site.room}}\n' } });
  await call('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['motd'], groups: ['web'] });

  // The level form: a secret answered without its value; the plain form names it only.
  const own = await call('PUT', '/api/1/nodes/web1/properties/own', { properties: { owner: { value: 'alice' }, pw: { value: SECRET, secret: true } } });
  t.same([own.status, own.json.data], [200, { id: 'web1', properties: { owner: { value: 'alice' }, pw: { secret: true } } }]);
  t.same((await call('GET', '/api/1/nodes/web1/properties')).json, { data: { owner: 'alice' }, secrets: ['pw'] });
  t.same((await call('PUT', '/api/1/nodes/web1/properties', { owner: 'bob' })).json, { data: { owner: 'bob' }, secrets: ['pw'] }, 'a plain write keeps the secret');
  t.same((await call('GET', '/api/1/nodes/web1/properties/own')).json.data.properties, { owner: { value: 'bob' }, pw: { secret: true } });
  const bad = await call('PUT', '/api/1/nodes/web1/properties/own', { properties: { pw: { value: 7, secret: true } } });
  t.same([bad.status, bad.json.error.code, bad.json.error.field], [400, 'ERR_PROPERTIES_INVALID', 'properties.pw.value']);
  const none = await call('PUT', '/api/1/nodes/web2/properties/own', { properties: { pw: { secret: true } } });
  t.same([none.status, none.json.error.field], [400, 'properties.pw.value'], 'a placeholder with no secret to keep');
  t.equal((await call('PUT', '/api/1/nodes/ghost/properties/own', { properties: {} })).status, 404);
  t.match((await call('GET', '/api/1/nodes/web1/properties/effective')).json.data, { properties: { pw: { secret: true }, owner: 'bob' }, origins: [{}, { path: ['pw'], secret: true, origin: { level: 'node' } }, {}] });

  // The CLI: a secret set with --secret, shown as (secret), unset like the others.
  const set = await cli('nodes', 'properties', 'web2', '--set', `tok=${TOKEN}`, '--secret');
  t.equal(set.code, 0, set.err);
  t.match(set.out, /tok\s+\(secret\)/);
  t.equal((await cli('nodes', 'properties', 'web2', '--set', 'n=1', '--json-value', '--secret')).code, EXIT.USAGE, 'a secret is text');
  const eff = await cli('properties', 'node', 'web2');
  t.match(eff.out, /tok\s+\(secret\)\s+node/);
  t.equal((await cli('properties', 'node', 'web2', '--unset', 'tok')).code, 0);
  t.same((await call('GET', '/api/1/nodes/web2/properties')).json, { data: {}, secrets: [] });
  t.equal((await cli('properties', 'node', 'web2', '--set', `tok=${TOKEN}`, '--secret')).code, 0);

  // Export: a file per node with properties, secrets without value; its diff is empty.
  const exported = join(dir, 'exported');
  const ex = await cli('policy', 'export', '-d', exported);
  t.equal(ex.code, 0, ex.err);
  t.same((await readdir(join(exported, 'nodes'))).sort(), ['web1.toml', 'web2.toml']);
  t.equal(await readFile(join(exported, 'nodes', 'web1.toml'), 'utf8'), 'id = "web1"\n\n[properties.owner]\nvalue = "bob"\n\n[properties.pw]\nsecret = true\n\n');
  t.match((await cli('policy', 'diff', '-f', exported, '--prune')).out, /^no changes: the server matches the files \(\d+ objects\)\n$/);

  // A change: web1's owner, web2's secret replaced and a value that TOML cannot hold (null), by JSON.
  const policy = join(dir, 'policy');
  await mkdir(join(policy, 'nodes'), { recursive: true });
  await writeFile(join(policy, 'nodes', 'web1.toml'), '[properties.owner]\nvalue = "carol"\n\n[properties.pw]\nsecret = true\n');
  await writeFile(join(policy, 'nodes', 'web2.json'), JSON.stringify({ properties: { tok: { value: `${TOKEN}-2`, secret: true }, gone: { value: null } } }));
  const diff = await cli('policy', 'diff', '-f', policy, '--detailed-exitcode');
  t.equal(diff.code, EXIT.CHANGES, diff.err);
  t.match(diff.out, '  ~ node web1 (properties: owner)\n      ~ owner: "bob" -> "carol"\n  ~ node web2 (properties: gone, tok)\n      + gone = null\n      ~ tok: (secret) changed, value not shown\n');
  t.match(diff.out, 'web1 (web1.example.com): config ');
  t.match(diff.out, '    values: base/motd content\n    properties: owner\n      owner: "bob" (node) -> "carol" (node)\n');
  const plan = JSON.parse((await cli('--json', 'policy', 'diff', '-f', policy)).out).data;
  t.match(plan.changes, [{ kind: 'node', id: 'web1', properties: [{ name: 'owner', action: 'update', before: 'bob', after: 'carol' }] },
    { kind: 'node', id: 'web2', properties: [{ name: 'gone', action: 'create', after: null }, { name: 'tok', action: 'update', secret: true }] }]);
  t.equal((await cli('policy', 'apply', '-f', policy, '--propose', '--title', 'nodes')).code, EXIT.USAGE, 'a change request cannot carry node properties');
  const applied = await cli('policy', 'apply', '-f', policy);
  t.equal(applied.code, 0, applied.err);
  t.match(applied.out, /applied: update node web1\napplied: update node web2\napplied 2 changes/);
  t.match((await cli('policy', 'apply', '-f', policy)).out, /^no changes/);
  t.same((await call('GET', '/api/1/nodes/web2/properties')).json, { data: { gone: null }, secrets: ['tok'] });
  const level = await server.store.getNodeLevel('web2');
  t.equal(level!.secrets.tok, `${TOKEN}-2`, 'the file\'s new secret stored');
  // Exported again: a null is written as JSON (TOML has none), and reads back the same.
  await cli('policy', 'export', '-d', exported, '--force');
  t.same((await readdir(join(exported, 'nodes'))).sort(), ['web1.toml', 'web2.json']);
  t.match((await cli('policy', 'diff', '-f', exported, '--prune')).out, /^no changes/);

  // Refusals name the node file's field; an unknown node is refused before anything is applied.
  await writeFile(join(policy, 'nodes', 'web1.toml'), '[properties.pw]\nvalue = 3\nsecret = true\n');
  const refused = await cli('policy', 'diff', '-f', policy);
  t.equal(refused.code, EXIT.REFUSED);
  t.match(refused.err, /ERR_PROPERTIES_INVALID: .*\(field nodes\[0\]\.properties\.pw\.value\)/);
  await writeFile(join(policy, 'nodes', 'web1.toml'), '[properties.owner]\nvalue = "dave"\n');
  await writeFile(join(policy, 'nodes', 'ghost.toml'), '');
  const ghost = await cli('policy', 'apply', '-f', policy);
  t.match([ghost.code, ghost.err], [EXIT.REFUSED, /node ghost is unknown \(field nodes\[0\]\.id\)/]);
  t.equal((await server.store.getProperties('web1'))!.owner, 'carol', 'nothing applied');

  const audit = await call('GET', '/api/1/audit?per_page=200');
  t.equal(audit.json.data.filter((r: { action: string }) => r.action === 'node.properties.update').length, 7, 'each write audited');
  for (const [what, text] of [['answers and outputs', seen.join('\n')]] as const) {
    t.notOk(text.includes(SECRET) || text.includes(TOKEN), `no secret in the ${what}`);
  }
});
