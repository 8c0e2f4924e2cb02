#!/usr/bin/env node
// `npm start`: a server, a relay and one agent on loopback with the embedded database. Registers the
// relay (it links to the server for jobs, with its own relay token), enrolls and accepts the agent,
// runs it, prints the curl commands that show the result, and keeps the server and relay running
// until Ctrl-C. State lives in ./.quickstart (delete it to start over).
//
// Options (`npm start -- --dir /tmp/qs --server-listen 127.0.0.1:0`):
//   --dir DIR               where the state lives (./.quickstart)
//   --server-listen ADDR    the server's address (127.0.0.1:3031; port 0 picks a free one)
//   --relay-listen ADDR     the relay's address (127.0.0.1:3030)
import { spawn, spawnSync } from 'node:child_process';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { resolve } from 'node:path';
import { createInterface } from 'node:readline';
import { parseArgs } from 'node:util';

const root = resolve(import.meta.dirname, '..');
/** @type {{ dir: string, 'server-listen': string, 'relay-listen': string }} */
let opts;
try {
  opts = parseArgs({
    options: {
      dir: { type: 'string', default: resolve(root, '.quickstart') },
      'server-listen': { type: 'string', default: '127.0.0.1:3031' },
      'relay-listen': { type: 'string', default: '127.0.0.1:3030' },
    },
  }).values;
} catch (err) {
  console.error(`quick start: ${err.message}\nusage: npm start -- [--dir DIR] [--server-listen ADDR] [--relay-listen ADDR]`);
  process.exit(2);
}
if (opts.dir === '' || opts['server-listen'] === '' || opts['relay-listen'] === '') {
  console.error('quick start: --dir, --server-listen and --relay-listen take a value\nusage: npm start -- [--dir DIR] [--server-listen ADDR] [--relay-listen ADDR]');
  process.exit(2);
}
const dir = resolve(opts.dir);
try {
  mkdirSync(dir, { recursive: true });
} catch (err) {
  console.error(`quick start: cannot make ${dir}: ${err.code ?? err.message}`);
  process.exit(1);
}
const bin = (p) => resolve(root, p, 'dist/cli.js');
const children = [];

function start(name, args) {
  return new Promise((res, rej) => {
    const proc = spawn(process.execPath, [bin(name), ...args], { stdio: ['ignore', 'pipe', 'inherit'] });
    children.push(proc);
    proc.once('exit', (code) => rej(new Error(`${name} exited with ${code}`)));
    createInterface({ input: proc.stdout }).on('line', (line) => {
      if (line.startsWith('{"ready":true')) res(JSON.parse(line).url);
    });
  });
}

function agent(args) {
  const r = spawnSync(process.execPath, [bin('agent'), ...args], { encoding: 'utf8' });
  process.stdout.write(r.stdout);
  // 5: the first run, waiting for acceptance (it says so on stdout).
  if (r.status !== 0 && r.status !== 5) process.stderr.write(r.stderr);
  return r;
}

async function api(base, token, method, path, body) {
  const res = await fetch(`${base}${path}`, {
    method,
    headers: { authorization: `Bearer ${token}`, ...(body ? { 'content-type': 'application/json' } : {}) },
    body: body ? JSON.stringify(body) : undefined,
  });
  return res.json();
}

/** Polls `probe` every 100 ms until it returns something truthy; gives up after 60 s, saying what it waited for. */
async function until(what, probe) {
  const end = Date.now() + 60_000;
  for (;;) {
    if (await probe()) return;
    if (Date.now() > end) throw new Error(`gave up waiting for ${what} after 60 s`);
    await new Promise((r) => setTimeout(r, 100));
  }
}

const stopAll = () => {
  for (const c of children) c.kill('SIGTERM');
};
for (const signal of ['SIGINT', 'SIGTERM', 'SIGHUP']) {
  process.on(signal, () => {
    stopAll();
    process.exit(0);
  });
}

