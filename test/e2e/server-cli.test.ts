/**
 * `capstan-server nodes …` and its other admin verbs are `capstan`'s, run in process on the
 * server's registry: the same tables (or the API's JSON with --json), capstan's exit codes (4
 * refused, 6 not found), and with the server stopped too.
 */
import { join } from 'node:path';
import t from 'tap';
import { BIN, runProgram } from '../helpers/programs.js';

t.test('add, list with filters, state, history, compliance, lifecycle and delete from the shell', async (t) => {
  const dir = t.testdir();
  const cli = (...args: string[]) => runProgram(BIN.server, ['nodes', ...args, '--data-dir', dir]);
  const json = async (...args: string[]) => {
    const r = await cli(...args, '--json');
    t.equal(r.code, 0, `${args.join(' ')}: ${r.stderr}`);
    return JSON.parse(r.stdout);
  };

  const added = await cli('add', '--host', '10.0.0.9', '--name', 'db primary', '--tag', 'env=prod', '--tag', "team=o'brien", '--group', 'db', '--id', 'm1');
  t.equal(added.code, 0, added.stderr);
  t.match(added.stdout, /^id\s+m1$/m, 'the node as added');
  t.match(added.stdout, /^tags\s+\{"env":"prod","team":"o'brien"\}$/m);
  t.equal((await cli('add', '--host', 'web-1.example.com', '--id', 'm2')).code, 0);

  const table = await cli('list');
  t.equal(table.code, 0);
  const lines = table.stdout.trimEnd().split('\n');
  t.match(lines[0], /^ID\s+NAME\s+STATUS\s+STATE\s+ACCEPTED\s+MANAGER\s+LAST_RUN_AT$/);
  t.match(lines[1], /^m1\s+db primary\s+unknown\s+running\s+accepted\s+manual\s+-$/);
  t.equal(lines.length, 3);

  t.same((await json('list', '--filter', "tag:team=o'brien")).data.map((n: { id: string }) => n.id), ['m1']);
  t.same((await json('list', '--exclude', 'tag:env=prod')).data.map((n: { id: string }) => n.id), ['m2']);
  t.same((await json('list', '--filter', 'name=web*', '--sort', 'id', '--order', 'desc')).data.map((n: { id: string }) => n.id), ['m2']);
  const conflict = await cli('list', '--filter', 'name=a*', '--exclude', 'name=b*');
  t.equal(conflict.code, 4);
  t.match(conflict.stderr, /^capstan-server: ERR_FILTER_CONFLICT: /);
  t.equal((await cli('list', '--filter', 'colour=red')).code, 4);

  t.match(await json('set-state', 'm1', 'terminated'), { data: { state: 'terminated', status: 'unreachable' } });
  const revive = await cli('set-state', 'm1', 'running');
  t.equal(revive.code, 4);
  t.match(revive.stderr, /ERR_NODE_TERMINATED/);
  const history = await cli('history', 'm1');
  t.match(history.stdout, /^AT\s+FIELD\s+FROM\s+TO\s+CAUSE$/m);
  t.match(history.stdout, /state\s+running\s+terminated\s+admin admin \(command line\)/);
  t.equal((await json('show', 'm1')).data.tags.team, "o'brien");
  // Nodes added by address have no agent: their class says so, and they expect nothing.
  t.match((await cli('compliance')).stdout, /^NODE_ID\s+HOSTNAME\s+CLASS\s+STATUS\s+COMPLIANCE\s+ITEMS\s+COUNTS\nm1\s+10\.0\.0\.9\s+agentless\s+unreachable\s+-\s+0\s+-\n/);
  const changes = (...args: string[]) => runProgram(BIN.server, ['changes', 'list', ...args, '--data-dir', dir]);
  t.match(await changes('--from', '1d', '--show'), { code: 0, stdout: /^0 changes\n$/ });
  t.match(await changes('--label', 'drift'), { code: 2, stderr: /--label/ }, 'a usage error, before the store is opened');
  t.match(await changes('--from', 'last tuesday'), { code: 4, stderr: /ERR_BAD_REQUEST/ });
  const lifecycle = JSON.parse((await runProgram(BIN.server, ['lifecycle', '--json', '--data-dir', dir])).stdout);
  t.match(lifecycle, { data: { nodes: { by_state: { terminated: 1, running: 1 } } } });
  t.equal((await cli('runs', 'ghost')).code, 6, 'not found');
  t.match(await cli('delete', 'm1'), { code: 0, stdout: 'deleted node m1\n' });
  t.equal((await cli('delete', 'm1')).code, 6);
  t.equal((await cli('accept', 'm1')).code, 6);
});

t.test('a relay is registered from the shell with the certificate capstan-relayd --identity made, and unregistered', async (t) => {
  const dir = t.testdir();
  const cli = (...args: string[]) => runProgram(BIN.server, ['nodes', ...args, '--data-dir', dir]);
  const made = await runProgram(BIN.relayd, ['--identity', '--spool-dir', join(dir, 'relay'), '--node-id', 'relay-7']);
  t.equal(made.code, 0, made.stderr);
  const { node_id, certificate_file } = JSON.parse(made.stdout) as { node_id: string; certificate_file: string };
  t.equal(node_id, 'relay-7');
  const noCert = await cli('add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay');
  t.equal(noCert.code, 4);
  t.match(noCert.stderr, /ERR_CERTIFICATE/);
  const missing = await cli('add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay', '--certificate', join(dir, 'nope.pem'));
  t.equal(missing.code, 2, 'a file the caller names and that cannot be read');
  t.match(missing.stderr, /ERR_CLI_FILE: cannot read --certificate/);
  const other = await cli('add', '--host', 'relay-8.lan', '--id', 'relay-8', '--relay', '--certificate', certificate_file);
  t.equal(other.code, 4, 'a certificate of another node id');
  t.match(other.stderr, /ERR_CERTIFICATE/);
  const added = await cli('add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay', '--certificate', certificate_file);
  t.equal(added.code, 0, added.stderr);
  t.match(added.stdout, /^relay\s+true$/m);
  const listed = await cli('list', '--filter', 'relay=true', '--json');
  t.same((JSON.parse(listed.stdout) as { data: Array<{ id: string; relay: boolean; accepted: string }> }).data.map((n) => [n.id, n.relay, n.accepted]), [['relay-7', true, 'accepted']]);
  const off = await cli('set-relay', 'relay-7', 'off');
  t.equal(off.code, 0, off.stderr);
  t.match(off.stdout, /^relay\s+false$/m);
  t.equal((await cli('set-relay', 'relay-7', 'maybe')).code, 2);
  t.equal((await cli('set-relay', 'ghost', 'on')).code, 6);
  t.match((await cli('set-relay', 'relay-7', 'on')).stdout, /^relay\s+true$/m);
});

t.test('without a registry to open: exit 3, with what could not be opened; a bad configuration: exit 2', async (t) => {
  const dir = t.testdir({ 'bad.toml': '[general]\nlisten = "nowhere"\n' });
  const absent = await runProgram(BIN.server, ['nodes', 'list', '--data-dir', join(dir, 'absent', 'deeper')]);
  t.equal(absent.code, 3);
  t.match(absent.stderr, /^capstan-server: ERR_\w+: cannot open the store: /);
  const bad = await runProgram(BIN.server, ['nodes', 'list', '--config', join(dir, 'bad.toml'), '--data-dir', dir]);
  t.equal(bad.code, 2);
  t.match(bad.stderr, /^capstan-server: ERR_CONFIG\w*: .*general\.listen/);
});
