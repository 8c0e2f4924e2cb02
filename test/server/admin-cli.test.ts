/**
 * The remote CLI `capstan` in process: output formats, error lines and exit codes, token
 * lookup, policy files, completion; and the verbs whose API is small enough to play here
 * (admins, whoami, audit, jobs watch) against a fake admin API on a loopback port, which records
 * each request so the test sees exactly what the CLI asked for.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { createServer as createHttpsServer } from 'node:https';
import { createServer as createNetServer, type Socket } from 'node:net';
import { execFileSync, spawnSync } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { ApiFailure } from '@capstan/server/admin-cli/client';
import { buildProgram, filterParams, resolveToken } from '@capstan/server/admin-cli/commands';
import { bashCompletion, zshCompletion } from '@capstan/server/admin-cli/completion';
import { errorLine, EXIT, exitCodeOf, progressBar, renderList, renderObject } from '@capstan/server/admin-cli/output';
import { readPolicyDir, writePolicyDir } from '@capstan/server/admin-cli/policy-files';
import { requiredInCi, programDir } from '../helpers/programs.js';
import { capstan, Exit } from '../helpers/capstan.js';
import { composeDomain } from '@capstan/server/domain';
import { capstanError } from '@capstan/shared';

interface Seen {
  method: string;
  url: string;
  auth: string | undefined;
  body: unknown;
}

/** A fake admin API: `routes` answers `METHOD path` (query string apart) with a status and JSON. */
async function fakeApi(t: Test, routes: Record<string, (seen: Seen) => [number, unknown]>): Promise<{ url: string; seen: Seen[] }> {
  const seen: Seen[] = [];
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    let text = '';
    req.on('data', (d: Buffer) => (text += d.toString()));
    req.on('end', () => {
      const s: Seen = { method: req.method!, url: req.url!, auth: req.headers.authorization, body: text ? JSON.parse(text) : undefined };
      seen.push(s);
      const route = routes[`${req.method} ${req.url!.split('?')[0]}`];
      const [status, body] = route ? route(s) : [404, { error: { code: 'ERR_NOT_FOUND', message: `no route for ${req.method} ${req.url}` } }];
      res.writeHead(status, body === undefined ? {} : { 'content-type': 'application/json' });
      res.end(body === undefined ? undefined : JSON.stringify(body));
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const addr = server.address() as { port: number };
  return { url: `http://127.0.0.1:${addr.port}`, seen };
}

t.test('failures map to documented exit codes and one coded line', async (t) => {
  t.equal(exitCodeOf(new ApiFailure('ERR_UNREACHABLE', 'x', 0)), EXIT.UNREACHABLE);
  t.equal(exitCodeOf(new ApiFailure('ERR_UNAUTHORIZED', 'x', 401)), EXIT.UNAUTHORIZED);
  t.equal(exitCodeOf(new ApiFailure('ERR_FORBIDDEN', 'x', 403)), EXIT.UNAUTHORIZED);
  t.equal(exitCodeOf(new ApiFailure('ERR_NODE_UNKNOWN', 'x', 404)), EXIT.NOT_FOUND);
  t.equal(exitCodeOf(new ApiFailure('ERR_CONFLICT', 'x', 409)), EXIT.REFUSED);
  t.equal(exitCodeOf(new ApiFailure('ERR_INTERNAL', 'x', 500)), EXIT.ERROR);
  t.equal(exitCodeOf(new Error('boom')), EXIT.ERROR);
  t.equal(errorLine(new ApiFailure('ERR_METHOD_PARAMS', 'path must be absolute', 400, { field: 'params.path' })),
    'capstan: ERR_METHOD_PARAMS: path must be absolute (field params.path)\n');
  t.same([EXIT.OK, EXIT.ERROR, EXIT.USAGE, EXIT.UNREACHABLE, EXIT.REFUSED, EXIT.UNAUTHORIZED, EXIT.NOT_FOUND, EXIT.CHANGES], [0, 1, 2, 3, 4, 5, 6, 7]);
  // capstan-server's aliases: a server configuration that does not load is the caller's to fix.
  t.equal(exitCodeOf(capstanError('ERR_CONFIG', 'general.listen must be host:port')), EXIT.USAGE);
  t.equal(exitCodeOf(capstanError('ERR_CONFIG_SYNTAX', 'line 3')), EXIT.USAGE);
  t.equal(errorLine(new ApiFailure('ERR_NODE_UNKNOWN', 'node x is unknown', 404), 'capstan-server'), 'capstan-server: ERR_NODE_UNKNOWN: node x is unknown\n');
});

t.test('tables, CSV and JSON of one list', async (t) => {
  const rows = [{ id: 'a', v: '=cmd()' }, { id: 'b,c', v: null }];
  const cols: Array<[string, (r: any) => unknown]> = [['id', (r) => r.id], ['value', (r) => r.v]];
  t.equal(renderList('table', cols, rows), 'ID   VALUE\na    =cmd()\nb,c  -\n');
  t.equal(renderList('csv', cols, rows), 'id,value\r\na,"\'=cmd()"\r\n"b,c",\r\n', 'RFC 4180, a formula made text');
  t.same(JSON.parse(renderList('json', cols, rows, { data: rows, total: 9 })), { data: rows, total: 9 }, 'JSON is the API\'s answer');
  t.equal(renderObject('table', { id: 'n1', tags: { a: '1' } }), 'id    n1\ntags  {"a":"1"}\n');
  t.equal(progressBar({ total: 4, pending: 1, scheduled: 0, in_progress: 0, done: 2, failed: 1, aborted: 0 }, 8), '[######..] 3/4 pending 1 done 2 failed 1');
  t.same(filterParams(['name=web*', 'name=db*', 'tag:env=prod'], ['region=us-*']).map((f) => JSON.parse(f)), [
    { key: 'name', values: ['web*', 'db*'] }, { key: 'tag:env', values: ['prod'] }, { key: 'region', values: ['us-*'], exclude: true },
  ]);
});

t.test('the token: --token-file, then CAPSTAN_TOKEN, then ~/.config/capstan/token', async (t) => {
  const dir = programDir(t, { 'tok': 'from-file\n', home: { '.config': { capstan: { token: 'from-home\n' } } } });
  t.equal(await resolveToken({ tokenFile: join(dir, 'tok') }, { CAPSTAN_TOKEN: 'env' }), 'from-file');
  t.equal(await resolveToken({}, { CAPSTAN_TOKEN: 'env', HOME: join(dir, 'home') }), 'env');
  t.equal(await resolveToken({}, { HOME: join(dir, 'home') }), 'from-home');
  const missing = await capstan(['--token-file', join(dir, 'absent'), 'whoami']);
  t.equal(missing.code, EXIT.USAGE, 'an unreadable token file is a usage error');
  t.match(missing.err, /^capstan: ERR_CLI_FILE: cannot read the token file/);
});

t.test('admins, whoami and audit against the API shape, with coded refusals', async (t) => {
  const admin = { name: 'alice', role: 'operator', created_at: '2026-11-25T10:00:00Z', expires_at: null };
  const api = await fakeApi(t, {
    'POST /api/1/admins': (s) => [201, { data: { ...admin, ...(s.body as object), token: 'secret-token' } }],
    'GET /api/1/admins': () => [200, { data: [admin], total: 1, page: 1, per_page: 100 }],
    'DELETE /api/1/admins/alice': () => [204, undefined],
    'DELETE /api/1/admins/bob': () => [403, { error: { code: 'ERR_FORBIDDEN', message: 'role viewer may not delete admins' } }],
    'POST /api/1/admins/alice/token': () => [201, { data: { ...admin, token: 'new-token' } }],
    'GET /api/1/whoami': () => [200, { data: { name: 'root', role: 'admin', expires_at: null } }],
    'GET /api/1/audit': () => [200, {
      data: [{ id: 1, at: '2026-11-25T10:00:00Z', admin: 'alice', role: 'operator', action: 'node.accept', method: 'POST', path: '/api/1/nodes/n1/accept', target: 'n1', address: '127.0.0.1', status: 200, error: null }],
      total: 1, page: 1, per_page: 100,
    }],
  });
  const env = { CAPSTAN_URL: api.url, CAPSTAN_TOKEN: 'tok' };

  const created = await capstan(['admins', 'create', 'alice', '--role', 'operator', '--expires', '90d'], env);
  t.equal(created.code, 0, created.err);
  t.match(created.out, /token\s+secret-token/);
  t.same(api.seen.at(-1), { method: 'POST', url: '/api/1/admins', auth: 'Bearer tok', body: { name: 'alice', role: 'operator', expires: '90d' } });
  t.equal((await capstan(['admins', 'create', 'x', '--role', 'root'], env)).code, EXIT.USAGE, 'an unknown role is refused before any call');

  t.equal((await capstan(['admins', 'list'], env)).out, 'NAME   ROLE      CREATED_AT            EXPIRES_AT\nalice  operator  2026-11-25T10:00:00Z  -\n');
  t.match((await capstan(['--json', 'whoami'], env)).out, /"role": "admin"/);
  t.same(await capstan(['admins', 'delete', 'alice'], env), { code: 0, out: 'deleted admin alice\n', err: '' });
  t.same(await capstan(['admins', 'delete', 'bob'], env), { code: EXIT.UNAUTHORIZED, out: '', err: 'capstan: ERR_FORBIDDEN: role viewer may not delete admins\n' });
  t.match((await capstan(['admins', 'token', 'alice'], env)).out, /new-token/);

  const audit = await capstan(['audit', '--admin', 'alice', '--result', 'ok', '--from', '2026-11-25T00:00:00Z', '--csv'], env);
  t.equal(audit.code, 0, audit.err);
  t.equal(audit.out, 'at,admin,role,action,target,status,error,address\r\n2026-11-25T10:00:00Z,alice,operator,node.accept,n1,200,,127.0.0.1\r\n');
  const q = new URL(api.seen.at(-1)!.url, api.url).searchParams;
  t.same(Object.fromEntries(q), { from: '2026-11-25T00:00:00Z', admin: 'alice', result: 'ok', page: '1', per_page: '100' });
});

t.test('jobs watch: plain lines off a terminal, a live bar on one, exit 7 on failed tasks', async (t) => {
  let polls = 0;
  const progress = (done: number, failed: number) => ({ total: 2, pending: 2 - done - failed, scheduled: 0, in_progress: 0, done, failed, aborted: 0 });
  const api = await fakeApi(t, {
    'GET /api/1/jobs/j1': () => {
      polls++;
      const p = polls === 1 ? progress(0, 0) : polls === 2 ? progress(1, 0) : progress(1, 1);
      return [200, { data: { id: 'j1', state: polls >= 3 ? 'finished' : 'running', progress: p, tasks: [] } }];
    },
  });
  const env = { CAPSTAN_URL: api.url, CAPSTAN_TOKEN: 'tok' };
  const plain = await capstan(['jobs', 'watch', 'j1'], env);
  t.equal(plain.code, EXIT.CHANGES, 'a failed task');
  t.same(plain.out.split('\n'), [
    'j1 running [..............................] 0/2 pending 2',
    'j1 running [###############...............] 1/2 pending 1 done 1',
    'j1 finished [##############################] 2/2 done 1 failed 1',
    '',
  ]);
  polls = 0;
  const tty = await capstan(['jobs', 'watch', 'j1'], env, true);
  t.equal(tty.out.split('\r\u001b[2K').length, 4, 'the bar is redrawn in place');
  t.ok(tty.out.endsWith('failed 1\n'));
});

t.test('unreachable, refused, unknown and usage errors', async (t) => {
  const api = await fakeApi(t, {
    'GET /api/1/nodes/n1': () => [500, { error: { code: 'ERR_INTERNAL', message: 'database down' } }],
    'PATCH /api/1/nodes/n2': () => [400, { error: { code: 'ERR_BAD_REQUEST', message: 'state must be one of running, …' } }],
  });
  const env = { CAPSTAN_URL: api.url, CAPSTAN_TOKEN: 'tok' };
  t.same(await capstan(['nodes', 'show', 'n1'], env), { code: EXIT.ERROR, out: '', err: 'capstan: ERR_INTERNAL: database down\n' });
  t.equal((await capstan(['nodes', 'set-state', 'n2', 'sleeping'], env)).code, EXIT.REFUSED);
  const unknown = await capstan(['nodes', 'show', 'n3'], env);
  t.equal(unknown.code, EXIT.NOT_FOUND);
  t.match(unknown.err, /^capstan: ERR_NOT_FOUND: /);
  const closed = await capstan(['--url', 'http://127.0.0.1:1', 'nodes', 'list'], { CAPSTAN_TOKEN: 'tok' });
  t.equal(closed.code, EXIT.UNREACHABLE);
  t.match(closed.err, /^capstan: ERR_UNREACHABLE: cannot reach http:\/\/127\.0\.0\.1:1/);
  t.equal((await capstan(['nodes', 'frobnicate'], env)).code, EXIT.USAGE);
  t.equal((await capstan(['--json', '--csv', 'nodes', 'list'], env)).code, EXIT.USAGE, '--json and --csv conflict');
  t.equal((await capstan(['--help'], env)).code, 0);
});

t.test('a server that never answers, or cuts its answer off, is unreachable within --timeout', async (t) => {
  // Accepts every connection; answers nothing until `cutOff`, then headers and half a body.
  let cutOff = false;
  const sockets = new Set<Socket>();
  const silent = createNetServer((s) => {
    sockets.add(s);
    s.once('data', () => {
      if (cutOff) s.end('HTTP/1.1 200 OK\r\ncontent-type: application/json\r\ncontent-length: 100\r\n\r\n{"half"');
    });
  });
  await new Promise<void>((r) => silent.listen(0, '127.0.0.1', r));
  t.teardown(() => { for (const s of sockets) s.destroy(); silent.close(); });
  const url = `http://127.0.0.1:${(silent.address() as { port: number }).port}`;
  const hung = await capstan(['--url', url, '--timeout', '1', 'nodes', 'list'], { CAPSTAN_TOKEN: 'tok' });
  t.equal(hung.code, EXIT.UNREACHABLE, 'no answer in time');
  t.match(hung.err, /^capstan: ERR_UNREACHABLE: cannot reach .*ETIMEDOUT/);
  cutOff = true;
  const cut = await capstan(['--url', url, '--timeout', '5', 'nodes', 'list'], { CAPSTAN_TOKEN: 'tok' });
  t.equal(cut.code, EXIT.UNREACHABLE, 'an answer cut off is no answer');
  t.match(cut.err, /^capstan: ERR_UNREACHABLE: the answer from .* was cut off/);
});

t.test('policy files: read what export writes, refuse what is not policy', async (t) => {
  const dir = programDir(t);
  const files = {
    directives: [{ id: 'motd', name: 'Motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi\n' }, mode: 'enforce', updated_at: 'x' }],
    groups: [{ id: 'web', name: 'Web', filter: [{ key: 'name', values: ['web*'] }] }],
    rules: [{ id: 'base', name: 'Base', directives: ['motd'], groups: ['web'] }],
    techniques: [],
  };
  for (const format of ['toml', 'json'] as const) {
    const out = join(dir, format);
    t.equal(await writePolicyDir(out, files, format, false), 3);
    const back = await readPolicyDir(out);
    t.same(back.directives, [{ id: 'motd', name: 'Motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi\n' }, mode: 'enforce' }], `${format}: updated_at left out`);
    t.same(back.groups, files.groups);
    await t.rejects(writePolicyDir(out, files, format, false), { code: 'ERR_POLICY_FILE' }, 'no export over an older one without --force');
    t.equal(await writePolicyDir(out, { directives: [], groups: [], rules: files.rules, techniques: [] }, format, true), 1);
    t.same((await readPolicyDir(out)).directives, [], '--force removed the old files');
  }
  const bad = join(dir, 'bad');
  await mkdir(join(bad, 'rules'), { recursive: true });
  await writeFile(join(bad, 'rules', 'r1.toml'), 'id = "r2"\n');
  await t.rejects(readPolicyDir(bad), { code: 'ERR_POLICY_FILE', message: /differs from the file name/ });
  await writeFile(join(bad, 'rules', 'r1.toml'), 'directives = [\n');
  await t.rejects(readPolicyDir(bad), { code: 'ERR_POLICY_FILE', message: /r1\.toml/ });
  await t.rejects(readPolicyDir(join(dir, 'absent')), { code: 'ERR_POLICY_FILE' });
  const cli = await capstan(['policy', 'diff', '-f', bad], { CAPSTAN_URL: 'http://127.0.0.1:1' });
  t.equal(cli.code, EXIT.USAGE, 'a bad file is the caller\'s to fix, before any call');
});

