/**
 * Bootstrap over SSH with the real programs and a real OpenSSH server: Debian's sshd, started
 * here as `sshd -D -f <config>` on a loopback port with a throwaway host key, logging in as the
 * current user with an AuthorizedKeysFile in the test's directory. The install over SSH is the
 * real one (dpkg -i of the agent package `npm run package` builds), pointed at a temporary dpkg
 * root ([bootstrap] install_root); the test then starts the installed agent itself where systemd
 * would (start_command = ""). Nothing outside the temporary directories changes.
 *
 * Covered: credentials (metadata only, selectors, ambiguity), a wrong key (auth_refused), a static host
 * bootstrapped, enrolled by the job's secret and joining its discovered row (has_agent, accepted,
 * reporting), a changed host key (host_key_changed, then the pin cleared), a missing sudo (no_sudo),
 * an agent that never reports (enrol_timeout).
 */
import { existsSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { adminClient, BIN, requiredInCi, runProgram, startProgram, waitFor, programDir } from '../helpers/programs.js';
import { authorizeKey, buildAgentPackage, freePort, makeDpkgRoot, makeSshKeys, sh, sshdSkipReason, startSshd } from '../helpers/sshd.js';

t.setTimeout(300_000);

// In CI the machine is prepared by .ci/run: there a missing sshd fails instead of skipping.
const why = requiredInCi((await sshdSkipReason()) ?? false) || undefined;
if (why !== undefined) {
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  await bootstrapTests();
}

async function bootstrapTests(): Promise<void> {
  await t.test('bootstrap over SSH against a real sshd', async (t) => run(t));
}

async function run(t: Test): Promise<void> {
  // sshd and the servers live as long as this test, whichever subtest starts them.
  const outer = t;
  const work = programDir(t);
  const keys = join(work, 'keys');
  // The agent package, as `npm run package` builds it, in the server's package folder (read at
  // each job's verify step, not at the server's start).
  const packages = join(work, 'packages');
  // A throwaway dpkg root on the "node"; the enrol_timeout test installs into one of its own, as
  // it runs beside the test that installs a second agent into the first.
  const root = join(work, 'node-root');
  const enrolRoot = join(work, 'node-root-enrol');

  /** A server whose [bootstrap] installs into `installRoot` with `sudo` (root logs in: none needed). */
  async function server(name: string, sudo: string, enrolTimeout = '90s', installRoot = root) {
    const dir = join(work, name);
    await mkdir(dir);
    const cfg = join(dir, 'server.toml');
    await writeFile(cfg, [
      '[jobs]', 'sweep_interval = "200ms"',
      '[bootstrap]', `package_dir = ${JSON.stringify(packages)}`, `install_root = ${JSON.stringify(installRoot)}`,
      `sudo = ${JSON.stringify(sudo)}`, 'start_command = ""', 'enrol_poll = "100ms"', `enrol_timeout = "${enrolTimeout}"`, 'connect_timeout = "10s"', '',
    ].join('\n'));
    // Servers start beside other work here: a longer bound for the ready line than one start alone needs.
    const s = await startProgram(BIN.server, ['serve', '-c', cfg, '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'data'), '--log-level', 'warn'], 60_000);
    outer.teardown(() => s.stop());
    const token = (await readFile(join(dir, 'data', 'admin.token'), 'utf8')).trim();
    const api = adminClient(s.url, token);
    return { url: s.url, api, dir };
  }

  // What the tests need is made at once rather than one after the other: the key pairs, the
  // package, the dpkg roots and the server.
  const [, , , , main] = await Promise.all([
    makeSshKeys(keys, ['host_a', 'host_b', 'client', 'stranger']),
    buildAgentPackage(packages),
    makeDpkgRoot(root),
    makeDpkgRoot(enrolRoot),
    server('server', ''),
  ]);
  const authorized = await authorizeKey(keys, join(keys, 'client.pub'));
  const port = await freePort();
  const sshd = await startSshd(t, work, port, join(keys, 'host_a'), authorized);

  const { url, api } = main;
  const key = async (k: string) => readFile(join(keys, k), 'utf8');
  const hosts = [
    { hostname: 'web1.lab', address: '127.0.0.1', tags: { env: 'lab', role: 'web' } },
    { hostname: 'web2.lab', address: '127.0.0.1', tags: { env: 'lab', role: 'web' } },
  ];
  t.equal((await api('POST', '/api/1/managers', { id: 'lab', type: 'static', config: { hosts } })).status, 201);
  t.equal((await api('POST', '/api/1/managers/lab/poll')).status, 200);
  const nodes = async () => (await api('GET', `/api/1/nodes?per_page=100&sort=hostname&filter=${encodeURIComponent(JSON.stringify({ key: 'managed_by', values: ['lab'] }))}`)).json.data as Array<Record<string, any>>;
  const [web1, web2] = await nodes();
  t.match(web1, { hostname: 'web1.lab', address: '127.0.0.1', has_agent: false });

  async function bootstrapJob(body: Record<string, unknown>) {
    const r = await api('POST', '/api/1/jobs', { name: 'bootstrap', type: 'bootstrap', relay_url: url, timeout: '5m', ...body });
    if (r.status !== 201) throw new Error(`job: ${r.status} ${JSON.stringify(r.json)}`);
    return r.json.data.id as string;
  }
  const task = async (job: string, node: string) => (await api('GET', `/api/1/jobs/${job}/tasks/${node}`)).json.data;
  const finalTask = (job: string, node: string) => waitFor(async () => {
    const x = await task(job, node);
    return ['done', 'failed', 'aborted'].includes(x.state) ? x : undefined;
  }, `task ${node} of job ${job} to end`, 120_000);

  await t.test('credentials: sealed, shown as metadata only, checked with codes', async (t) => {
    const bad = await api('POST', '/api/1/credentials', { id: 'x', user: 'root', private_key: 'not a key', selectors: ['*'] });
    t.match(bad, { status: 400, json: { error: { code: 'ERR_CREDENTIAL_INVALID' } } });
    const badSel = await api('POST', '/api/1/credentials', { id: 'x', user: 'root', password: 'pw', selectors: ['env=prod'] });
    t.match(badSel, { status: 400, json: { error: { code: 'ERR_CREDENTIAL_INVALID' } } });
    const stranger = await api('POST', '/api/1/credentials', { id: 'stranger', user: userInfo().username, port, private_key: await key('stranger'), selectors: ['tag:role=web'] });
    t.equal(stranger.status, 201);
    const fp = (await sh('ssh-keygen', ['-l', '-E', 'sha256', '-f', join(keys, 'stranger.pub')])).stdout.split(' ')[1];
    t.same(Object.keys(stranger.json.data).sort(), ['created_at', 'fingerprint', 'has_password', 'id', 'port', 'selectors', 'user']);
    t.equal(stranger.json.data.fingerprint, fp, 'the public key\'s fingerprint, as ssh-keygen -l prints it');
    const listed = JSON.stringify((await api('GET', '/api/1/credentials')).json);
    t.notMatch(listed, /PRIVATE KEY/, 'no key in the listing');
    t.equal((await api('POST', '/api/1/credentials', { id: 'stranger', user: 'root', password: 'pw', selectors: ['*'] })).json.error.code, 'ERR_CONFLICT');
  });

  await t.test('two credentials equally specific are ambiguous; a named credential must exist', async (t) => {
    // "stranger" matches web1 by tag:role=web; this one by tag:env=lab: the same level.
    t.equal((await api('POST', '/api/1/credentials', { id: 'dup', user: 'root', password: 'not-used-here', selectors: ['tag:env=lab'] })).status, 201);
    const job = await bootstrapJob({ nodes: [web1.id] });
    t.match(await finalTask(job, web1.id), { state: 'failed', reason: 'ambiguous_credential', message: /^ERR_CREDENTIAL_AMBIGUOUS: credentials dup, stranger/ });
    const named = await bootstrapJob({ nodes: [web1.id], credential: 'nope' });
    t.match(await finalTask(named, web1.id), { state: 'failed', reason: 'no_credential', message: /^ERR_CREDENTIAL_UNKNOWN/ });
    t.equal((await api('DELETE', '/api/1/credentials/dup')).status, 204);
    t.match(await api('GET', `/api/1/nodes/${web1.id}/host-key`), { status: 404 }, 'no connection was made');
  });

  await t.test('a key the host does not accept stops with auth_refused (and pins the host key)', async (t) => {
    const job = await bootstrapJob({ nodes: [web1.id, web2.id] });
    for (const n of [web1, web2]) {
      const x = await finalTask(job, n.id);
      t.match(x, { state: 'failed', reason: 'auth_refused', step: 'connect', message: /^ERR_BOOTSTRAP_AUTH/ });
    }
    const pin = (await api('GET', `/api/1/nodes/${web2.id}/host-key`)).json.data;
    const fp = (await sh('ssh-keygen', ['-l', '-E', 'sha256', '-f', join(keys, 'host_a.pub')])).stdout.split(' ')[1];
    t.match(pin, { node_id: web2.id, algorithm: 'ssh-ed25519', fingerprint: fp, job_id: job }, 'pinned on first use');
    t.equal((await api('DELETE', '/api/1/credentials/stranger')).status, 204);
  });

  await t.test('a static host is bootstrapped: its agent enrols by the job\'s secret into the same row and reports', async (t) => {
    // Two credentials match web1: the tag is more specific than the manager, so "lab-key" wins.
    t.equal((await api('POST', '/api/1/credentials', { id: 'lab-key', user: userInfo().username, port, private_key: await key('client'), selectors: ['tag:env=lab'] })).status, 201);
    t.equal((await api('POST', '/api/1/credentials', { id: 'any-lab', user: userInfo().username, port, private_key: await key('stranger'), selectors: ['manager:lab'] })).status, 201);
    const job = await bootstrapJob({ filters: [{ key: 'hostname', values: ['web1.lab'] }] });
    // The enrol step waits for the agent's first inventory: start the installed agent as systemd would.
    await waitFor(async () => ((await task(job, web1.id)).step === 'enrol' ? true : (await task(job, web1.id)).state === 'failed' ? Promise.reject(new Error(JSON.stringify(await task(job, web1.id)))) : undefined), 'the enrol step', 120_000);
    const conf = await readFile(join(root, 'etc/capstan/agent.toml'), 'utf8');
    t.match(conf, `relay = ${JSON.stringify(url)}`, 'the agent reports to the job\'s relay');
    t.match(conf, /enrollment_secret = "[A-Za-z0-9_-]{32}"/, 'with the task\'s own secret');
    t.match(conf, /\[policy\]\n(#.*\n)?public_key_pem = "-----BEGIN PUBLIC KEY-----/, 'and the server\'s policy key pinned');
    const agent = join(root, 'usr/lib/capstan/agent/dist/cli.js');
    t.ok(existsSync(agent), 'dpkg installed the agent into the node\'s root');
    const run = () => runProgram(agent, ['run', '-c', join(root, 'etc/capstan/agent.toml'), '--log-level', 'warn']);
    const first = await run();
    t.equal(first.code, 0, `first agent run (${first.stderr})`);
    const done = await finalTask(job, web1.id);
    const agentId = (await readFile(join(root, 'var/lib/capstan/agent/node-id'), 'utf8')).trim();
    t.match(done, { state: 'done', reason: 'completed', step: 'done', message: `enrolled as node ${agentId}` });
    const row = (await nodes()).find((n) => n.source_id === web1.source_id)!;
    t.match(row, { id: agentId, source_id: web1.source_id, managers: ['lab'], has_agent: true, accepted: 'accepted', tags: { env: 'lab' } }, 'one node, one row');
    t.equal((await nodes()).length, 2, 'no second node');
    t.equal((await api('GET', `/api/1/nodes/${web1.id}`)).status, 404, 'the discovered id became the agent\'s');
    const second = await run();
    t.equal(second.code, 0, `second agent run (${second.stderr})`);
    const reported = await waitFor(async () => {
      const n = (await api('GET', `/api/1/nodes/${agentId}`)).json.data;
      return n.last_run_at ? n : undefined;
    }, 'a run of the bootstrapped agent');
    t.match(reported, { status: 'reachable' });
    t.equal((await api('GET', `/api/1/nodes/${agentId}/host-key`)).json.data.fingerprint, (await api('GET', `/api/1/nodes/${web2.id}/host-key`)).json.data.fingerprint, 'the pin moved with the row');
    // A node with an agent is never bootstrapped again.
    const again = await bootstrapJob({ nodes: [agentId] });
    t.match((await api('GET', `/api/1/jobs/${again}`)).json.data.tasks[0], { state: 'failed', reason: 'has_agent' });
  });

  // From here sshd presents another host key. The last three tests run at once: the no_sudo and
  // enrol_timeout ones have a server (and so pins) of their own each, and the two that install
  // have a dpkg root each.
  // The servers of the last two start meanwhile.
  const sudoless = server('server-sudo', join(work, 'no-such-dir', 'sudo') + ' -n');
  const enrolling = server('server-enrol', '', '1s', enrolRoot);
  for (const p of [sudoless, enrolling]) p.catch(() => undefined); // awaited in their tests
  await sshd.stop();
  await startSshd(outer, work, port, join(keys, 'host_b'), authorized);
  t.jobs = 3;
  const changedKey = t.test('a changed host key stops the node until an admin clears the pin', async (t) => {
    const job = await bootstrapJob({ nodes: [web2.id] });
    t.match(await finalTask(job, web2.id), { state: 'failed', reason: 'host_key_changed', message: /^ERR_BOOTSTRAP_HOST_KEY_CHANGED/ });
    t.match((await api('GET', `/api/1/nodes/${web2.id}/host-key`)).json.data, { job_id: /./ }, 'the old pin stays');
    const dataDir = join(work, 'server', 'data');
    // The CLI reads the ended task and clears the pin at once (two programs started together).
    const [shown, cli] = await Promise.all([
      runProgram(BIN.server, ['jobs', 'show', job, '--data-dir', dataDir, '--json']),
      runProgram(BIN.server, ['nodes', 'clear-host-key', web2.id, '--data-dir', dataDir]),
    ]);
    t.match(JSON.parse(shown.stdout).data.tasks, [{ node_id: web2.id, state: 'failed', step: 'connect', reason: 'host_key_changed' }], 'the CLI shows the progress');
    t.equal(cli.code, 0, `capstan-server nodes clear-host-key (${cli.stderr})`);
    t.match(await api('GET', `/api/1/nodes/${web2.id}/host-key`), { status: 404 });

    // Cleared: the next bootstrap pins the new key and goes through (a second agent on the host).
    const retry = await bootstrapJob({ nodes: [web2.id] });
    await waitFor(async () => {
      const x = await task(retry, web2.id);
      if (x.state === 'failed') throw new Error(JSON.stringify(x));
      return x.step === 'enrol' ? true : undefined;
    }, 'the enrol step after the pin was cleared', 120_000);
    const hostB = (await sh('ssh-keygen', ['-l', '-E', 'sha256', '-f', join(keys, 'host_b.pub')])).stdout.split(' ')[1];
    t.equal((await api('GET', `/api/1/nodes/${web2.id}/host-key`)).json.data.fingerprint, hostB, 'the new key is pinned');
    const state2 = join(work, 'agent2-state');
    const ran = await runProgram(join(root, 'usr/lib/capstan/agent/dist/cli.js'), ['run', '-c', join(root, 'etc/capstan/agent.toml'), '--state-dir', state2, '--log-level', 'warn']);
    t.equal(ran.code, 0, `second host's agent run (${ran.stderr})`);
    const id2 = (await readFile(join(state2, 'node-id'), 'utf8')).trim();
    t.match(await finalTask(retry, web2.id), { state: 'done', message: `enrolled as node ${id2}` });
    t.match((await nodes()).find((n) => n.source_id === web2.source_id), { id: id2, has_agent: true, accepted: 'accepted' });
  });

  const noSudo = t.test('a host without sudo stops with no_sudo', async (t) => {
    const b = await sudoless;
    t.equal((await b.api('POST', '/api/1/managers', { id: 'lab', type: 'static', config: { hosts: [{ hostname: 'db1.lab', address: '127.0.0.1' }] } })).status, 201);
    t.equal((await b.api('POST', '/api/1/managers/lab/poll')).status, 200);
    t.equal((await b.api('POST', '/api/1/credentials', { id: 'k', user: userInfo().username, port, private_key: await key('client'), selectors: ['*'] })).status, 201);
    const r = await b.api('POST', '/api/1/jobs', { name: 'b', type: 'bootstrap', relay_url: b.url, filters: [{ key: 'managed_by', values: ['lab'] }] });
    t.equal(r.status, 201);
    const id = r.json.data.id as string;
    const n = (await b.api('GET', `/api/1/jobs/${id}`)).json.data.tasks[0].node_id as string;
    const x = await waitFor(async () => {
      const y = (await b.api('GET', `/api/1/jobs/${id}/tasks/${n}`)).json.data;
      return y.state === 'failed' || y.state === 'done' ? y : undefined;
    }, 'the task to end', 60_000);
    t.match(x, { state: 'failed', reason: 'no_sudo', step: 'verify', message: /^ERR_BOOTSTRAP_NO_SUDO/ });
  });

  const enrolTimeout = t.test('an installed agent that never reports stops with enrol_timeout', async (t) => {
    // Nobody starts the agent this time (start_command = ""): the enrol step gives up.
    const c = await enrolling;
    t.equal((await c.api('POST', '/api/1/managers', { id: 'lab', type: 'static', config: { hosts: [{ hostname: 'app1.lab', address: '127.0.0.1' }] } })).status, 201);
    t.equal((await c.api('POST', '/api/1/managers/lab/poll')).status, 200);
    t.equal((await c.api('POST', '/api/1/credentials', { id: 'k', user: userInfo().username, port, private_key: await key('client'), selectors: ['*'] })).status, 201);
    const r = await c.api('POST', '/api/1/jobs', { name: 'c', type: 'bootstrap', relay_url: c.url, filters: [{ key: 'managed_by', values: ['lab'] }] });
    t.equal(r.status, 201);
    const id = r.json.data.id as string;
    const n = (await c.api('GET', `/api/1/jobs/${id}`)).json.data.tasks[0].node_id as string;
    const x = await waitFor(async () => {
      const y = (await c.api('GET', `/api/1/jobs/${id}/tasks/${n}`)).json.data;
      return y.state === 'failed' || y.state === 'done' ? y : undefined;
    }, 'the task to end', 120_000);
    t.match(x, { state: 'failed', reason: 'enrol_timeout', step: 'enrol', message: /^ERR_BOOTSTRAP_ENROL_TIMEOUT/ });
    t.match((await c.api('GET', '/api/1/nodes')).json.data, [{ has_agent: false }], 'the row is untouched');
  });
  await Promise.all([changedKey, noSudo, enrolTimeout]);
}
