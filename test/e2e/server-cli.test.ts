/**
 * `capstan-server nodes …` and its other admin verbs are `capstan`'s, run in process on the
 * server's registry: the same tables (or the API's JSON with --json), capstan's exit codes (4
 * refused, 6 not found), and with the server stopped too.
 */
import { join } from 'node:path';
import t from 'tap';
import { all } from '../helpers/concurrently.js';
import { BIN, runProgram, type Ran } from '../helpers/programs.js';

t.test('add, list with filters, state, history, compliance, lifecycle and delete from the shell', async (t) => {
  const dir = t.testdir();
  const args = (...a: string[]) => ['nodes', ...a, '--data-dir', dir];
  const cli = (...a: string[]) => runProgram(BIN.server, args(...a));
  const changes = (...a: string[]) => runProgram(BIN.server, ['changes', 'list', ...a, '--data-dir', dir]);
  const data = (r: Ran, what: string) => {
    t.equal(r.code, 0, `${what}: ${r.stderr}`);
    return JSON.parse(r.stdout);
  };
  const ids = (r: Ran, what: string) => (data(r, what).data as Array<{ id: string }>).map((n) => n.id);
  // Each command is a program start of its own: those between two writes run at once, the
  // writes one at a time, in the order the assertions need. The first opening makes the store.

  const [added, label] = await all([
    () => cli('add', '--host', '10.0.0.9', '--name', 'db primary', '--tag', 'env=prod', '--tag', "team=o'brien", '--group', 'db', '--id', 'm1'),
    () => changes('--label', 'drift'),
  ]);
  t.equal(added!.code, 0, added!.stderr);
  t.match(added!.stdout, /^id\s+m1$/m, 'the node as added');
  t.match(added!.stdout, /^tags\s+\{"env":"prod","team":"o'brien"\}$/m);
  t.match(label, { code: 2, stderr: /--label/ }, 'a usage error, before the store is opened');
  t.equal((await cli('add', '--host', 'web-1.example.com', '--id', 'm2')).code, 0);

  const [table, byTag, excluded, sorted, conflict, colour, badFrom, ghostRuns] = await all([
    () => cli('list'),
    () => cli('list', '--filter', "tag:team=o'brien", '--json'),
    () => cli('list', '--exclude', 'tag:env=prod', '--json'),
    () => cli('list', '--filter', 'name=web*', '--sort', 'id', '--order', 'desc', '--json'),
    () => cli('list', '--filter', 'name=a*', '--exclude', 'name=b*'),
    () => cli('list', '--filter', 'colour=red'),
    () => changes('--from', 'last tuesday'),
    () => cli('runs', 'ghost'),
  ]);
  t.equal(table!.code, 0);
  const lines = table!.stdout.trimEnd().split('\n');
  t.match(lines[0], /^ID\s+NAME\s+STATUS\s+STATE\s+ACCEPTED\s+MANAGER\s+LAST_RUN_AT$/);
  t.match(lines[1], /^m1\s+db primary\s+unknown\s+running\s+accepted\s+manual\s+-$/);
  t.equal(lines.length, 3);
  t.same(ids(byTag!, 'list --filter tag:team'), ['m1']);
  t.same(ids(excluded!, 'list --exclude'), ['m2']);
  t.same(ids(sorted!, 'list --sort'), ['m2']);
  t.equal(conflict!.code, 4);
  t.match(conflict!.stderr, /^capstan-server: ERR_FILTER_CONFLICT: /);
  t.equal(colour!.code, 4);
  t.match(badFrom, { code: 4, stderr: /ERR_BAD_REQUEST/ });
  t.equal(ghostRuns!.code, 6, 'not found');

  t.match(data(await cli('set-state', 'm1', 'terminated', '--json'), 'set-state'), { data: { state: 'terminated', status: 'unreachable' } });
  const revive = await cli('set-state', 'm1', 'running');
  t.equal(revive.code, 4);
  t.match(revive.stderr, /ERR_NODE_TERMINATED/);

  const [history, shown, compliance, none, lifecycle] = await all([
    () => cli('history', 'm1'),
    () => cli('show', 'm1', '--json'),
    () => cli('compliance'),
    () => changes('--from', '1d', '--show'),
    () => runProgram(BIN.server, ['lifecycle', '--json', '--data-dir', dir]),
  ]);
  t.match(history!.stdout, /^AT\s+FIELD\s+FROM\s+TO\s+CAUSE$/m);
  t.match(history!.stdout, /state\s+running\s+terminated\s+admin admin \(command line\)/);
  t.equal(data(shown!, 'show').data.tags.team, "o'brien");
  // Nodes added by address have no agent: their class says so, and they expect nothing.
  t.match(compliance!.stdout, /^NODE_ID\s+HOSTNAME\s+CLASS\s+STATUS\s+COMPLIANCE\s+ITEMS\s+COUNTS\nm1\s+10\.0\.0\.9\s+agentless\s+unreachable\s+-\s+0\s+-\n/);
  t.match(none, { code: 0, stdout: /^0 changes\n$/ });
  t.match(JSON.parse(lifecycle!.stdout), { data: { nodes: { by_state: { terminated: 1, running: 1 } } } });

  t.match(await cli('delete', 'm1'), { code: 0, stdout: 'deleted node m1\n' });
  const [again, accept] = await all([() => cli('delete', 'm1'), () => cli('accept', 'm1')]);
  t.equal(again!.code, 6);
  t.equal(accept!.code, 6);
});

