/**
 * A shared-folder template end to end, with the real programs: the server holds the template in
 * its shared folder and renders it for the node with a group property and the node's host name;
 * the agent, through a relay, writes the rendered file in a temporary directory, and its second
 * run changes nothing. An edit of the template file reaches the node by itself (the server's
 * template check regenerates its policy), and the agent writes the new rendering once.
 */
import { mkdir, readFile, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BIN, runProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';

t.test('a shared-folder template is rendered by the server and applied by a real agent; a second run changes nothing', async (t) => {
  const dir = programDir(t);
  const shared = join(dir, 'shared');
  await mkdir(join(shared, 'templates'), { recursive: true });
  const template = join(shared, 'templates', 'app.conf.mustache');
  await writeFile(template, '# managed by capstan\nsite={{node.properties.site}}\nhost={{node.hostname}}\n{{#node.properties.peers}}peer {{.}}\n{{/node.properties.peers}}');
  await writeFile(join(dir, 'server.toml'), `[policy]\nshared_folder = ${JSON.stringify(shared)}\ntemplate_check_interval = "200ms"\n`);
  const { relay, api } = await serverAndRelay(t, dir, { config: join(dir, 'server.toml') });
  const target = join(dir, 'etc', 'app.conf');
  await mkdir(join(dir, 'etc'));
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error']);

  t.equal((await agent()).code, 5, 'waits for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.total === 1 ? true : undefined), 'the pending node');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  const hostname = (await api('GET', `/api/1/nodes/${id}/inventory`)).json.data.inventory.hostname as string;
  t.ok(hostname, 'the inventory has the node\'s host name');

  t.equal((await api('POST', '/api/1/groups', { id: 'paris', name: 'Paris', nodes: [id], properties: { site: { value: 'paris' }, peers: { value: ['10.0.0.1', '10.0.0.2'] } } })).status, 201);
  t.equal((await api('POST', '/api/1/directives', {
    id: 'app-conf', name: 'App config', method: 'file_from_template',
    params: { path: target, source: 'templates/app.conf.mustache', mode: '0640' },
  })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'app', name: 'App', directives: ['app-conf'], groups: ['paris'] })).status, 201);

  const r1 = await agent();
  t.equal(r1.code, 0, r1.stderr + r1.stdout);
  t.match(r1.stdout, /1 repaired, 0 errors/);
  t.equal(await readFile(target, 'utf8'), `# managed by capstan\nsite=paris\nhost=${hostname}\npeer 10.0.0.1\npeer 10.0.0.2\n`, 'rendered for this node');
  t.equal((await stat(target)).mode & 0o777, 0o640);
  const first = (await api('GET', `/api/1/nodes/${id}/policy`)).json.data.config_id as string;

  const r2 = await agent();
  t.equal(r2.code, 0, r2.stderr + r2.stdout);
  t.match(r2.stdout, /0 repaired, 0 errors/, 'a second run changes nothing');
  t.match(r2.stdout, new RegExp(`config ${first}:`), 'the same policy');

  // The template is edited in the shared folder: the server notices and regenerates this node.
  await writeFile(template, '# managed by capstan\nsite={{node.properties.site}}\nhost={{node.hostname}}\nport=8080\n');
  const second = await waitFor(async () => {
    const c = (await api('GET', `/api/1/nodes/${id}/policy`)).json.data.config_id as string;
    return c !== first ? c : undefined;
  }, 'the node\'s policy regenerated from the edited template');
  const r3 = await agent();
  t.equal(r3.code, 0, r3.stderr + r3.stdout);
  t.match(r3.stdout, new RegExp(`config ${second}:`));
  t.match(r3.stdout, /1 repaired, 0 errors/);
  t.equal(await readFile(target, 'utf8'), `# managed by capstan\nsite=paris\nhost=${hostname}\nport=8080\n`);
  t.match((await agent()).stdout, /0 repaired, 0 errors/, 'and then nothing again');
});
