/**
 * The policy example examples/baseline, as an admin uses it: `capstan policy apply -f
 * examples/baseline` through the real CLI against a real server, then a real agent run inside a
 * throwaway root (test/helpers/root.ts) against that server. The first run repairs; the second
 * changes nothing and the server counts the node 100 % compliant; the site group's values, the
 * global property's and the secret's are in the root's files; the secret is in no bundle, run
 * log or change as plain text. Nothing outside the temporary directories changes.
 *
 * Two things a root cannot do are given to the node the way an admin would: its properties
 * (location, role, and `web_package` naming a package the image holds, as the root has no network to
 * install nginx from), and an agent configuration whose `sysctl_root` is a directory of the root
 * (its /proc/sys is read-only, and the host's kernel is not the test's to change).
 */
import { readdir, readFile } from 'node:fs/promises';
import { existsSync } from 'node:fs';
import { join, resolve } from 'node:path';
import t from 'tap';
import { ROOT, programDir, runProgram, startServer, waitFor } from '../helpers/programs.js';
import { rootSkipReason, throwawayRoot } from '../helpers/root.js';

t.setTimeout(240_000);

const EXAMPLE = resolve(ROOT, 'examples/baseline');
const CAPSTAN = resolve(ROOT, 'server/dist/admin-cli/cli.js');
const SECRET = 'mon-7d41c9e2b8a05f36-never-in-clear';
const SYS = '/var/lib/capstan-e2e/sys';

/** The sysctl keys the example sets, and their values, read from its directive files. */
async function exampleSysctls(): Promise<Array<{ key: string; value: string }>> {
  const out: Array<{ key: string; value: string }> = [];
  for (const f of (await readdir(join(EXAMPLE, 'directives'))).filter((n) => n.startsWith('sysctl-')).sort()) {
    const d = JSON.parse(await readFile(join(EXAMPLE, 'directives', f), 'utf8')) as { params: { settings: Array<{ key: string; value: string }> } };
    out.push(...d.params.settings);
  }
  return out;
}

