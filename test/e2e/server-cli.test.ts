/**
 * `capstan-server nodes …`: the admin verbs mirror the API on the store directly, print a table
 * (or the API's JSON with --json), and exit 4 when the request is refused.
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
  t.equal(added.stdout, 'm1 added\n');
  t.equal((await cli('add', '--host', 'web-1.example.com', '--id', 'm2')).code, 0);

  const table = await cli('list');
  t.equal(table.code, 0);
  const lines = table.stdout.trimEnd().split('\n');
  t.match(lines[0], /^ID\s+NAME\s+ACCEPTED\s+STATUS\s+STATE\s+MANAGER\s+REGION\s+LAST RUN$/);
  t.match(lines[1], /^m1\s+db primary\s+accepted\s+unknown\s+running\s+manual\s+-\s+-$/);
  t.equal(lines.at(-1), '2 nodes (0 reachable, 0 unreachable, 2 unknown)');

  t.same((await json('list', '--filter', "tag:team=o'brien")).data.map((n: { id: string }) => n.id), ['m1']);
  t.same((await json('list', '--exclude', 'tag:env=prod')).data.map((n: { id: string }) => n.id), ['m2']);
  t.same((await json('list', '--filter', 'name=web*', '--sort', 'id', '--order', 'desc')).data.map((n: { id: string }) => n.id), ['m2']);
  const conflict = await cli('list', '--filter', 'name=a*', '--exclude', 'name=b*');
  t.equal(conflict.code, 4);
  t.match(conflict.stderr, /ERR_FILTER_CONFLICT/);
  t.equal((await cli('list', '--filter', 'colour=red')).code, 4);

  t.match(await json('set-state', 'm1', 'terminated'), { data: { state: 'terminated', status: 'unreachable' } });
  const revive = await cli('set-state', 'm1', 'running');
  t.equal(revive.code, 4);
  t.match(revive.stderr, /ERR_NODE_TERMINATED/);
  const history = await cli('history', 'm1');
  t.match(history.stdout, /^AT\s+FIELD\s+FROM\s+TO\s+CAUSE$/m);
  t.match(history.stdout, /state\s+running\s+terminated\s+admin admin \(command line\)/);
  t.equal((await json('show', 'm1')).data.tags.team, "o'brien");
  // Nodes added by address have no agent: summed apart from managed nodes.
  t.match((await cli('compliance')).stdout, /compliance - over 0 managed nodes \(0 with data\); apart: 0 relays, 2 nodes without an agent/);
  const changes = (...args: string[]) => runProgram(BIN.server, ['changes', ...args, '--data-dir', dir]);
  t.match(await changes('--since', '1d'), { code: 0, stdout: /^0 changes\n$/m });
  t.match(await changes('--label', 'drift'), { code: 4, stderr: /ERR_BAD_REQUEST/ });
  t.match(await changes('--since', 'last tuesday'), { code: 4, stderr: /ERR_BAD_REQUEST/ });
  t.match(await json('lifecycle'), { data: { by_state: { terminated: 1, running: 1 } } });
  t.equal((await cli('runs', 'ghost')).code, 4);
  t.equal((await cli('delete', 'm1')).code, 0);
  t.equal((await cli('delete', 'm1')).code, 4);
  t.equal((await cli('accept', 'm1')).code, 4);
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
  t.equal(missing.code, 4);
  t.match(missing.stderr, /ERR_BAD_REQUEST: cannot read --certificate/);
  const other = await cli('add', '--host', 'relay-8.lan', '--id', 'relay-8', '--relay', '--certificate', certificate_file);
  t.equal(other.code, 4, 'a certificate of another node id');
  t.match(other.stderr, /ERR_CERTIFICATE/);
  const added = await cli('add', '--host', 'relay-7.lan', '--id', 'relay-7', '--relay', '--certificate', certificate_file);
  t.equal(added.code, 0, added.stderr);
  t.equal(added.stdout, 'relay-7 added as a relay\n');
  const listed = await cli('list', '--filter', 'relay=true', '--json');
  t.same((JSON.parse(listed.stdout) as { data: Array<{ id: string; relay: boolean; accepted: string }> }).data.map((n) => [n.id, n.relay, n.accepted]), [['relay-7', true, 'accepted']]);
  const off = await cli('set-relay', 'relay-7', 'off');
  t.equal(off.code, 0, off.stderr);
  t.equal(off.stdout, 'relay-7 is no longer a relay\n');
  t.equal((await cli('set-relay', 'relay-7', 'maybe')).code, 4);
  t.equal((await cli('set-relay', 'ghost', 'on')).code, 4);
  t.equal((await cli('set-relay', 'relay-7', 'on')).stdout, 'relay-7 is a relay\n');
});
