/**
 * What changed, with the real programs: a real agent repairs a file that drifted, and the change
 * reaches GET /api/1/changes and `capstan-server changes` as corrective, with the diff the agent
 * made; an edited directive's next repair is intentional; an audit run shows the diff it would
 * apply without touching the file. The agent's printed compliance is the server's.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BIN, runProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';

interface Change {
  node_id: string; label: string; event_type: string; component: string; key_value: string; message: string;
  diff: string | null; run_id: number; at: string;
}

t.test('a repair is a change with its diff, corrective or intentional, and an audit shows the diff it would apply', async (t) => {
  const dir = programDir(t);
  const { relay, api } = await serverAndRelay(t, dir);
  const target = join(dir, 'app.conf');
  const agent = (extra: string[] = []) =>
    runProgram(BIN.agent, ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'error', ...extra]);

  t.equal((await agent()).code, 5, 'waiting for acceptance');
  const id = (await readFile(join(dir, 'agent', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}`)).status === 200 ? true : undefined), 'the node enrolled');
  t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
  const directive = (content: string) => ({ id: 'app', name: 'App config', method: 'file_content', params: { path: target, content } });
  t.equal((await api('POST', '/api/1/directives', directive('listen 80\nworkers 4\n'))).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'all', name: 'All', nodes: [id] })).status, 201);
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['app'], groups: ['all'] })).status, 201);

  const changes = async (want: number, qs = '') => waitFor(async () => {
    const r = await api('GET', `/api/1/changes?node=${id}${qs}`);
    return r.json.total >= want ? (r.json.data as Change[]) : undefined;
  }, `${want} changes`);

  // First run of the policy: the file is created, an intentional change (a new directive).
  const first = await agent();
  t.equal(first.code, 0, first.stderr);
  t.equal(await readFile(target, 'utf8'), 'listen 80\nworkers 4\n');
  let list = await changes(1);
  t.match(list[0], { node_id: id, label: 'intentional', event_type: 'result_repaired', component: 'File content', key_value: target });
  t.match(list[0]!.diff, /\+listen 80/);

  // Drift, repaired by the next run of the same config: corrective, with what it put back.
  await writeFile(target, 'listen 8080\nworkers 4\n');
  const repair = await agent();
  t.equal(repair.code, 0, repair.stderr);
  t.equal(await readFile(target, 'utf8'), 'listen 80\nworkers 4\n');
  list = await changes(2);
  t.match(list[0], { label: 'corrective', event_type: 'result_repaired' });
  t.match(list[0]!.diff, /^-listen 8080$/m);
  t.match(list[0]!.diff, /^\+listen 80$/m);
  t.notMatch(list[0]!.diff, /^[-+]workers/m, 'an unchanged line is context, not a change');
  // The agent's printed compliance is the server's for the same run.
  const printed = /compliance (\S+)% of (\d+) items/.exec(repair.stdout);
  t.ok(printed, repair.stdout);
  const node = await waitFor(async () => {
    const c = (await api('GET', `/api/1/nodes/${id}/compliance`)).json.data;
    return c.run?.id === list[0]!.run_id ? c : undefined;
  }, 'the repair run in compliance');
  t.equal(String(node.compliance), printed![1]);
  t.equal(String(node.summary.total), printed![2]);
  t.equal(node.summary.counts.repaired, 1);

  // The CLI shows the same change with its diff.
  const cli = await runProgram(BIN.server, ['changes', 'list', '--node', id, '--label', 'corrective', '--from', '1h', '--show', '--data-dir', join(dir, 'server')]);
  t.equal(cli.code, 0, cli.stderr);
  t.match(cli.stdout, /corrective result_repaired/);
  t.match(cli.stdout, /^\s+\+listen 80$/m);
  t.match(cli.stdout, /1 changes\n$/);
  const table = await runProgram(BIN.server, ['changes', 'list', '--node', id, '--data-dir', join(dir, 'server')]);
  t.match(table.stdout, /^AT\s+NODE_ID\s+RULE_ID\s+DIRECTIVE_ID\s+COMPONENT\s+LABEL/);

  // An edited directive: its next repair is intentional.
  t.equal((await api('PUT', '/api/1/directives/app', directive('listen 443\nworkers 4\n'))).status, 200);
  t.equal((await agent()).code, 0);
  list = await changes(3);
  t.match(list[0], { label: 'intentional' });
  t.match(list[0]!.diff, /^\+listen 443$/m);

  // Audit: the would-be diff, the file untouched, reported as an audit finding.
  await writeFile(target, 'listen 22\nworkers 4\n');
  const audit = await agent(['--audit']);
  t.equal(await readFile(target, 'utf8'), 'listen 22\nworkers 4\n', 'audit touches nothing');
  t.match(audit.stdout, /1 non compliant/);
  list = await changes(4);
  t.match(list[0], { event_type: 'audit_noncompliant', label: 'corrective' });
  t.match(list[0]!.diff, /^-listen 22$/m);
  t.match(list[0]!.diff, /^\+listen 443$/m);
  t.same((await api('GET', `/api/1/changes?node=${id}&label=intentional`)).json.total, 2);
  const hist = (await api('GET', '/api/1/changes/histogram?by=day')).json.data;
  t.equal(hist.reduce((s: number, b: { total: number }) => s + b.total, 0), 4);
});
