/**
 * Findings with the real programs: a real agent with an audit directive that fails (a file's
 * content differs from the policy's) runs five times: one finding, open, seen by five runs, with
 * the diff a repair would make, and no change recorded; the file fixed by hand, the next run
 * closes it. The event stream told both, and the command line lists them.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BIN, programDir, runProgram, serverAndRelay, waitFor } from '../helpers/programs.js';

interface Finding {
  id: number; node_id: string; status: string; kind: string; runs: number; message: string; diff: string | null;
  first_run_id: number; last_run_id: number; closed_run_id: number | null; close_reason: string | null;
}

t.test('a failing audit directive over five runs is one finding; fixed by hand, the next run closes it; no change is recorded', async (t) => {
  const dir = programDir(t);
  const { server, relay, api, token } = await serverAndRelay(t, dir);
  const target = join(dir, 'banner.txt');
  await writeFile(target, 'telnet welcome\n');
  const agent = () => runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error']);

  t.equal((await agent()).code, 5, 'waiting for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}`)).status === 200 ? true : undefined), 'the node enrolled');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  t.equal((await api('POST', '/api/1/directives', {
    id: 'banner', name: 'Login banner', method: 'file_content', params: { path: target, content: 'authorised use only\n' }, mode: 'audit',
  })).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'all', name: 'All', nodes: [id] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['banner'], groups: ['all'] })).status, 201);

  const findings = async (want: (f: Finding[]) => boolean, what: string) => waitFor(async () => {
    const list = (await api('GET', `/api/1/findings?node=${id}`)).json.data as Finding[];
    return want(list) ? list : undefined;
  }, what);

  for (let i = 1; i <= 5; i++) {
    const ran = await agent();
    t.equal(ran.code, 0, ran.stderr);
    t.match(ran.stdout, /1 non compliant/);
    await findings((l) => l.length === 1 && l[0]!.runs === i, `the finding seen by ${i} runs`);
  }
  t.equal(await readFile(target, 'utf8'), 'telnet welcome\n', 'audit changes nothing');
  const [open] = await findings((l) => l.length === 1, 'one finding');
  t.match(open, { status: 'open', kind: 'non_compliant', runs: 5, closed_run_id: null });
  t.match(open!.diff, /^-telnet welcome$/m, 'with the diff a repair would make');
  t.match(open!.diff, /^\+authorised use only$/m);
  t.ok(open!.last_run_id > open!.first_run_id);
  t.same((await api('GET', `/api/1/changes?node=${id}`)).json.total, 0, 'no change for those runs');

  // Fixed by hand: the next run is compliant and closes it.
  await writeFile(target, 'authorised use only\n');
  t.equal((await agent()).code, 0);
  const [closed] = await findings((l) => l[0]?.status === 'closed', 'the finding closed');
  t.match(closed, { id: open!.id, close_reason: 'fixed', runs: 5, last_run_id: open!.last_run_id });
  t.ok(closed!.closed_run_id! > open!.last_run_id, 'closed by the run after the last one that saw it');
  t.same((await api('GET', `/api/1/changes?node=${id}`)).json.total, 0, 'still no change');

  const events = (await api('GET', `/api/1/events?node=${id}&type=finding.*`)).json.data as Array<{ type: string; data: Record<string, unknown> }>;
  t.same(events.map((e) => e.type), ['finding.opened', 'finding.closed']);
  t.match(events[1], { data: { finding_id: open!.id, reason: 'fixed', runs: 5, run_id: closed!.closed_run_id } });

  const cli = await runProgram(BIN.server, ['findings', '--status', 'all', '--node', id, '--data-dir', join(dir, 'server')]);
  t.equal(cli.code, 0, cli.stderr);
  const lines = cli.stdout.trimEnd().split('\n');
  t.match(lines[0], /^ID\s+STATUS\s+KIND\s+NODE_ID/);
  t.equal(lines.length, 2, 'a header and one row');
  t.match(lines.slice(1), [new RegExp(`^${open!.id}\\s+closed\\s+non_compliant\\s+${id}\\s`)], 'the closed finding, alone');
  t.equal((await runProgram(BIN.server, ['findings', '--node', id, '--data-dir', join(dir, 'server')])).stdout.trimEnd().split('\n').length, 1,
    'open ones only by default: none');
  const csv = await (await fetch(`${server.url}/api/1/findings?node=${id}&format=csv`, { headers: { authorization: `Bearer ${token}` } })).text();
  const [head, row, end] = csv.split('\r\n');
  t.match(head, /^id,status,kind,node_id,rule_id,directive_id,component,key,event_type,message,first_seen_at/);
  t.match(row, new RegExp(`^${open!.id},closed,non_compliant,${id},base,banner,`));
  t.equal(end, '', 'one finding, one row');
});