t.test('a relay is registered from the shell with the certificate capstan-relayd --identity made, and unregistered', async (t) => {
  const dir = t.testdir();
  const cli = (...args: string[]) => runProgram(BIN.server, ['nodes', ...args, '--data-dir', dir]);
  // The relay's key pair is made while the store is: two program starts at once.
  const [made, noCert] = await all([
    () => runProgram(BIN.relayd, ['--identity', '--spool-dir', join(dir, 'relay'), '--node-id', 'relay-7']),
    () => cli('add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay'),
  ]);
  t.equal(made!.code, 0, made!.stderr);
  const { node_id, certificate_file } = JSON.parse(made!.stdout) as { node_id: string; certificate_file: string };
  t.equal(node_id, 'relay-7');
  t.equal(noCert!.code, 4);
  t.match(noCert!.stderr, /ERR_CERTIFICATE/);
  const [missing, other, added] = await all([
    () => cli('add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay', '--certificate', join(dir, 'nope.pem')),
    () => cli('add', '--host', 'relay-8.lan', '--id', 'relay-8', '--relay', '--certificate', certificate_file),
    () => cli('add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay', '--certificate', certificate_file),
  ]);
  t.equal(missing!.code, 2, 'a file the caller names and that cannot be read');
  t.match(missing!.stderr, /ERR_CLI_FILE: cannot read --certificate/);
  t.equal(other!.code, 4, 'a certificate of another node id');
  t.match(other!.stderr, /ERR_CERTIFICATE/);
  t.equal(added!.code, 0, added!.stderr);
  t.match(added!.stdout, /^relay\s+true$/m);
  const [listed, maybe, ghost] = await all([
    () => cli('list', '--filter', 'relay=true', '--json'),
    () => cli('set-relay', 'relay-7', 'maybe'),
    () => cli('set-relay', 'ghost', 'on'),
  ]);
  t.same((JSON.parse(listed!.stdout) as { data: Array<{ id: string; relay: boolean; accepted: string }> }).data.map((n) => [n.id, n.relay, n.accepted]), [['relay-7', true, 'accepted']]);
  t.equal(maybe!.code, 2);
  t.equal(ghost!.code, 6);
  const off = await cli('set-relay', 'relay-7', 'off');
  t.equal(off.code, 0, off.stderr);
  t.match(off.stdout, /^relay\s+false$/m);
  t.match((await cli('set-relay', 'relay-7', 'on')).stdout, /^relay\s+true$/m);
});

t.test('without a registry to open: exit 3, with what could not be opened; a bad configuration: exit 2', async (t) => {
  const dir = t.testdir({ 'bad.toml': '[general]\nlisten = "nowhere"\n' });
  const [absent, bad] = await all([
    () => runProgram(BIN.server, ['nodes', 'list', '--data-dir', join(dir, 'absent', 'deeper')]),
    () => runProgram(BIN.server, ['nodes', 'list', '--config', join(dir, 'bad.toml'), '--data-dir', dir]),
  ]);
  t.equal(absent!.code, 3);
  t.match(absent!.stderr, /^capstan-server: ERR_\w+: cannot open the store: /);
  t.equal(bad!.code, 2);
  t.match(bad!.stderr, /^capstan-server: ERR_CONFIG\w*: .*general\.listen/);
});
