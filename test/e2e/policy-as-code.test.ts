/**
 * Policy as code with the real programs: `capstan policy diff` on a directory names the nodes
 * that would get new or changed directives (and only those), `apply` makes the server match,
 * a second `apply` changes nothing and says so, and the node's next run applies the new policy
 * with the config id the plan announced. The CLI reaches the server over HTTP only, as from
 * another machine: its URL and token come from the environment.
 */
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import t from 'tap';
import { BIN, ROOT, runProgram, startProgram, programDir, startServer } from '../helpers/programs.js';

const CAPSTAN = resolve(ROOT, 'server/dist/admin-cli/cli.js');

/** `capstan` with only the environment given (no token file found in a home directory). */
const capstan = (args: string[], env: Record<string, string>) =>
  runProgram(CAPSTAN, args, 30_000, { PATH: process.env.PATH ?? '', HOME: '/nonexistent', ...env });

t.test('policy diff names the nodes a change reaches; apply makes it so, once; the node runs it', async (t) => {
  const dir = programDir(t);
  const { server } = await startServer(t, join(dir, 'server'));
  const env = { CAPSTAN_URL: server.url, CAPSTAN_TOKEN: (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim() };
  const cli = async (...args: string[]) => {
    const r = await capstan(args, env);
    t.equal(r.code, 0, `capstan ${args.slice(0, 2).join(' ')} ${r.stderr}`);
    return r.stdout;
  };
  const agent = (state: string) => runProgram(BIN.agent, ['run', '--relay', server.url, '--state-dir', join(dir, state), '--log-level', 'error']);

  // Node a enrolled straight at the server and accepted with the CLI; node b added by address.
  t.equal((await agent('agent-a')).code, 5, 'pending until accepted');
  const idA = (await readFile(join(dir, 'agent-a', 'node-id'), 'utf8')).trim();
  t.match(await cli('nodes', 'pending'), idA, 'the CLI lists the pending node');
  await cli('nodes', 'accept', idA);
  const idB = 'node-b';
  await cli('nodes', 'add', '--host', '127.0.0.2', '--id', idB);
  // The filter language from the CLI: node a has an inventory (a package list), node b none.
  const listed = await cli('--json', 'nodes', 'list', '-q', 'package:bash or package:coreutils or package:busybox');
  t.same((JSON.parse(listed) as { data: Array<{ id: string }> }).data.map((n) => n.id), [idA], 'capstan nodes list -q: only the node whose inventory matches');

  // The policy as files: a directive, a static group holding node a, a rule.
  const target = join(dir, 'managed.txt');
  const policy = join(dir, 'policy');
  for (const sub of ['directives', 'groups', 'rules']) await mkdir(join(policy, sub), { recursive: true });
  const directive = (content: string) => writeFile(join(policy, 'directives', 'managed.toml'),
    `name = "Managed file"\nmethod = "file_content"\n\n[params]\npath = ${JSON.stringify(target)}\ncontent = ${JSON.stringify(content)}\n`);
  const group = (nodes: string[]) => writeFile(join(policy, 'groups', 'web.toml'), `name = "Web"\nnodes = ${JSON.stringify(nodes)}\n`);
  await directive('first\n');
  await group([idA]);
  await writeFile(join(policy, 'rules', 'base.json'), JSON.stringify({ name: 'Base', directives: ['managed'], groups: ['web'] }));

  // The plan: three objects to create, node a (only) gains base/managed.
  const text = await cli('policy', 'diff', '-f', policy);
  t.match(text, /\+ directive managed\n {2}\+ group web\n {2}\+ rule base\n/);
  t.match(text, new RegExp(`Nodes whose policy would change: 1\\n {2}${idA} \\([^)]*\\): config none -> [0-9a-f]{16}\\n {4}\\+ base/managed\\n`));
  t.notMatch(text, idB, 'node b is not in the group');
  const plan = JSON.parse(await cli('--json', 'policy', 'diff', '-f', policy)).data;
  t.same(plan.nodes.map((n: { node_id: string; added: unknown }) => [n.node_id, n.added]), [[idA, [{ rule_id: 'base', directive_id: 'managed' }]]]);
  t.equal((await capstan(['policy', 'diff', '-f', policy, '--detailed-exitcode'], env)).code, 7, 'changes pending');

  // Apply, then apply again: nothing left to do.
  t.match(await cli('policy', 'apply', '-f', policy), /applied 3 changes; 1 nodes get a new policy/);
  t.match(await cli('policy', 'apply', '-f', policy), /^no changes: the server matches the files \(3 objects\)\n$/);
  t.equal((await capstan(['policy', 'diff', '-f', policy, '--detailed-exitcode'], env)).code, 0);

  // Node a's next run applies it, under the config id the plan announced.
  const run1 = await agent('agent-a');
  t.equal(run1.code, 0, run1.stderr);
  t.match(run1.stdout, new RegExp(`config ${plan.nodes[0].config_id_after}: 1 repaired, 0 errors`));
  t.equal(await readFile(target, 'utf8'), 'first\n');

  // A changed directive and a node added to the group: a sees it changed, b gains it.
  await directive('second\n');
  await group([idA, idB]);
  const plan2 = JSON.parse(await cli('--json', 'policy', 'diff', '-f', policy)).data;
  t.same(plan2.changes.map((c: { action: string; kind: string; id: string }) => `${c.action} ${c.kind} ${c.id}`), ['update directive managed', 'update group web']);
  t.same(plan2.nodes.map((n: { node_id: string; added: unknown[]; changed: unknown[] }) => [n.node_id, n.added.length, n.changed.length]),
    [[idA, 0, 1], [idB, 1, 0]].sort((x, y) => (x[0]! < y[0]! ? -1 : 1)));
  t.match(await cli('policy', 'apply', '-f', policy), /applied 2 changes; 2 nodes get a new policy/);
  const run2 = await agent('agent-a');
  const after = plan2.nodes.find((n: { node_id: string }) => n.node_id === idA).config_id_after;
  t.match(run2.stdout, new RegExp(`config ${after}: 1 repaired, 0 errors`));
  t.equal(await readFile(target, 'utf8'), 'second\n');

  // Export writes back what the files say: a diff of the export is empty.
  await cli('policy', 'export', '-d', join(dir, 'exported'));
  t.match(await cli('policy', 'diff', '-f', join(dir, 'exported'), '--prune'), /^no changes/);
});
