/**
 * `capstan-server`'s admin verbs are aliases of `capstan`'s: for the same request against the
 * same registry they print the same table, CSV and JSON and exit with the same code (the error
 * line names its own program), and a change made through them on the server host is in the audit
 * log like one made through the API, with its actor.
 */
import { generateKeyPairSync } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { SERVER_HOST } from '@capstan/server/cli/host';
import { serverWithApi } from '../helpers/admin-app.js';
import { capstan } from '../helpers/capstan.js';
import { BIN, runProgram } from '../helpers/programs.js';
import { inventory } from '../server/store-suite.js';

t.test('each capstan-server alias prints what its capstan verb prints, in every format', async (t) => {
  const { dir, server, api } = await serverWithApi(t, { 'policy.regenerate_interval': '0' });
  const remote = (args: string[]) => capstan(args, { CAPSTAN_URL: server.url, CAPSTAN_TOKEN: server.adminToken });
  const local = (args: string[]) => capstan([...args, '--data-dir', dir], {}, false, SERVER_HOST);

  // A registry with something in every view: nodes pending, accepted and manual, an inventory,
  // properties, a rule reaching a node, a credential, a finished job.
  for (const id of ['web1', 'pend1']) {
    await server.store.upsertFromInventory(inventory(id, { inventory: { node_id: id, hostname: `${id}.lan`, packages: [{ name: 'openssl', version: '3.0.13' }] } }));
  }
  t.equal((await api('POST', '/api/1/nodes/web1/accept')).status, 200);
  t.equal((await api('POST', '/api/1/nodes', { host: '10.0.0.9', id: 'm1', name: 'db primary', tags: { env: 'prod' } })).status, 201);
  t.equal((await api('PUT', '/api/1/nodes/web1/properties', { owner: 'alice' })).status, 200);
  t.equal((await api('POST', '/api/1/directives', { id: 'motd', name: 'Motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi\n' } })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'web', nodes: ['web1'] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', directives: ['motd'], groups: ['web'] })).status, 201);
  const key = generateKeyPairSync('rsa', { modulusLength: 2048, privateKeyEncoding: { type: 'pkcs1', format: 'pem' }, publicKeyEncoding: { type: 'spki', format: 'pem' } }).privateKey;
  t.equal((await api('POST', '/api/1/credentials', { id: 'deploy', user: 'deploy', private_key: key, selectors: ['*'] })).status, 201);
  const job = (await api('POST', '/api/1/jobs', { name: 'refresh', type: 'inventory', nodes: ['web1'] })).json.data.id as string;
  t.equal((await api('POST', `/api/1/jobs/${job}/cancel`)).status, 200, 'a job that no longer moves');

  const reads = [
    ['nodes', 'list'], ['nodes', 'list', '--pending'], ['nodes', 'pending'], ['nodes', 'show', 'web1'], ['nodes', 'history', 'web1'],
    ['nodes', 'runs', 'web1'], ['nodes', 'inventory', 'web1'], ['nodes', 'inventory-history', 'web1'], ['nodes', 'properties', 'web1'],
    ['nodes', 'compliance', 'web1'], ['nodes', 'compliance'], ['nodes', 'policy', 'web1'], ['nodes', 'tags', 'm1'], ['nodes', 'groups', 'm1'],
    ['nodes', 'identity', 'web1'], ['lifecycle'], ['changes', 'list'], ['changes', 'histogram'], ['jobs', 'list'], ['jobs', 'show', job],
    ['credentials', 'list'], ['credentials', 'show', 'deploy'], ['keys', 'list'], ['keys', 'policy'],
  ];
  for (const args of reads) {
    for (const format of [[], ['--csv'], ['--json']]) {
      const request = [...args, ...format];
      const [viaApi, onHost] = [await remote(request), await local(request)];
      t.equal(viaApi.code, 0, `capstan ${request.join(' ')}: ${viaApi.err}`);
      t.same(onHost, viaApi, `capstan-server ${request.join(' ')}`);
    }
  }
  // Refusals: the same code, the same line but for the program's name.
  for (const args of [['nodes', 'show', 'ghost'], ['nodes', 'set-state', 'm1', 'sleeping'], ['credentials', 'show', 'nope'], ['jobs', 'show', 'nope']]) {
    const [viaApi, onHost] = [await remote(args), await local(args)];
    t.not(viaApi.code, 0, args.join(' '));
    t.same({ ...onHost, err: onHost.err.replace(/^capstan-server: /, 'capstan: ') }, viaApi, `capstan-server ${args.join(' ')}`);
  }
});

t.test('a change through capstan-server is in the audit log with its actor, beside a running server', async (t) => {
  const { dir, server, api } = await serverWithApi(t);
  await server.store.upsertFromInventory(inventory('p1'));
  const accepted = await runProgram(BIN.server, ['nodes', 'accept', 'p1', '--data-dir', dir]);
  t.equal(accepted.code, 0, accepted.stderr);
  t.equal((await api('GET', '/api/1/nodes/p1')).json.data.accepted, 'accepted', 'the running server sees it');
  const [record] = (await api('GET', '/api/1/audit?action=node.accept&target=p1')).json.data;
  t.match(record, {
    admin: 'admin', role: 'admin', actor_kind: 'admin', actor: 'admin', action: 'node.accept', target: 'p1',
    method: 'POST', path: '/api/1/nodes/p1/accept', address: 'local', status: 200, error: null,
    before: { accepted: 'pending' }, after: { accepted: 'accepted' },
  });
  const history = (await api('GET', '/api/1/nodes/p1/history')).json.data as Array<{ field: string; to: string; cause: string }>;
  t.match(history.find((h) => h.field === 'accepted' && h.to === 'accepted'), { cause: 'admin admin (command line)' });

  // A refusal is recorded too, and what used to bypass the log (credentials) is in it now.
  const refused = await capstan(['nodes', 'set-state', 'p1', 'sleeping', '--data-dir', dir], {}, false, SERVER_HOST);
  t.equal(refused.code, 4);
  t.match((await api('GET', '/api/1/audit?action=node.update&target=p1')).json.data, [{ status: 400, error: 'ERR_BAD_REQUEST', address: 'local' }]);
  await writeFile(join(dir, 'pw'), 'secret\n');
  const made = await capstan(['credentials', 'add', '--id', 'lab', '--user', 'root', '--password-file', join(dir, 'pw'), '-s', '*', '--data-dir', dir], {}, false, SERVER_HOST);
  t.equal(made.code, 0, made.err);
  t.match((await api('GET', '/api/1/audit?action=credential.create')).json.data, [{ target: 'lab', admin: 'admin', address: 'local', status: 201 }]);
  t.notMatch(JSON.stringify((await api('GET', '/api/1/audit?action=credential.create')).json), /secret/, 'no secret in the record');
});
