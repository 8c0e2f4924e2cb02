/**
 * Bootstrap run from the relay that hosts the node's provider, with the real programs and a real
 * OpenSSH server (test/helpers/sshd.ts): a relay registered with its certificate hosts a static
 * manager, claims the bootstrap tasks of its nodes from the server with their secrets sealed to
 * its key, fetches the agent package from the server, runs the SSH steps against sshd on
 * loopback and reports them back; the server records them in the job, pins a first-use host key
 * the relay reports, and waits for the agent's enrolment, which comes through the relay.
 *
 * Covered: a refused key from the relay (auth_refused, the host key pinned by the relay's report),
 * a static host bootstrapped from the relay (task relay = the relay, agent.toml naming the relay,
 * enrolled through it into the same row: has_agent), a changed host key checked by the relay
 * against the pin the server sent (host_key_changed, the pin kept), and the relay-facing routes
 * refusing another relay's token.
 */
import { existsSync, readdirSync } from 'node:fs';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { userInfo } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, registerRelay, requiredInCi, runProgram, startProgram, waitFor, programDir } from '../helpers/programs.js';
import {
  authorizeKey, buildAgentPackage, freePort, makeDpkgRoot, makeSshKeys, sshdSkipReason, sshFingerprintOf, startSshd,
} from '../helpers/sshd.js';

t.setTimeout(120_000);

