/**
 * A whole agent run against a small stand-in relay (node:http on loopback) that serves signed
 * policy bundles and takes uploads: enforce repairs, a second run repairs nothing, audit changes
 * nothing, a tampered or foreign bundle is refused and reported while the last good policy runs.
 */
import { generateKeyPairSync } from 'node:crypto';
import { createServer, type Server } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { computeConfigId, decompress, parseDiffMessage, parseRunLog, sealForNode, secretMarker, signBundle, silentLogger, verifySmime, type BundleDirective, type TechniqueCall } from '@capstan/shared';
import { loadAgentConfig } from '@capstan/agent/config';
import { runAgent } from '@capstan/agent/run';
import { BIN, runProgram, programDir } from '../helpers/programs.js';

interface FakeRelay {
  url: string;
  uploads: Array<{ kind: string; name: string; body: Buffer }>;
  serve: (body: string | null, etag?: string) => void;
  /** Drop every connection, as an unreachable relay would (keeps the port, so no one else takes it). */
  setDown: (down: boolean) => void;
  close: () => Promise<void>;
}

async function fakeRelay(): Promise<FakeRelay> {
  let policy: string | null = null;
  let etag = '"0"';
  let down = false;
  const uploads: FakeRelay['uploads'] = [];
  const server: Server = createServer((req, res) => {
    if (down) {
      req.socket.destroy();
      return;
    }
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const [, kind, name] = (req.url ?? '').split('/');
      if (req.method === 'PUT') {
        uploads.push({ kind: kind!, name: decodeURIComponent(name!), body: Buffer.concat(chunks) });
        res.writeHead(201).end('{}');
      } else if (req.method === 'GET' && kind === 'policies') {
        if (policy === null) return res.writeHead(404).end('{}');
        if (req.headers['if-none-match'] === etag) return res.writeHead(304).end();
        res.writeHead(200, { etag, 'content-type': 'application/json' }).end(policy);
      } else res.writeHead(404).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  return {
    url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`,
    uploads,
    serve: (body, tag) => {
      policy = body;
      etag = tag ?? `"${Math.random()}"`;
    },
    setDown: (d) => {
      down = d;
    },
    close: () => new Promise((r) => server.close(() => r())),
  };
}

const { privateKey } = generateKeyPairSync('ed25519');
const serverKey = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const { privateKey: otherKey } = generateKeyPairSync('ed25519');

function bundleFor(nodeId: string, directives: BundleDirective[], key = serverKey) {
  return JSON.stringify(signBundle({ node_id: nodeId, config_id: computeConfigId(directives), generated_at: new Date().toISOString(), directives }, key, { includePublicKey: true }));
}

/** Types reported for the directive under test, read back from the run log the agent sent. */
async function lastRun(relay: FakeRelay, nodeId: string, certPem: string) {
  const up = relay.uploads.filter((u) => u.kind === 'reports').at(-1)!;
  const text = verifySmime(await decompress(up.body, 'zstd', { maxBytes: 1 << 20 }), [certPem]).content;
  return parseRunLog(text, { node_id: nodeId, timestamp: '2026-01-01T00:00:00+00:00' });
}

t.test('enforce, idempotence, audit and refusal across real agent runs', async (t) => {
  const dir = programDir(t, { 'motd': 'old\n' });
  const relay = await fakeRelay();
  t.teardown(relay.close);
  const config = loadAgentConfig({ overrides: { 'agent.relay': relay.url, 'agent.state_dir': join(dir, 'state') } });
  const first = await runAgent(config, silentLogger); // identity + inventory, no policy yet (404)
  t.equal(first.configId, 'none');
  const nodeId = first.nodeId;
  const certPem = await readFile(join(dir, 'state', 'agent.cert'), 'utf8');
  const policyReport = () => log.reports.find((r) => r.rule_id === 'capstan-agent' && r.directive_id === 'agent-self-check' && r.component === 'Policy')!;
  let log = await lastRun(relay, nodeId, certPem);
  t.match(policyReport(), { event_type: 'result_success', key_value: 'none', msg: /no policy assigned/ }, 'every run says which policy it ran');
  const motd = join(dir, 'motd');
  const directives: BundleDirective[] = [
    { id: 'motd', name: 'Message of the day', method: 'file_content', params: { path: motd, content: 'managed\n' }, mode: 'enforce', rule_id: 'base' },
    { id: 'never', name: 'Not here', method: 'file_absent', params: { path: join(dir, 'x') }, mode: 'enforce', rule_id: 'base', condition: "identity('^nomatch$')" },
    { id: 'never-audit', name: 'Not here either', method: 'file_absent', params: { path: join(dir, 'x') }, mode: 'audit', rule_id: 'base', condition: "!has_directory('/')" },
    { id: 'broken', name: 'Bad condition', method: 'file_absent', params: { path: join(dir, 'y') }, mode: 'enforce', rule_id: 'base', condition: "has_file('" },
  ];
  relay.serve(bundleFor(nodeId, directives));

  const r1 = await runAgent(config, silentLogger);
  t.equal(r1.configId, computeConfigId(directives));
  t.equal(await readFile(motd, 'utf8'), 'managed\n');
  log = await lastRun(relay, nodeId, certPem);
  const byDirective = (id: string) => log.reports.filter((r) => r.directive_id === id).map((r) => r.event_type);
  t.same(byDirective('motd'), ['result_repaired', 'log_info'], 'the repair and, after it, its diff report');
  t.same(byDirective('never'), ['result_na'], 'condition false → not applicable');
  t.same(byDirective('never-audit'), ['audit_na'], 'condition false in audit mode → audit_na');
  t.same(byDirective('broken'), ['result_error'], 'condition parse error → result_error, not a crash');
  t.equal(log.config_id, r1.configId, 'control reports carry the policy config id');
  t.match(policyReport(), { event_type: 'result_success', key_value: r1.configId, msg: /verified/ });
  t.equal(log.reports.find((r) => r.directive_id === 'motd')!.rule_id, 'base');

  await runAgent(config, silentLogger);
  log = await lastRun(relay, nodeId, certPem);
  t.same(byDirective('motd'), ['result_success'], 'a second run on an unchanged host repairs nothing');
  t.match(policyReport(), { event_type: 'result_success', msg: /unchanged/ }, 'a 304');

  await writeFile(motd, 'changed by hand\n');
  await runAgent(config, silentLogger, { audit: true });
  log = await lastRun(relay, nodeId, certPem);
  t.same(byDirective('motd'), ['audit_noncompliant', 'log_info']);
  t.equal(await readFile(motd, 'utf8'), 'changed by hand\n', 'audit leaves the file as it was');

  // A relay that alters one byte of the bundle: refused, reported, last good policy still applied.
  const good = JSON.parse(bundleFor(nodeId, [{ ...directives[0]!, params: { path: motd, content: 'evil\n' } }])) as { policy: string };
  const altered = JSON.parse(bundleFor(nodeId, directives)) as { policy: string };
  altered.policy = good.policy; // content of another bundle under this one's signature
  relay.serve(JSON.stringify(altered));
  await runAgent(config, silentLogger);
  log = await lastRun(relay, nodeId, certPem);
  t.match(policyReport(), { event_type: 'result_error', key_value: r1.configId, msg: /ERR_POLICY_SIGNATURE.*last good policy/ });
  t.same(byDirective('motd'), ['result_repaired', 'log_info'], 'the cached policy ran');
  t.equal(await readFile(motd, 'utf8'), 'managed\n');

  // Signed by a key other than the one pinned on first contact.
  relay.serve(bundleFor(nodeId, directives, otherKey.export({ type: 'pkcs8', format: 'pem' }).toString()));
  await runAgent(config, silentLogger);
  log = await lastRun(relay, nodeId, certPem);
  t.match(policyReport(), { event_type: 'result_error', msg: /ERR_POLICY_SIGNATURE/ });

  // Another node's bundle.
  relay.serve(bundleFor('someone-else', directives));
  await runAgent(config, silentLogger);
  log = await lastRun(relay, nodeId, certPem);
  t.match(policyReport(), { event_type: 'result_error', msg: /ERR_POLICY_NODE_MISMATCH/ });
  t.equal(log.reports.filter((r) => r.component === 'Policy').length, 1, 'one Policy report per run');
});

t.test('relay down: the run uses the cached policy and queues its run log; back-fill in order', async (t) => {
  const dir = programDir(t, { 'f': '' });
  const relay = await fakeRelay();
  const config = loadAgentConfig({ overrides: { 'agent.relay': relay.url, 'agent.state_dir': join(dir, 'state') } });
  const first = await runAgent(config, silentLogger);
  const directives: BundleDirective[] = [{ id: 'f', name: 'f', method: 'file_content', params: { path: join(dir, 'f'), content: 'v1' }, mode: 'enforce', rule_id: 'r' }];
  relay.serve(bundleFor(first.nodeId, directives));
  await runAgent(config, silentLogger);
  relay.setDown(true);
  t.teardown(relay.close);

  await writeFile(join(dir, 'f'), 'drift');
  const offline = await runAgent(config, silentLogger);
  t.equal(offline.configId, computeConfigId(directives), 'cached policy used');
  t.equal(await readFile(join(dir, 'f'), 'utf8'), 'v1', 'and applied');
  t.equal(offline.flush.remaining, 1, 'run log queued');

  const back = relay;
  back.setDown(false);
  back.uploads.length = 0;
  const again = await runAgent(config, silentLogger);
  t.equal(again.flush.sent, 2, 'the queued run log and the new one');
  const names = back.uploads.filter((u) => u.kind === 'reports').map((u) => u.name);
  t.equal(names.length, 2);
  t.ok(names[0]! < names[1]!, 'oldest first');
  const queued = back.uploads.filter((u) => u.kind === 'reports')[0]!;
  const certPem = await readFile(join(dir, 'state', 'agent.cert'), 'utf8');
  const text = verifySmime(await decompress(queued.body, 'zstd', { maxBytes: 1 << 20 }), [certPem]).content;
  const offlineLog = parseRunLog(text, { node_id: first.nodeId, timestamp: '2026-01-01T00:00:00+00:00' });
  t.match(offlineLog.reports[0], { event_type: 'log_warn', component: 'start', msg: /policy not refreshed \(ERR_UPSTREAM\)/ },
    'the agent log line is attached to the next report, as RUDDER does');

  // A cached policy that cannot be read back made the run throw; now it is no cache.
  await writeFile(join(dir, 'state', 'policy.json'), '{"config_id": "torn');
  await writeFile(join(dir, 'f'), 'drift');
  const afterCorruption = await runAgent(config, silentLogger);
  t.equal(afterCorruption.configId, computeConfigId(directives), 'fetched afresh (no If-None-Match without a cache)');
  t.equal(await readFile(join(dir, 'f'), 'utf8'), 'v1');
});

t.test('dry run prints what it would do and changes, signs and sends nothing', async (t) => {
  const dir = programDir(t, { 'f': 'x' });
  const relay = await fakeRelay();
  t.teardown(relay.close);
  const config = loadAgentConfig({ overrides: { 'agent.relay': relay.url, 'agent.state_dir': join(dir, 'state') } });
  const first = await runAgent(config, silentLogger);
  relay.serve(bundleFor(first.nodeId, [{ id: 'f', name: 'f', method: 'file_content', params: { path: join(dir, 'f'), content: 'y' }, mode: 'enforce', rule_id: 'r' }]));
  const before = relay.uploads.length;
  const lines: string[] = [];
  await runAgent(config, silentLogger, { dryRun: true, onOutcome: (l) => lines.push(l) });
  t.equal(await readFile(join(dir, 'f'), 'utf8'), 'x');
  t.equal(relay.uploads.length, before);
  t.match(lines.join('\n'), /would repair/);
});

t.test('capstan-agent run --dry-run: a would-be repair is audit_noncompliant with its diff, exit 0; an error still exits 4', async (t) => {
  const dir = programDir(t, { f: 'old\n', keep: 'k\n' });
  const relay = await fakeRelay();
  t.teardown(relay.close);
  const state = join(dir, 'state');
  const config = loadAgentConfig({ overrides: { 'agent.relay': relay.url, 'agent.state_dir': state } });
  const first = await runAgent(config, silentLogger);
  const f = join(dir, 'f');
  relay.serve(bundleFor(first.nodeId, [
    { id: 'f', name: 'f', method: 'file_content', params: { path: f, content: 'new\n' }, mode: 'enforce', rule_id: 'r' },
    { id: 'gone', name: 'gone', method: 'file_absent', params: { path: join(dir, 'keep') }, mode: 'enforce', rule_id: 'r' },
  ]));
  const before = relay.uploads.length;
  const r = await runProgram(BIN.agent, ['run', '--dry-run', '--relay', relay.url, '--state-dir', state, '--log-level', 'silent']);
  t.equal(r.code, 0, `a would-be repair is not an error: ${r.stderr}`);
  t.equal(await readFile(f, 'utf8'), 'old\n', 'nothing changed');
  t.equal(await readFile(join(dir, 'keep'), 'utf8'), 'k\n');
  t.equal(relay.uploads.length, before, 'nothing sent');
  const lines = r.stdout.split('\n');
  t.match(lines.find((l) => l.includes('r/f\t')), /^audit_noncompliant\tr\/f\tFile content .*: would repair: /);
  const diffLine = lines.find((l) => l.startsWith('log_info\tr/f\t'))!;
  t.match(parseDiffMessage(diffLine.slice(diffLine.indexOf('capstan-diff '))), { diff: `--- a${f}\n+++ b${f}\n@@ -1,1 +1,1 @@\n-old\n+new\n`, truncated: false });
  t.match(lines.find((l) => l.startsWith('log_info\tr/gone\t')), /capstan-diff .*deleted /);
  t.notOk(lines.some((l) => l.startsWith('result_error')), 'no error reported');

  // A real error in a dry run: still exit 4.
  relay.serve(bundleFor(first.nodeId, [{ id: 'bad', name: 'bad', method: 'file_absent', params: { path: dir }, mode: 'enforce', rule_id: 'r' }]));
  const bad = await runProgram(BIN.agent, ['run', '--dry-run', '--relay', relay.url, '--state-dir', state, '--log-level', 'silent']);
  t.equal(bad.code, 4, 'a directory file_absent refuses to remove is an error');
  t.match(bad.stdout, /^result_error\tr\/bad\t/m);
});

t.test('a whole run: a technique, properties read by a condition, a secret sealed to the node', async (t) => {
  const dir = programDir(t, {});
  const relay = await fakeRelay();
  t.teardown(relay.close);
  const config = loadAgentConfig({ overrides: { 'agent.relay': relay.url, 'agent.state_dir': join(dir, 'state') } });
  const first = await runAgent(config, silentLogger);
  const certPem = await readFile(join(dir, 'state', 'agent.cert'), 'utf8');
  const SECRET = 'Tr0ub4dor&3';
  const secrets = { db_pw: sealForNode(SECRET, certPem) };
  const calls: TechniqueCall[] = [
    { id: 'conf', component: 'App config', method: 'file_content', params: { path: join(dir, 'app.conf'), content: `pw=${secretMarker('db_pw')}\n` } },
    { id: 'stamp', component: 'Stamp', method: 'file_content', params: { path: join(dir, 'stamp'), content: 'x' }, if: "repaired('conf')", condition: "fact('node.properties.tier') == 'gold'" },
    { id: 'bad', component: 'Fails', method: 'command_check', params: { command: join(dir, `missing-${secretMarker('db_pw')}`) } },
  ];
  const directives: BundleDirective[] = [{ id: 'app', name: 'App', method: 'technique', technique: { id: 'app', version: '1.0' }, params: {}, calls, mode: 'enforce', rule_id: 'r' }];
  const extra = { properties: { tier: 'gold' }, secrets };
  relay.serve(JSON.stringify(signBundle({ node_id: first.nodeId, config_id: computeConfigId(directives, extra), generated_at: new Date().toISOString(), directives, ...extra }, serverKey, { includePublicKey: true })));
  const r = await runAgent(config, silentLogger);
  t.equal(await readFile(join(dir, 'app.conf'), 'utf8'), `pw=${SECRET}\n`, 'the secret, opened with the node key');
  t.equal(await readFile(join(dir, 'stamp'), 'utf8'), 'x', 'the if held and the condition read node.properties');
  const log = await lastRun(relay, first.nodeId, certPem);
  t.same(log.reports.filter((x) => x.directive_id === 'app').map((x) => `${x.component}=${x.event_type}`),
    ['App config=result_repaired', 'App config=log_info', 'Stamp=result_repaired', 'Stamp=log_info', 'Fails=audit_error']);
  const up = relay.uploads.filter((u) => u.kind === 'reports').at(-1)!;
  const text = verifySmime(await decompress(up.body, 'zstd', { maxBytes: 1 << 20 }), [certPem]).content;
  t.notOk(text.includes(SECRET), 'the run log the relay receives never holds the secret');
  t.equal(r.compliance.missing + r.compliance.unexpected, 0, 'the run reports what the policy expects');
});
