/**
 * Techniques as code, with the `capstan` CLI against a real server on a loopback port:
 * `techniques/<id>.json` in a policy directory is planned (`policy diff` names the technique and
 * the directive using it), applied, listed and shown (`capstan techniques list|show`), exported
 * back as JSON whatever the format, and the export diffs empty; a new version in the files is
 * one technique and one directive to update.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { readPolicyDir, writePolicyDir } from '@capstan/server/admin-cli/policy-files';
import { serverWithApi } from '../helpers/admin-app.js';
import { capstan } from '../helpers/capstan.js';

const technique = (version: string) => ({
  name: 'Nginx server', version,
  parameters: [{ name: 'conf', type: 'string', required: true }, { name: 'sites', type: 'list', default: ['default'] }],
  calls: [
    { id: 'install', method: 'package_present', params: { name: 'nginx' } },
    { id: 'site', name: 'Site {{item}}', foreach: 'sites', method: 'file_line_present', params: { path: '/etc/nginx/sites', line: '{{item}}' } },
  ],
});
const directive = (version: string) => ({ name: 'Web', method: 'technique', technique: { id: 'nginx_server', version }, params: { conf: '/etc/nginx/nginx.conf' } });

t.test('techniques in a policy directory: diff, apply, list, show, export, diff again', async (t) => {
  // The server's own directory holds the policy files too: programDir is one per test.
  const { server, dir: base } = await serverWithApi(t);
  const env = { CAPSTAN_URL: server.url, CAPSTAN_TOKEN: server.adminToken };
  const cli = async (...args: string[]) => {
    const r = await capstan(args, env);
    t.equal(r.code, 0, `capstan ${args.join(' ')}: ${r.err}`);
    return r.out;
  };
  const dir = join(base, 'policy');
  for (const sub of ['techniques', 'directives']) await mkdir(join(dir, sub), { recursive: true });
  const write = async (version: string) => {
    await writeFile(join(dir, 'techniques', 'nginx_server.json'), JSON.stringify(technique(version), null, 2));
    await writeFile(join(dir, 'directives', 'web.json'), JSON.stringify(directive(version)));
  };
  await write('1.0');

  t.match(await cli('policy', 'diff', '-f', dir), /Objects:\n {2}\+ technique nginx_server\n {2}\+ directive web\n {2}2 to create/);
  t.match(await cli('policy', 'apply', '-f', dir), /applied: create technique nginx_server\napplied: create directive web\n/);
  t.match(await cli('policy', 'diff', '-f', dir), /^no changes: the server matches the files \(2 objects\)/);

  const listed = (await cli('techniques', 'list')).trimEnd().split('\n').map((l) => l.split(/ {2,}/));
  t.same(listed[0], ['ID', 'NAME', 'VERSION', 'PARAMETERS', 'CALLS', 'UPDATED_AT']);
  t.same(listed[1]?.slice(0, 5), ['nginx_server', 'Nginx server', '1.0', 'conf,sites', '2']);
  const shown = JSON.parse(await cli('--json', 'techniques', 'show', 'nginx_server'));
  t.match(shown.data, { id: 'nginx_server', version: '1.0', calls: [{ id: 'install' }, { id: 'site', foreach: 'sites' }] });
  const missing = await capstan(['techniques', 'show', 'nope'], env);
  t.not(missing.code, 0, 'an unknown technique is an error');
  t.match(missing.err, /ERR_NOT_FOUND|does not exist/);

  // The export: techniques as JSON even in the TOML default; its diff is empty.
  const exported = join(base, 'exported');
  await cli('policy', 'export', '-d', exported);
  t.same(await readdir(join(exported, 'techniques')), ['nginx_server.json']);
  t.same(await readdir(join(exported, 'directives')), ['web.toml']);
  t.same(JSON.parse(await readFile(join(exported, 'techniques', 'nginx_server.json'), 'utf8')), { id: 'nginx_server', ...technique('1.0') });
  t.match(await cli('policy', 'diff', '-f', exported, '--prune'), /^no changes/);

  // A new version in the files: the technique and the directive naming it are updated, in that order.
  await write('1.1');
  t.match(await cli('policy', 'diff', '-f', dir), /~ technique nginx_server \(version\)\n {2}~ directive web \(technique\)\n/);
  t.match(await cli('policy', 'apply', '-f', dir), /applied 2 changes/);
  t.match(await cli('policy', 'diff', '-f', dir), /^no changes/);
  // A bad technique file: the server's refusal names the file's field.
  await writeFile(join(dir, 'techniques', 'nginx_server.json'), JSON.stringify({ ...technique('1.1'), calls: [{ id: 'x', method: 'nope' }] }));
  const bad = await capstan(['policy', 'diff', '-f', dir], env);
  t.not(bad.code, 0);
  t.match(bad.err, /techniques\[0\]\.calls\[0\]\.method/);
});

t.test('policy files round trip techniques; a directory of techniques alone is a policy directory', async (t) => {
  const dir = t.testdir();
  const files = { directives: [], groups: [], rules: [], techniques: [{ id: 'nginx_server', ...technique('2.0') }], properties: [], nodes: [] };
  t.equal(await writePolicyDir(dir, files, 'toml', false), 1);
  t.same(await readPolicyDir(dir), files);
  await t.rejects(writePolicyDir(dir, files, 'json', false), { code: 'ERR_POLICY_FILE' }, 'files already there: --force needed');
  t.equal(await writePolicyDir(dir, files, 'json', true), 1);
  t.same(await readPolicyDir(dir), files);
});
