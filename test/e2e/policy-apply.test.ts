/**
 * The policy model end to end, with the real programs: an admin creates a directive, a group and a rule
 * over HTTP; the node's next run through a relay applies it, the second run changes nothing, a
 * changed directive changes the config id and is applied, an audit run reports drift without
 * touching the file, and compliance shows it all. Then a relay that alters a cached bundle, or
 * serves another node's, makes the agent refuse it, report it, and keep its last good policy.
 */
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BIN, runProgram, startProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';

t.test('an admin-written policy reaches the node signed, through a relay, and is refused when altered', async (t) => {
  const dir = programDir(t, { 'relay-caching.toml': '[policies]\nmax_age = "1h"\n' });
  const { server, relay, api } = await serverAndRelay(t, dir);
  const target = join(dir, 'managed.txt');
  const agent = (state: string, extra: string[] = [], via = relay.url) =>
    runProgram(BIN.agent, ['run', '--relay', via, '--state-dir', join(dir, state), '--log-level', 'error', ...extra]);

  // Enrol two nodes and accept them.
  // Exit 5: each waits for acceptance.
  for (const state of ['agent-a', 'agent-b']) t.equal((await agent(state)).code, 5);
  const idA = (await readFile(join(dir, 'agent-a', 'node-id'), 'utf8')).trim();
  const idB = (await readFile(join(dir, 'agent-b', 'node-id'), 'utf8')).trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.total === 2 ? true : undefined), 'two pending nodes');
  for (const id of [idA, idB]) t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);

  // The model, with HTTP calls as an admin would make them with curl.
  const directive = (content: string) => ({ id: 'managed', name: 'Managed file', method: 'file_content', params: { path: target, content } });
  t.equal((await api('POST', '/api/1/directives', directive('first\n'))).status, 201);
  t.equal((await api('POST', '/api/1/groups', { id: 'both', name: 'Both nodes', nodes: [idA, idB] })).status, 201);
  const bad = await api('POST', '/api/1/rules', { id: 'base', directives: ['managed', 'nope'], groups: ['both'] });
  t.equal(bad.json.error.code, 'ERR_BAD_REQUEST', 'unknown directive refused');
  t.equal((await api('POST', '/api/1/rules', { id: 'base', name: 'Base', directives: ['managed'], groups: ['both'] })).status, 201);

  // First run applies it; second changes nothing.
  const r1 = await agent('agent-a');
  t.equal(r1.code, 0, r1.stderr);
  t.match(r1.stdout, /1 repaired, 0 errors/);
  t.equal(await readFile(target, 'utf8'), 'first\n');
  const config1 = /config (\S+):/.exec(r1.stdout)![1]!;
  const r2 = await agent('agent-a');
  t.match(r2.stdout, /0 repaired, 0 errors/);
  t.match(r2.stdout, new RegExp(`config ${config1}:`));

  // A changed directive: new config id, new content applied on the next run.
  t.equal((await api('PUT', '/api/1/directives/managed', directive('second\n'))).status, 200);
  const r3 = await agent('agent-a');
  t.match(r3.stdout, /1 repaired, 0 errors/);
  const config2 = /config (\S+):/.exec(r3.stdout)![1]!;
  t.not(config2, config1, 'the config id follows the content');
  t.equal(await readFile(target, 'utf8'), 'second\n');

  // A manual change, then an audit run: reported non-compliant, file untouched.
  await writeFile(target, 'edited by hand\n');
  const audit = await agent('agent-a', ['--audit']);
  t.match(audit.stdout, /1 non compliant\b/);
  t.equal(await readFile(target, 'utf8'), 'edited by hand\n');
  const compliance = await waitFor(async () => {
    const c = (await api('GET', `/api/1/nodes/${idA}/compliance`)).json.data;
    return c.run?.config_id === config2 && c.summary.counts.non_compliant === 1 ? c : undefined;
  }, 'the audit run in compliance');
  const byDirectiveOf = (c: { directives: Array<{ directive_id: string }> }, id: string) => c.directives.find((d) => d.directive_id === id);
  const byDirective = (id: string) => byDirectiveOf(compliance, id);
  t.match(byDirective('managed'), { rule_id: 'base', counts: { non_compliant: 1 } });
  // The agent's own self-checks are expected on every node: compliant, never "unexpected".
  t.match(byDirective('agent-self-check'), { rule_id: 'capstan-agent', counts: { success: 3, error: 0, unexpected: 0, missing: 0 } });
  t.equal(compliance.policy_config_id, config2);

  // What each change changed, as the agent wrote it, through the relay into the server's changes;
  // the audit run changed nothing: a finding, with the diff a repair would make.
  const changes = await waitFor(async () => {
    const rows = (await api('GET', `/api/1/changes?node=${idA}&directive=managed&format=json`)).json.data as Array<{ event_type: string; diff: string | null }>;
    return rows?.length === 2 ? rows : undefined;
  }, 'the two changes of node a');
  t.same(changes.map((c) => [c.event_type, c.diff]), [
    ['result_repaired', `--- a${target}\n+++ b${target}\n@@ -1,1 +1,1 @@\n-first\n+second\n`],
    ['result_repaired', `created ${target}\n--- /dev/null\n+++ b${target}\n@@ -0,0 +1,1 @@\n+first\n`],
  ], 'newest first, each with its diff');
  const audited = (await api('GET', `/api/1/findings?node=${idA}&directive=managed`)).json.data as Array<{ event_type: string; diff: string | null }>;
  t.same(audited.map((f) => [f.event_type, f.diff]), [
    ['audit_noncompliant', `--- a${target}\n+++ b${target}\n@@ -1,1 +1,1 @@\n-edited by hand\n+second\n`],
  ], 'the audit run is a finding');

  // A relay that keeps a policy cache and lies about it (served from its cache for an hour).
  const evil = await startProgram(BIN.relayd, ['--config', join(dir, 'relay-caching.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'evil'), '--upstream', server.url, '--log-level', 'warn']);
  t.teardown(() => evil.stop());
  t.equal((await agent('agent-b', [], evil.url)).code, 0, 'node b fills the relay cache');
  t.equal(await readFile(target, 'utf8'), 'second\n', 'node b repaired the shared file');
  t.equal((await agent('agent-a', [], evil.url)).code, 0, 'node a fills the relay cache');
  const cacheDir = join(dir, 'evil', 'cache', 'policies');
  t.same((await readdir(cacheDir)).sort(), [`${idA}.json`, `${idB}.json`].sort());

  // One byte of the signed policy altered (and a new ETag, so the agent's copy does not match).
  const cachedA = JSON.parse(await readFile(join(cacheDir, `${idA}.json`), 'utf8'));
  const signed = JSON.parse(cachedA.body);
  const policy = Buffer.from(signed.policy, 'base64').toString('utf8').replace('second', 'sEcond');
  await writeFile(join(cacheDir, `${idA}.json`), JSON.stringify({ ...cachedA, etag: '"forged"', body: JSON.stringify({ ...signed, policy: Buffer.from(policy).toString('base64') }) }));
  await writeFile(target, 'second\n');
  const refused = await agent('agent-a', [], evil.url);
  t.equal(refused.code, 4, 'a run with an error exits 4');
  t.match(refused.stdout, /1 errors/);
  t.equal(await readFile(target, 'utf8'), 'second\n', 'the forged content was not applied');
  // An error of the node in its compliance (expected self-check component), not an unexpected report.
  const refusal = await waitFor(async () => {
    const c = (await api('GET', `/api/1/nodes/${idA}/compliance`)).json.data;
    return c.components.some((x: { component: string; outcome: string }) => x.component === 'Policy' && x.outcome === 'result_error') ? c : undefined;
  }, 'the refusal in compliance');
  t.match(refusal.components.find((x: { component: string }) => x.component === 'Policy'), { rule_id: 'capstan-agent', directive_id: 'agent-self-check', state: 'error' });
  t.match(refusal.summary.counts, { error: 1, unexpected: 0 });
  t.match(byDirectiveOf(refusal, 'agent-self-check'), { counts: { error: 1, success: 2 } });

  // Node b's (validly signed) bundle served to node a: refused too, for the node id.
  const cachedB = JSON.parse(await readFile(join(cacheDir, `${idB}.json`), 'utf8'));
  await writeFile(join(cacheDir, `${idA}.json`), JSON.stringify({ ...cachedB, etag: '"forged-2"' }));
  const runs = (await api('GET', `/api/1/nodes/${idA}/runs`)).json.total;
  const mismatch = await agent('agent-a', [], evil.url);
  t.equal(mismatch.code, 4);
  const latest = await waitFor(async () => {
    const r = (await api('GET', `/api/1/nodes/${idA}/runs?reports=true&per_page=1`)).json;
    return r.total > runs ? r.data[0] : undefined;
  }, 'the mismatch run stored');
  const report = latest.reports.find((x: { component: string }) => x.component === 'Policy');
  t.match(report, { event_type: 'result_error', msg: /ERR_POLICY_NODE_MISMATCH/ });
  t.match(latest.reports.find((x: { directive_id: string }) => x.directive_id === 'managed')?.event_type, /result_success/, 'the last good policy still runs');

  // Back through the honest relay, the node is fine again.
  const healed = await agent('agent-a');
  t.equal(healed.code, 0);
  t.match(healed.stdout, new RegExp(`config ${config2}: 0 repaired, 0 errors`));
});