t.test('completion scripts name every verb; bash completes them', async (t) => {
  const program = buildProgram({ out() {}, err() {}, env: {}, isTTY: false, exit: () => { throw new Exit(0); }, sleep: async () => undefined });
  const bash = bashCompletion(program);
  const zsh = zshCompletion(program);
  for (const verb of ['nodes', 'software', 'lifecycle', 'compliance', 'changes', 'rules', 'directives', 'groups', 'techniques', 'jobs', 'credentials', 'managers', 'keys', 'admins', 'audit', 'policy', 'completion']) {
    t.match(bash, new RegExp(`\\b${verb}\\b`));
    t.match(zsh, new RegExp(`\\b${verb}\\b`));
  }
  t.match(zsh, /^#compdef capstan/);
  const dir = programDir(t, { 'c.bash': bash });
  const complete = (words: string[]) => spawnSync('bash', ['-c', `source ${join(dir, 'c.bash')}; COMP_WORDS=(${words.map((w) => `'${w}'`).join(' ')}); COMP_CWORD=${words.length - 1}; _capstan; echo "\${COMPREPLY[*]}"`], { encoding: 'utf8' }).stdout.trim();
  t.equal(complete(['capstan', 'po']), 'policy');
  t.equal(complete(['capstan', 'policy', 'd']), 'diff');
  t.match(complete(['capstan', '--json', 'nodes', 'set']), 'set-state');
  t.match(complete(['capstan', 'policy', 'apply', '--p']), '--prune');
  t.equal((await capstan(['completion', 'fish'])).code, EXIT.USAGE);

  // zsh: the script's own word lookup, with compadd printing what it was offered.
  const noZsh = requiredInCi(spawnSync('zsh', ['-c', 'true']).status === 0 ? false : 'zsh is not installed');
  if (noZsh) return void t.comment(`skipping the zsh run: ${noZsh}`);
  await writeFile(join(dir, '_capstan'), zsh);
  const zcomplete = (words: string[]) => spawnSync('zsh', ['-c', `compdef() {}; compadd() { shift; print -r -- "$@" }; source ${join(dir, '_capstan')}; words=(${words.map((w) => `'${w}'`).join(' ')}); CURRENT=${words.length}; _capstan`], { encoding: 'utf8' }).stdout.trim().split(' ');
  t.ok(zcomplete(['capstan', 'policy', 'd']).includes('diff'));
  t.notOk(zcomplete(['capstan', 'policy', 'd']).includes('nodes'), 'the verbs of the command at the cursor only');
  t.ok(zcomplete(['capstan', '--json', 'nodes', 'set']).includes('set-state'));
});

t.test('a bad key=value is a usage error; an answer that is not the API\'s is said so', async (t) => {
  const api = await fakeApi(t, { 'GET /api/1/nodes': () => [502, { message: 'bad gateway' }] });
  const env = { CAPSTAN_URL: api.url, CAPSTAN_TOKEN: 'tok' };
  const bad = await capstan(['nodes', 'list', '--filter', 'novalue'], env);
  t.equal(bad.code, EXIT.USAGE);
  t.match(bad.err, /expected key=value/);
  const proxy = await capstan(['nodes', 'list'], env);
  t.equal(proxy.code, EXIT.ERROR);
  t.match(proxy.err, /^capstan: ERR_BAD_ANSWER: /);
});

t.test('--ca-file: a server certified by a private CA is trusted with it, refused without it', async (t) => {
  const dir = programDir(t);
  const ssl = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  ssl('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=Capstan test CA');
  ssl('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', '/CN=server');
  await writeFile(join(dir, 'ext.cnf'), 'subjectAltName=IP:127.0.0.1\n');
  ssl('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'ext.cnf');
  const server = createHttpsServer({ cert: await readFile(join(dir, 'server.pem')), key: await readFile(join(dir, 'server.key')) }, (_req, res) => {
    res.writeHead(200, { 'content-type': 'application/json' });
    res.end(JSON.stringify({ data: { name: 'root', role: 'admin', expires_at: null } }));
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const url = `https://127.0.0.1:${(server.address() as { port: number }).port}`;
  const refused = await capstan(['--url', url, 'whoami'], { CAPSTAN_TOKEN: 'tok' });
  t.equal(refused.code, EXIT.UNREACHABLE, 'an unknown CA is a TLS failure');
  t.match(refused.err, /^capstan: ERR_UNREACHABLE: .*(certificate|CERT)/);
  const trusted = await capstan(['--url', url, '--ca-file', join(dir, 'ca.pem'), 'whoami'], { CAPSTAN_TOKEN: 'tok' });
  t.equal(trusted.code, 0, trusted.err);
  t.match(trusted.out, /role\s+admin/);
  t.equal((await capstan(['--url', url, '--ca-file', join(dir, 'absent.pem'), 'whoami'], { CAPSTAN_TOKEN: 'tok' })).code, EXIT.USAGE);
});

t.test('admins, whoami and audit against the real server: roles, a refusal, the record', async (t) => {
  const { loadServerConfig } = await import('@capstan/server/config');
  const { openRegistry } = await import('@capstan/server/registry/open');
  const { buildApp } = await import('@capstan/server/api/app');
  const { silentLogger } = await import('@capstan/shared');
  const { Spool } = await import('@capstan/toolkit');
  const dir = programDir(t);
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  const spool = new Spool({ root: join(dir, 'spool'), maxFileBytes: 1 << 20 });
  await spool.init();
  const ADMIN = 'admin-token-'.padEnd(40, 'a');
  const app = buildApp({ config: loadServerConfig({ overrides: { 'general.data_dir': dir } }), store, domain: composeDomain({ store, log: silentLogger }), spool, log: silentLogger, adminToken: ADMIN, status: async () => ({}) });
  await app.listen({ host: '127.0.0.1', port: 0 });
  t.teardown(async () => {
    await app.close();
    await store.close();
  });
  const url = `http://127.0.0.1:${(app.server.address() as { port: number }).port}`;
  const asAdmin = { CAPSTAN_URL: url, CAPSTAN_TOKEN: ADMIN };

  const made = await capstan(['--json', 'admins', 'create', 'olga', '--role', 'operator', '--expires', '30d'], asAdmin);
  t.equal(made.code, 0, made.err);
  const token = (JSON.parse(made.out) as { data: { token: string } }).data.token;
  const asOlga = { CAPSTAN_URL: url, CAPSTAN_TOKEN: token };
  t.match((await capstan(['--json', 'whoami'], asOlga)).out, /"name": "olga"[\s\S]*"role": "operator"/);
  const refused = await capstan(['admins', 'create', 'mallory', '--role', 'admin'], asOlga);
  t.equal(refused.code, EXIT.UNAUTHORIZED, 'an operator may not make admins');
  t.match(refused.err, /^capstan: ERR_FORBIDDEN: /);
  const audit = await capstan(['audit', '--admin', 'olga', '--csv'], asAdmin);
  t.equal(audit.code, 0, audit.err);
  t.match(audit.out, /^at,admin,role,action,target,status,error,address\r\n.*,olga,operator,admin\.create,,403,ERR_FORBIDDEN,127\.0\.0\.1\r\n$/, 'the refusal, recorded');
  t.equal((await capstan(['admins', 'delete', 'olga'], asAdmin)).code, 0);
  t.equal((await capstan(['whoami'], asOlga)).code, EXIT.UNAUTHORIZED, 'a revoked token is refused');
});
