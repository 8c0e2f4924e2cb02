/**
 * A node's own secret property end to end, with the real programs: set from a policy directory's
 * `nodes/<id>.toml` by `capstan policy apply`, it reaches that node sealed to its key, the agent
 * opens it into a templated file, and its value is nowhere else: not in any answer of the API
 * read here, not in the CLI's output, not in the server's or the agent's log, not in the agent's
 * state (its cached bundle, its run logs). Exported back, the file holds `secret = true` alone,
 * and applying that export keeps the value.
 */
import { mkdir, readdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import t from 'tap';
import { BIN, ROOT, runProgram, programDir, startServer, waitFor } from '../helpers/programs.js';

const CAPSTAN = resolve(ROOT, 'server/dist/admin-cli/cli.js');
const SECRET = 'nodepw-0c4e9a2b-only-for-this-node';

/** Every file under `dir`, read whole. */
async function allFiles(dir: string): Promise<Array<[string, Buffer]>> {
  const out: Array<[string, Buffer]> = [];
  for (const e of await readdir(dir, { withFileTypes: true, recursive: true })) {
    if (e.isFile()) out.push([join(e.parentPath, e.name), await readFile(join(e.parentPath, e.name))]);
  }
  return out;
}

t.test('a node secret from a policy file is sealed to its node, used in a templated file, and shown nowhere', async (t) => {
  const dir = programDir(t);
  // Debug: every line the server logs is read below.
  const { server, api } = await startServer(t, join(dir, 'server'), { logLevel: 'debug' });
  const env = { PATH: process.env.PATH ?? '', HOME: '/nonexistent', CAPSTAN_URL: server.url, CAPSTAN_TOKEN: (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim() };
  const said: string[] = [];
  const cli = async (...args: string[]) => {
    const r = await runProgram(CAPSTAN, args, 30_000, env);
    said.push(r.stdout, r.stderr);
    t.equal(r.code, 0, `capstan ${args.slice(0, 2).join(' ')}: ${r.stderr}`);
    return r.stdout;
  };
  const agent = async () => {
    const r = await runProgram(BIN.agent, ['run', '--relay', server.url, '--state-dir', join(dir, 'agent'), '--log-level', 'debug']);
    said.push(r.stdout, r.stderr);
    return r;
  };

  t.equal((await agent()).code, 5, 'pending until accepted');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await cli('nodes', 'accept', id);

  // The policy: a templated file reading the node's secret and a plain property, for that node alone.
  const target = join(dir, 'app.conf');
  const policy = join(dir, 'policy');
  for (const sub of ['directives', 'groups', 'rules', 'nodes']) await mkdir(join(policy, sub), { recursive: true });
  await writeFile(join(policy, 'directives', 'app.toml'), `name = "App config"\nmethod = "file_content"\n\n[params]\npath = ${JSON.stringify(target)}\nmode = "0600"\n`
    + 'content = "user={{node.properties.app_user}}\\npassword={{node.properties.app_pw}}\\n"\n');
  await writeFile(join(policy, 'groups', 'app.toml'), `name = "App"\nnodes = [${JSON.stringify(id)}]\n`);
  await writeFile(join(policy, 'rules', 'app.toml'), 'name = "App"\ndirectives = ["app"]\ngroups = ["app"]\n');
  await writeFile(join(policy, 'nodes', `${id}.toml`), `[properties.app_user]\nvalue = "svc"\n\n[properties.app_pw]\nvalue = ${JSON.stringify(SECRET)}\nsecret = true\n`);

  const diff = await cli('policy', 'diff', '-f', policy);
  t.match(diff, `  ~ node ${id} (properties: app_pw, app_user)\n      + app_pw = (secret)\n      + app_user = "svc"\n`);
  t.match(diff, /secrets changed: app_pw\n/);
  t.match(await cli('policy', 'apply', '-f', policy), /applied 4 changes; 1 nodes get a new policy/);

  const run = await agent();
  t.equal(run.code, 0, run.stderr);
  t.match(run.stdout, /1 repaired, 0 errors/);
  t.equal(await readFile(target, 'utf8'), `user=svc\npassword=${SECRET}\n`, 'opened on the node, in place');

  // The bundle as served: sealed, no plaintext; the node level shown without it.
  const served = await fetch(`${server.url}/policies/${id}/rules`);
  t.notOk((await served.text()).includes(SECRET), 'the served bundle holds no plaintext');
  t.same((await api('GET', `/api/1/nodes/${id}/properties/own`)).json.data.properties, { app_pw: { secret: true }, app_user: { value: 'svc' } });

  // Exported, the file holds `secret = true`; applying the export keeps the value.
  const exported = join(dir, 'exported');
  await cli('policy', 'export', '-d', exported);
  const file = await readFile(join(exported, 'nodes', `${id}.toml`), 'utf8');
  t.match(file, '[properties.app_pw]\nsecret = true\n');
  t.match(await cli('policy', 'apply', '-f', exported, '--prune'), /^no changes/);
  t.match((await agent()).stdout, /0 repaired, 0 errors/, 'the node keeps its value');

  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}/runs`)).json.total >= 2 ? true : undefined), 'both runs at the server');
  const answers: unknown[] = [];
  for (const path of [`/api/1/nodes/${id}/properties`, `/api/1/nodes/${id}/properties/own`, `/api/1/nodes/${id}/properties/effective`, '/api/1/node-properties',
    `/api/1/nodes/${id}/policy`, `/api/1/nodes/${id}/runs?reports=true`, `/api/1/changes?node=${id}`, '/api/1/audit?per_page=1000', '/api/1/events']) {
    const r = await api('GET', path);
    t.equal(r.status, 200, path);
    answers.push(r.json);
  }
  t.ok(JSON.stringify(answers).includes('app_pw'), 'the answers name the secret');
  t.notOk(JSON.stringify(answers).includes(SECRET), 'no API answer holds its value');
  t.notOk(said.join('\n').includes(SECRET), 'nor the CLI\'s or the agent\'s output');
  t.ok(server.output.length > 0, 'the server logged');
  t.notOk([...server.output, ...server.stderr].join('\n').includes(SECRET), 'nor the server\'s log');
  t.same((await allFiles(join(dir, 'agent'))).filter(([, b]) => b.includes(SECRET)).map(([p]) => p), [], 'nor any file of the agent\'s state');
  t.notOk(file.includes(SECRET), 'nor the export');
});