// In CI the machine is prepared by .ci/run: there a missing sshd fails instead of skipping.
const why = requiredInCi((await sshdSkipReason()) ?? false) || undefined;
if (why !== undefined) {
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  await t.test('bootstrap from the relay that hosts the node\'s provider', async (t) => {
    const work = programDir(t);
    const keys = join(work, 'keys');
    await makeSshKeys(keys, ['host_a', 'host_b', 'client', 'stranger']);
    const authorized = await authorizeKey(keys, join(keys, 'client.pub'));
    const packages = join(work, 'packages');
    const root = join(work, 'node-root');
    // The package build (~15 s) goes on while the programs start; the first job waits for it.
    const built = buildAgentPackage(packages);
    built.catch(() => undefined);
    await makeDpkgRoot(root);
    const port = await freePort();
    let sshd = await startSshd(t, work, port, join(keys, 'host_a'), authorized);

    // The server holds the package and the credentials; it runs no SSH for the relay's nodes.
    const sdir = join(work, 'server');
    await mkdir(sdir);
    await writeFile(join(sdir, 'server.toml'), [
      '[jobs]', 'sweep_interval = "200ms"',
      '[bootstrap]', `package_dir = ${JSON.stringify(packages)}`, `install_root = ${JSON.stringify(root)}`,
      'sudo = ""', 'start_command = ""', 'enrol_poll = "100ms"', 'enrol_timeout = "60s"', 'connect_timeout = "10s"', '',
    ].join('\n'));
    const server = await startProgram(BIN.server, ['serve', '-c', join(sdir, 'server.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(sdir, 'data'), '--log-level', 'warn']);
    t.teardown(() => server.stop());
    const api = adminClient(server.url, (await readFile(join(sdir, 'data', 'admin.token'), 'utf8')).trim());

    // The relay: registered with its certificate, hosting providers and running bootstrap.
    await writeFile(join(work, 'relay.toml'), [
      '[general]', 'node_id = "relay-lab"',
      '[providers]', 'enabled = true', 'refresh_interval = "200ms"',
      '[bootstrap]', 'enabled = true', 'poll_interval = "200ms"', '',
    ].join('\n'));
    const relayArgs = ['--config', join(work, 'relay.toml'), '--spool-dir', join(work, 'relay'), '--upstream', server.url];
    await registerRelay(api, relayArgs);
    const relay = await startProgram(BIN.relayd, [...relayArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
    t.teardown(() => relay.stop());

    const hosts = [
      { hostname: 'web1.lab', address: '127.0.0.1', tags: { env: 'lab' } },
      { hostname: 'web2.lab', address: '127.0.0.1', tags: { env: 'lab' } },
    ];
    t.equal((await api('POST', '/api/1/managers', { id: 'lab', type: 'static', provider: 'relay-lab', poll_interval: '1s', config: { hosts } })).status, 201);
    const nodes = async () => (await api('GET', `/api/1/nodes?per_page=100&sort=hostname&filter=${encodeURIComponent(JSON.stringify({ key: 'managed_by', values: ['lab'] }))}`)).json.data as Array<Record<string, any>>;
    const [web1, web2] = await waitFor(async () => {
      const l = await nodes();
      return l.length === 2 ? l : undefined;
    }, 'the relay to discover the static hosts');
    t.match(web1, { hostname: 'web1.lab', has_agent: false });

    const key = async (k: string) => readFile(join(keys, k), 'utf8');
    const user = userInfo().username;
    t.equal((await api('POST', '/api/1/credentials', { id: 'lab-key', user, port, private_key: await key('client'), selectors: ['manager:lab'] })).status, 201);
    t.equal((await api('POST', '/api/1/credentials', { id: 'stranger', user, port, private_key: await key('stranger'), selectors: ['node:nowhere'] })).status, 201);

    await built;
    const job = async (body: Record<string, unknown>) => {
      const r = await api('POST', '/api/1/jobs', { name: 'from the relay', type: 'bootstrap', relay_url: server.url, timeout: '5m', ...body });
      if (r.status !== 201) throw new Error(`job: ${r.status} ${JSON.stringify(r.json)}`);
      return r.json.data.id as string;
    };
    const task = async (j: string, n: string) => (await api('GET', `/api/1/jobs/${j}/tasks/${n}`)).json.data;
    const final = (j: string, n: string) => waitFor(async () => {
      const x = await task(j, n);
      return ['done', 'failed', 'aborted'].includes(x.state) ? x : undefined;
    }, `task ${n} of job ${j} to end`, 60_000);
    const hostA = await sshFingerprintOf(join(keys, 'host_a.pub'));

    await t.test('a refused key stops with auth_refused; the relay\'s first-use host key is pinned', async (t) => {
      const j = await job({ nodes: [web2.id], credential: 'stranger' });
      t.match(await final(j, web2.id), { state: 'failed', reason: 'auth_refused', step: 'connect', relay: 'relay-lab', message: /^ERR_BOOTSTRAP_AUTH/ });
      t.match((await api('GET', `/api/1/nodes/${web2.id}/host-key`)).json.data, { algorithm: 'ssh-ed25519', fingerprint: hostA, job_id: j }, 'pinned by the server from the relay\'s report');
      const history = (await task(j, web2.id)).transitions as Array<{ to: string; reason: string; message: string }>;
      t.match(history.map((h) => h.to), ['pending', 'scheduled', 'in_progress', 'failed'], 'the same state machine as server-run tasks');
      t.match(history[1], { message: 'handed to relay relay-lab' });
    });

    await t.test('a static host is bootstrapped from the relay and enrols through it into the same row', async (t) => {
      const j = await job({ nodes: [web1.id] });
      await waitFor(async () => {
        const x = await task(j, web1.id);
        if (x.state === 'failed') throw new Error(JSON.stringify(x));
        return x.step === 'enrol' ? x : undefined;
      }, 'the enrol step', 60_000);
      t.match(await task(j, web1.id), { state: 'in_progress', relay: 'relay-lab' }, 'the relay ran the SSH steps');
      const conf = await readFile(join(root, 'etc/capstan/agent.toml'), 'utf8');
      t.match(conf, `relay = ${JSON.stringify(relay.url)}`, 'the agent talks to the relay that installed it');
      t.match(conf, /enrollment_secret = "[A-Za-z0-9_-]{32}"/);
      const fetched = readdirSync(join(work, 'relay', 'bootstrap-packages'));
      t.match(fetched, [/^capstan-agent-[0-9a-f]{64}\.deb$/], 'the relay fetched the package from the server, kept by its sha256');
      const agent = join(root, 'usr/lib/capstan/agent/dist/cli.js');
      t.ok(existsSync(agent), 'dpkg installed the agent into the node\'s root');
      const run = () => runProgram(agent, ['run', '-c', join(root, 'etc/capstan/agent.toml'), '--log-level', 'warn']);
      // Through a relay the inventory reaches the server after the run's first identity request:
      // the first run may end waiting for acceptance (5) while the secret is being used.
      const first = await run();
      t.ok(first.code === 0 || first.code === 5, `first agent run through the relay (exit ${first.code}: ${first.stderr})`);
      const agentId = (await readFile(join(root, 'var/lib/capstan/agent/node-id'), 'utf8')).trim();
      t.match(await final(j, web1.id), { state: 'done', reason: 'completed', step: 'done', relay: 'relay-lab', message: `enrolled as node ${agentId}` });
      const row = (await nodes()).find((n) => n.source_id === web1.source_id)!;
      t.match(row, { id: agentId, source_id: web1.source_id, managers: ['lab'], has_agent: true, accepted: 'accepted' }, 'one node, one row');
      t.equal((await nodes()).length, 2, 'no second node');
      const second = await run();
      t.equal(second.code, 0, `accepted: the next run goes through (${second.stderr})`);
      const reported = await waitFor(async () => {
        const n = (await api('GET', `/api/1/nodes/${agentId}`)).json.data;
        return n.last_run_at ? n : undefined;
      }, 'a run of the bootstrapped agent, through the relay');
      t.match(reported, { status: 'reachable', accepted: 'accepted' });
    });

    await t.test('a changed host key, checked by the relay against the server\'s pin, stops with its code', async (t) => {
      await sshd.stop();
      sshd = await startSshd(t, work, port, join(keys, 'host_b'), authorized);
      const j = await job({ nodes: [web2.id] });
      t.match(await final(j, web2.id), { state: 'failed', reason: 'host_key_changed', step: 'connect', relay: 'relay-lab', message: /^ERR_BOOTSTRAP_HOST_KEY_CHANGED/ });
      t.match((await api('GET', `/api/1/nodes/${web2.id}/host-key`)).json.data, { fingerprint: hostA }, 'the pin stays');
    });

    await t.test('the relay-facing routes answer only the relay the path names, with its token', async (t) => {
      const token = (await readFile(join(work, 'relay', 'relay.token'), 'utf8')).trim();
      const claim = (relayId: string, headers: Record<string, string>) => fetch(`${server.url}/relay-api/1/bootstrap/${relayId}/claim`, {
        method: 'POST', headers: { 'content-type': 'application/json', ...headers }, body: JSON.stringify({ limit: 1 }),
      });
      t.equal((await claim('relay-lab', {})).status, 401, 'no token');
      t.equal((await claim('other-relay', { authorization: `Bearer ${token}` })).status, 403, 'another relay\'s path');
      const ok = await claim('relay-lab', { authorization: `Bearer ${token}` });
      t.same(await ok.json(), { data: [] }, 'nothing pending');
      const event = await fetch(`${server.url}/relay-api/1/bootstrap/relay-lab/tasks/nope/${web2.id}`, {
        method: 'POST', headers: { 'content-type': 'application/json', authorization: `Bearer ${token}` }, body: JSON.stringify({ step: 'connect', message: 'x' }),
      });
      t.match({ status: event.status, body: await event.json() }, { status: 404, body: { error: { code: 'ERR_NOT_FOUND' } } }, 'not a task of this relay');
    });
  });
}