try {
  const serverUrl = await start('server', ['serve', '--listen', opts['server-listen'], '--data-dir', resolve(dir, 'server'), '--log-level', 'warn']);
  const token = readFileSync(resolve(dir, 'server/admin.token'), 'utf8').trim();
  // The relay links to the server so that jobs reach the nodes behind it: what only a relay may
  // do, with its own token. An admin registers it as a relay with the certificate it made.
  const relayConf = resolve(dir, 'relayd.toml');
  writeFileSync(relayConf, '[remote_run]\nlink_upstream = true\n');
  const relayArgs = ['-c', relayConf, '--spool-dir', resolve(dir, 'relay'), '--upstream', serverUrl];
  const identity = spawnSync(process.execPath, [bin('relayd'), '--identity', ...relayArgs], { encoding: 'utf8' });
  if (identity.status !== 0) throw new Error(`capstan-relayd --identity: ${identity.stderr}`);
  const relay = JSON.parse(identity.stdout);
  const registered = await api(serverUrl, token, 'POST', '/api/1/nodes', { id: relay.node_id, hostname: 'localhost', certificate: relay.certificate, relay: true });
  if (!registered.data && registered.error?.code !== 'ERR_NODE_EXISTS') throw new Error(`registering the relay: ${JSON.stringify(registered)}`);
  console.log(`relay ${relay.node_id} is registered as a relay`);
  const relayUrl = await start('relayd', [...relayArgs, '--listen', opts['relay-listen'], '--log-level', 'warn']);
  const agentArgs = ['run', '--relay', relayUrl, '--state-dir', resolve(dir, 'agent'), '--log-level', 'warn'];

  console.log(`server ${serverUrl}, relay ${relayUrl}, data in ${dir}`);
  agent(agentArgs);
  const nodeId = readFileSync(resolve(dir, 'agent/node-id'), 'utf8').trim();
  await until('the node to reach the server', async () => (await api(serverUrl, token, 'GET', `/api/1/nodes/${nodeId}`)).data);
  const accepted = await api(serverUrl, token, 'POST', `/api/1/nodes/${nodeId}/accept`);
  console.log(`node ${nodeId} is ${accepted.data?.accepted ?? JSON.stringify(accepted)}`);
  // A first policy, as an admin would write it: one directive, a group with this node, a rule.
  const motd = resolve(dir, 'motd');
  await api(serverUrl, token, 'PUT', '/api/1/directives/quickstart-motd', { id: 'quickstart-motd', name: 'Quick start file', method: 'file_content', params: { path: motd, content: 'managed by Capstan\n' } })
    .then((r) => (r.error ? api(serverUrl, token, 'POST', '/api/1/directives', { id: 'quickstart-motd', name: 'Quick start file', method: 'file_content', params: { path: motd, content: 'managed by Capstan\n' } }) : r));
  await api(serverUrl, token, 'POST', '/api/1/groups', { id: 'quickstart', name: 'Quick start nodes', nodes: [nodeId] });
  await api(serverUrl, token, 'POST', '/api/1/rules', { id: 'quickstart', name: 'Quick start', directives: ['quickstart-motd'], groups: ['quickstart'] });
  console.log(`policy: rule "quickstart" keeps ${motd} managed`);
  agent(agentArgs);
  await until('its run to reach the server', async () => (await api(serverUrl, token, 'GET', `/api/1/nodes/${nodeId}/runs`)).total > 0);
  await until('the relay to link to the server', async () => (await api(serverUrl, token, 'GET', '/api/1/system/status')).data?.remote_run?.relays?.includes(relay.node_id));
  // The node's own OS, as its inventory reported it, for the filter example below.
  const osName = (await api(serverUrl, token, 'GET', `/api/1/nodes/${nodeId}`)).data?.os_name ?? 'debian';
  console.log(`
The web console: open ${serverUrl}/ in a browser and sign in with the admin token,
the one line in ${resolve(dir, 'server/admin.token')}
(docs/console.md; the sign-in lasts [console] signin_ttl, 8 hours by default).

Look at the result from a shell:
  TOKEN=$(cat ${resolve(dir, 'server/admin.token')})
  curl -s -H "Authorization: Bearer $TOKEN" ${serverUrl}/api/1/nodes
  curl -s -H "Authorization: Bearer $TOKEN" ${serverUrl}/api/1/nodes/${nodeId}
  curl -s -H "Authorization: Bearer $TOKEN" "${serverUrl}/api/1/nodes/${nodeId}/runs?reports=true"
  curl -s -H "Authorization: Bearer $TOKEN" ${serverUrl}/api/1/nodes/${nodeId}/compliance
  curl -s -H "Authorization: Bearer $TOKEN" ${serverUrl}/api/1/changes             # what the agent changed, with its diff
  curl -s -H "Authorization: Bearer $TOKEN" "${serverUrl}/api/1/compliance/nodes?format=csv"
  node server/dist/cli.js changes list --data-dir ${resolve(dir, 'server')} --from 1h --show
The same with the admin CLI, from any machine that reaches the server (docs/cli.md):
  export CAPSTAN_URL=${serverUrl} CAPSTAN_TOKEN=$TOKEN
  node server/bin/capstan.js nodes list
  node server/bin/capstan.js nodes list -q 'os.name = ${osName}'   # the filter language, docs/filters.md
  node server/bin/capstan.js compliance rules
  node server/bin/capstan.js changes list
  node server/bin/capstan.js policy export -d ./policy && node server/bin/capstan.js policy diff -f ./policy
  curl -s ${relayUrl}/rudder/relay-api/1/system/status
  curl -s -H "Authorization: Bearer $TOKEN" ${serverUrl}/api/1/system/status   # remote_run.relays: the linked relay
Run the agent again, or keep it listening for jobs (POST /api/1/jobs, see docs/jobs.md):
  node agent/dist/cli.js ${agentArgs.join(' ')}
  node agent/dist/cli.js listen --relay ${relayUrl} --state-dir ${resolve(dir, 'agent')}
Server and relay keep running; Ctrl-C stops them.`);
} catch (err) {
  console.error(`quick start failed: ${err.message}`);
  stopAll();
  process.exit(1);
}
