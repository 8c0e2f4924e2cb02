/**
 * Artifacts and key rotation with the real programs: the server holds the shared folder, a relay
 * without one fetches the archive from the server and caches it, the agent installs the bundle,
 * repairs drift, installs a new version; then the server's policy key is rotated and the agent
 * follows the endorsement chain and re-pins without an error.
 */
import { createHash } from 'node:crypto';
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { create as tarCreate } from 'tar';
import { adminClient, BIN, runProgram, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

/** `<shared>/bundles/web.tar.gz` in the convention, with the given files; returns its hashes. */
async function makeArchive(build: string, shared: string, files: Record<string, string>) {
  const web = join(build, 'web');
  await mkdir(web, { recursive: true });
  const sums = Object.entries(files).map(([p, d]) => `${sha(d)}  ${p}\n`).join('');
  for (const [p, d] of Object.entries(files)) await writeFile(join(web, p), d);
  await writeFile(join(web, 'SHA256SUMS'), sums);
  await mkdir(join(shared, 'bundles'), { recursive: true });
  const file = join(shared, 'bundles', 'web.tar.gz');
  await tarCreate({ gzip: true, cwd: build, file, portable: true }, ['web/SHA256SUMS', ...Object.keys(files).map((p) => `web/${p}`)]);
  return { sha256: sha(await readFile(file)), sums_sha256: sha(sums) };
}

t.test('an archive reaches the node through a caching relay; a key rotation is followed', async (t) => {
  const dir = programDir(t);
  const shared = join(dir, 'shared');
  await mkdir(shared);
  await writeFile(join(dir, 'server.toml'), `[policy]\nshared_folder = ${JSON.stringify(shared)}\n`);
  const { server } = await startServer(t, join(dir, 'server'), { config: join(dir, 'server.toml') });
  // No [shared_folder] path: the relay serves the server's folder from its cache.
  const relay = await startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  const token = (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim();
  const api = adminClient(server.url, token);
  const state = join(dir, 'agent');
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', state, '--log-level', 'error']);

  t.equal((await agent()).code, 5, 'waiting for acceptance');
  const id = (await readFile(join(state, 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.total === 1 ? true : undefined), 'the pending node');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);

  const target = join(dir, 'bundles');
  const v1 = await makeArchive(join(dir, 'build'), shared, { 'index.html': '<h1>v1</h1>\n', 'site.conf': 'listen 80;\n' });
  const directive = (h: { sha256: string; sums_sha256: string }) => ({
    id: 'web', name: 'Web bundle', method: 'archive_from_shared_folder', params: { source: 'bundles/web.tar.gz', ...h, target, purge: true },
  });
  const badParams = await api('POST', '/api/1/directives', { ...directive(v1), params: { ...directive(v1).params, sums_sha256: 'nope' } });
  t.equal(badParams.json.error.code, 'ERR_METHOD_PARAMS', 'the server checks the parameters');
  t.equal((await api('POST', '/api/1/directives', directive(v1))).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'all', name: 'All', nodes: [id] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'web', name: 'Web', directives: ['web'], groups: ['all'] })).status, 201);

  const r1 = await agent();
  t.equal(r1.code, 0, r1.stderr + r1.stdout);
  t.match(r1.stdout, /1 repaired, 0 errors/);
  t.equal(await readFile(join(target, 'web', 'index.html'), 'utf8'), '<h1>v1</h1>\n');
  const cached = await readdir(join(dir, 'relay', 'cache', 'shared-folder', 'objects'));
  t.same(cached, [v1.sha256], 'the relay keeps the archive by its sha256');

  t.match((await agent()).stdout, /0 repaired, 0 errors/, 'verified, nothing to do');
  await writeFile(join(target, 'web', 'site.conf'), 'listen 8080;\n');
  t.match((await agent()).stdout, /1 repaired, 0 errors/, 'drift repaired');
  t.equal(await readFile(join(target, 'web', 'site.conf'), 'utf8'), 'listen 80;\n');

  // A new version of the bundle: new hashes in the directive, the relay fetches the new content.
  const v2 = await makeArchive(join(dir, 'build'), shared, { 'index.html': '<h1>v2</h1>\n', 'site.conf': 'listen 80;\n' });
  t.equal((await api('PUT', '/api/1/directives/web', directive(v2))).status, 200);
  t.match((await agent()).stdout, /1 repaired, 0 errors/);
  t.equal(await readFile(join(target, 'web', 'index.html'), 'utf8'), '<h1>v2</h1>\n');

  // Key rotation: the agent pinned the first key; the bundle now comes with the endorsement.
  const pinnedBefore = await readFile(join(state, 'policy-key.pem'), 'utf8');
  const rot = await api('POST', '/api/1/keys/policy/rotate');
  t.equal(rot.status, 200);
  const afterRotation = await agent();
  t.equal(afterRotation.code, 0, afterRotation.stdout);
  t.match(afterRotation.stdout, /0 repaired, 0 errors/, 'no refusal: the chain was followed');
  const pinnedAfter = await readFile(join(state, 'policy-key.pem'), 'utf8');
  t.not(pinnedAfter, pinnedBefore, 're-pinned');
  t.equal(pinnedAfter, (await api('GET', '/api/1/keys/policy')).json.data.public_key, 'to the new key');
});