const why = await rootSkipReason({ network: 'host' });
t.test('examples/baseline applied with the CLI, run by an agent in a root: repaired once, then 100 % compliant', { skip: why }, async (t) => {
  const dir = programDir(t);
  const { server, token, api } = await startServer(t, join(dir, 'server'));
  const env = { PATH: process.env.PATH ?? '', HOME: '/nonexistent', CAPSTAN_URL: server.url, CAPSTAN_TOKEN: token };
  const cli = async (...args: string[]) => {
    const r = await runProgram(CAPSTAN, args, 60_000, env);
    t.equal(r.code, 0, `capstan ${args.slice(0, 2).join(' ')}: ${r.stderr}`);
    return r.stdout;
  };

  // The host's own copies of what the example writes: the same bytes (or as absent) at the end.
  const HOST_FILES = ['/etc/motd', '/etc/resolv.conf', '/etc/ssh/sshd_config', '/etc/login.defs', '/etc/passwd', '/etc/issue.net'];
  const hostBefore = await Promise.all(HOST_FILES.map((f) => readFile(f, 'utf8').catch(() => null)));
  const root = await throwawayRoot(t, { network: 'host' });
  const sysctls = await exampleSysctls();
  t.ok(sysctls.length >= 10, 'the example sets kernel parameters');
  // A sysctl tree of the root's own, each key off its wanted value, for the first run to repair.
  const setup = [`mkdir -p /etc/capstan-e2e`, `printf '[methods]\\nsysctl_root = "${SYS}"\\n' > /etc/capstan-e2e/agent.toml`,
    ...sysctls.map(({ key, value }) => {
      const path = `${SYS}/${key.split('.').join('/')}`;
      return `mkdir -p "$(dirname ${path})" && echo ${value === '0' ? '1' : '0'} > ${path}`;
    })];
  t.equal((await root.sh(setup.join(' && '))).code, 0, 'the root\'s agent configuration and sysctl tree');
  const run = () => root.agent(['run', '--config', '/etc/capstan-e2e/agent.toml', '--relay', server.url, '--state-dir', '/var/lib/capstan/agent', '--log-level', 'error']);

  t.equal((await run()).code, 5, 'the first run waits for acceptance');
  const id = (await root.exec('cat', ['/var/lib/capstan/agent/node-id'])).stdout.trim();
  await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.data?.some((n: { id: string }) => n.id === id) ? true : undefined), 'the pending node');
  await cli('nodes', 'accept', id);
  t.equal((await api('PUT', `/api/1/nodes/${id}/properties`, { location: 'paris', role: 'web', web_package: 'coreutils' })).status, 200, 'the node\'s own properties');

  // The secret is set outside the files (they hold only `secret = true`), then the files applied.
  await cli('properties', 'set', 'monitoring_token', SECRET, '--secret');
  const plan = JSON.parse(await cli('--json', 'policy', 'diff', '-f', EXAMPLE)).data as { changes: Array<{ kind: string }>; nodes: Array<{ node_id: string; problem?: unknown }> };
  t.ok(plan.changes.filter((c) => c.kind === 'directive').length >= 30, 'at least 30 directives to create');
  t.same(plan.nodes.map((n) => n.node_id), [id], 'the node is the one the plan reaches');
  t.equal(plan.nodes[0]!.problem, undefined, 'its policy renders (no template or method problem)');
  t.notOk(JSON.stringify(plan).includes(SECRET), 'the plan shows no secret value');
  t.match(await cli('policy', 'apply', '-f', EXAMPLE), /applied \d+ changes; 1 nodes get a new policy/);
  t.match(await cli('policy', 'diff', '-f', EXAMPLE), /^no changes: the server matches the files/, 'apply made the server match the files');

  const effective = (await api('GET', `/api/1/nodes/${id}/properties/effective`)).json.data;
  t.match(effective, { properties: { site: { name: 'Paris', dns: ['10.10.0.2', '10.10.0.3'], contact: 'ops@example.com' }, web_package: 'coreutils' }, conflicts: [], problem: null });
  t.ok(['site-paris', 'role-web'].every((g) => effective.groups.includes(g)), `in its site and role groups (${effective.groups})`);

  const first = await run();
  t.equal(first.code, 0, `first run: ${first.stdout}${first.stderr}`);
  const repaired = Number(/(\d+) repaired, 0 errors/.exec(first.stdout)?.[1]);
  t.ok(repaired >= 30, `the first run repairs (${repaired} repaired)`);
  const second = await run();
  t.equal(second.code, 0, second.stderr);
  t.match(second.stdout, /\b0 repaired, 0 errors/, 'the second run changes nothing');
  t.notOk(`${first.stdout}${first.stderr}${second.stdout}${second.stderr}`.includes(SECRET), 'not in the agent\'s output');

  // At the server: two runs of the new config, 100 % compliance, changes from the first run only.
  const runs = await waitFor(async () => {
    const r = (await api('GET', `/api/1/nodes/${id}/runs?reports=true`)).json;
    return r.total >= 2 ? r.data as Array<{ id: string; config_id: string; reports: Array<{ event_type: string; directive_id: string; component: string; msg: string }> }> : undefined;
  }, 'both runs at the server');
  t.equal(runs[0]!.config_id, runs[1]!.config_id, 'both runs ran one policy');
  const failed = (r: { reports: Array<{ event_type: string; directive_id: string; component: string; msg: string }> }) =>
    r.reports.filter((x) => /error|noncompliant/.test(x.event_type)).map((x) => `${x.directive_id} ${x.component}: ${x.msg}`);
  t.same([...failed(runs[1]!), ...failed(runs[0]!)], [], 'no run reported an error');
  const compliance = await waitFor(async () => {
    const c = (await api('GET', `/api/1/nodes/${id}/compliance`)).json.data;
    return c?.compliance === 100 && c.time_state === null ? c : undefined;
  }, 'the node 100 % compliant');
  t.equal(String(compliance.run.id), String(runs[0]!.id), 'judged on the second run');
  t.match(compliance.summary.counts, { repaired: 0, error: 0, non_compliant: 0, missing: 0, unexpected: 0 }, 'the last run repaired nothing');
  t.ok(compliance.summary.counts.success >= 30, `${compliance.summary.counts.success} items kept by the second run`);
  const changes = (await api('GET', `/api/1/changes?node=${id}&per_page=1000`)).json;
  t.ok(changes.total >= repaired, `a change per repair (${changes.total})`);
  t.same([...new Set(changes.data.map((c: { run_id: string }) => c.run_id))], [runs[1]!.id], 'every change is the first run\'s');
  t.ok(changes.data.some((c: { directive_id: string }) => c.directive_id === 'monitoring-token'), 'the token file was a change');
  t.notOk(JSON.stringify(changes).includes(SECRET), 'no change holds the secret');
  t.notOk(JSON.stringify(runs).includes(SECRET), 'no run log holds the secret');

  // The bundle as the node received it (the agent's cache): the secret sealed, never in clear.
  const bundle = (await root.exec('cat', ['/var/lib/capstan/agent/policy.json'])).stdout;
  t.ok(bundle.length > 0 && !bundle.includes(SECRET), 'the server\'s bundle holds no plain secret');
  const cached = JSON.parse(bundle) as { policy?: string };
  // The signed form (`policy`: the bundle's bytes, base64) or the bundle itself.
  const policy = (typeof cached.policy === 'string' ? JSON.parse(Buffer.from(cached.policy, 'base64').toString('utf8')) : cached) as { secrets: Record<string, unknown>; properties: Record<string, unknown> };
  t.match(policy.secrets.monitoring_token, { alg: 'RSA-OAEP-256+A256GCM' });
  t.notOk('monitoring_token' in policy.properties, 'the secret is not among the bundle\'s properties');

  // The root's files: per-site values, the global property's, the technique's, the secret.
  const cat = async (path: string) => {
    const r = await root.sh(`cat ${path}`);
    t.equal(r.code, 0, `${path} exists in the root`);
    return r.stdout;
  };
  t.match(await cat('/etc/resolv.conf'), /^search par\.example\.com\nnameserver 10\.10\.0\.2\nnameserver 10\.10\.0\.3\n/m);
  t.match(await cat('/etc/systemd/timesyncd.conf.d/50-site.conf'), /^NTP=ntp1\.par\.example\.com ntp2\.par\.example\.com $/m);
  t.match(await cat('/etc/motd'), /Paris site \(par\.example\.com\)\nParis data centre.*\nProblems: ops@example\.com\n/);
  t.match(await cat('/etc/nginx/conf.d/www.conf'), /server_name www\.par\.example\.com;[\s\S]*resolver 10\.10\.0\.2 10\.10\.0\.3 valid/);
  t.match(await cat('/etc/nginx/conf.d/intranet.conf'), /listen 8080;/);
  t.match(await cat('/etc/ssh/sshd_config'), /^PermitRootLogin no$/m);
  t.match(await cat(`/etc/sysctl.d/60-sysctl-syncookies.conf`), /^net\.ipv4\.tcp_syncookies = 1$/m);
  t.equal((await cat(`${SYS}/net/ipv4/tcp_syncookies`)).trim(), '1');
  t.match((await root.exec('getent', ['passwd', 'alice'])).stdout, /^alice:x:2001:\d+:Alice Martin:/);
  t.match(await cat('/home/alice/.ssh/authorized_keys'), /alice@example\.com/);
  t.match(await cat('/etc/monitoring/agent.token'), new RegExp(`^token=${SECRET}\\nsite=Paris\\n`, 'm'), 'the secret opened on the node');
  t.match((await root.sh('stat -c %a /etc/monitoring/agent.token')).stdout, /^600\n/, 'root-only');

  // Nothing of it outside the root.
  t.notOk(existsSync('/etc/monitoring/agent.token'), 'the host has no token file');
  t.notMatch(await readFile('/etc/passwd', 'utf8'), /^alice:/m, 'the host has no user alice');
  t.same(await Promise.all(HOST_FILES.map((f) => readFile(f, 'utf8').catch(() => null))), hostBefore, 'the host\'s files are as they were');
});
