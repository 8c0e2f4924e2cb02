/**
 * A patch campaign end to end, one server start: a server reading a vulnerability feed served on
 * loopback (an OSV advisory: capstan-demo on Debian 12 fixed in 1.1-1), a relay linked to it for
 * remote runs, and two agents each in its own throwaway root (their package commands run there,
 * never on the host), holding `capstan-agent listen` connections. Both have capstan-demo 1.0-1
 * from a local APT repository offering 1.1-1, so both appear under the CVE. A campaign made from
 * the CVE in one step, in a window open now, with a canary of one node: the canary's wave runs
 * first as an upgrade job, the second wave after it; each node answers 1.0-1 → 1.1-1 and a
 * reboot required (never done), its fresh inventory shows 1.1-1 at the server, and that
 * inventory closes both findings. The report and the CLI say the same; bad requests get coded
 * errors.
 */
import { writeFile } from 'node:fs/promises';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { join } from 'node:path';
import t from 'tap';
import { BIN, programDir, registerRelay, startProgram, startServer, waitFor } from '../helpers/programs.js';
import { capstan } from '../helpers/capstan.js';
import { debRepo } from '../helpers/root-setup.js';
import { makeZip } from '../helpers/zip.js';
import { rootSkipReason, throwawayRoot, type Root } from '../helpers/root.js';

t.setTimeout(300_000);

const PKG = 'capstan-demo';
const STATE = '/var/lib/capstan/agent';
const ALL_DAYS = ['sun', 'mon', 'tue', 'wed', 'thu', 'fri', 'sat'];
const CVE = 'CVE-2026-4242';
const ADVISORY = {
  id: 'DSA-9424-1', modified: '2026-11-01T00:00:00Z', published: '2026-11-01T00:00:00Z', aliases: [CVE], summary: 'capstan-demo: a flaw fixed in 1.1-1',
  severity: [{ type: 'CVSS_V3', score: 'CVSS:3.1/AV:N/AC:L/PR:N/UI:N/S:U/C:H/I:H/A:H' }],
  affected: [{ package: { ecosystem: 'Debian:12', name: PKG }, ranges: [{ type: 'ECOSYSTEM', events: [{ introduced: '0' }, { fixed: '1.1-1' }] }] }],
};
const why = await rootSkipReason({ network: 'host' });

t.test('a campaign upgrades the canary, then the rest, in its window; the inventory follows', { skip: why }, async (t) => {
  // The vulnerability feed, as osv.dev publishes one ecosystem: a zip of advisories.
  const feed = makeZip([{ name: `${ADVISORY.id}.json`, data: Buffer.from(JSON.stringify(ADVISORY)) }]);
  const http = createServer((req, res) => void (req.url === '/Debian/all.zip' ? res.writeHead(200).end(feed) : res.writeHead(404).end()));
  await new Promise<void>((r) => http.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => http.close(() => r())));
  const feedUrl = `http://127.0.0.1:${(http.address() as AddressInfo).port}/Debian/all.zip`;

  const dir = programDir(t);
  await writeFile(join(dir, 'server.toml'), '[jobs]\nsweep_interval = "200ms"\n\n[campaigns]\ntick_interval = "200ms"\n\n'
    + `[vulnerabilities]\nfeeds = ["debian=${feedUrl}"]\ninterval = 0\n`);
  const { server, token, api } = await startServer(t, join(dir, 'server'), { config: join(dir, 'server.toml') });
  t.match((await api('POST', '/api/1/vulnerabilities/feeds/refresh')).json.data, { changed: 1, feeds: [{ name: 'debian', error: null }] }, 'the feed imported');
  await writeFile(join(dir, 'relayd.toml'), '[remote_run]\nlink_upstream = true\nconnect_wait = "2s"\n');
  const relayArgs = ['-c', join(dir, 'relayd.toml'), '--spool-dir', join(dir, 'relay'), '--upstream', server.url, '--node-id', 'relay-1'];
  await registerRelay(api, relayArgs);
  const relay = await startProgram(BIN.relayd, [...relayArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  await waitFor(async () => ((await api('GET', '/api/1/system/status')).json?.data?.remote_run?.relays?.includes('relay-1') ? true : undefined), 'the relay to link');

  // Two nodes, each an agent in a root of its own with capstan-demo 1.0-1 installed.
  const roots: Root[] = await Promise.all([throwawayRoot(t, { network: 'host' }), throwawayRoot(t, { network: 'host' })]);
  const ids: string[] = [];
  for (const root of roots) {
    await debRepo(root, PKG, ['1.0-1', '1.1-1']);
    t.equal((await root.sh(`DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${PKG}=1.0-1 >/dev/null`)).code, 0);
    const run = () => root.agent(['run', '--relay', relay.url, '--state-dir', STATE, '--log-level', 'error']);
    t.equal((await run()).code, 5, 'the first run waits for acceptance');
    const id = (await root.exec('cat', [`${STATE}/node-id`])).stdout.trim();
    await waitFor(async () => ((await api('GET', `/api/1/nodes/${id}`)).status === 200 ? true : undefined), 'the node registered');
    t.equal((await api('POST', `/api/1/nodes/${id}/accept`)).status, 200);
    const second = await run();
    t.equal(second.code, 0, second.stderr);
    // Runs until the root is torn down; reboots are reported, never done.
    void root.exec(process.execPath, [BIN.agent, 'listen', '--relay', relay.url, '--state-dir', STATE, '--log-level', 'warn'], { env: { CAPSTAN_UPGRADE_NO_REBOOT: '1' }, timeoutMs: 290_000 });
    ids.push(id);
  }
  ids.sort();
  const relayStatus = async () => ((await (await fetch(`${relay.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  await waitFor(async () => ((await relayStatus()).remote_run.connections === 2 ? true : undefined), 'both agents to listen', 60_000);
  const withVersion = async (v: string) => (await api('GET', `/api/1/nodes?q=${encodeURIComponent(`package:${PKG} = ${v}`)}`)).json.data.map((n: { id: string }) => n.id).sort();
  t.same(await withVersion('1.0-1'), ids, 'the server sees 1.0-1 on both');
  const exposed = async () => (await api('GET', `/api/1/vulnerabilities/${CVE}`)).json.data;
  await waitFor(async () => ((await exposed()).nodes === 2 ? true : undefined), `both nodes under ${CVE}`);
  t.match((await exposed()).findings, [{ package: PKG, version: '1.0-1', fixed: '1.1-1' }, { package: PKG, version: '1.0-1', fixed: '1.1-1' }], 'each with its reason');

  // Bad requests, before the real one.
  t.match(await api('POST', '/api/1/campaigns', { name: 'x', upgrade: 'all', nodes: ids, window: { days: ['sat'], start: '25:00', duration: '1h' } }), { status: 400, json: { error: { code: 'ERR_BAD_REQUEST' } } });
  t.match(await api('POST', '/api/1/campaigns', { name: 'x', vulnerability: 'CVE-2024-3094' }), { status: 404, json: { error: { code: 'ERR_NOT_FOUND' } } }, 'a CVE no feed knows');
  t.match(await api('POST', '/api/1/campaigns', { name: 'x', upgrade: 'all', q: `package:${PKG} = 9.9` }), { status: 400, json: { error: { code: 'ERR_JOB_NO_TARGETS' } } });
  t.match(await api('GET', '/api/1/campaigns/nope'), { status: 404, json: { error: { code: 'ERR_CAMPAIGN_UNKNOWN' } } });

  // A window that opened an hour ago and lasts three.
  const start = new Date(Date.now() - 3600_000).toISOString().slice(11, 16);
  const created = await api('POST', '/api/1/campaigns', {
    name: 'demo to 1.1', vulnerability: CVE, canary: 1,
    window: { days: ALL_DAYS, start, duration: '3h', tz: 'UTC' }, post: ['touch /run/reboot-required'], reboot: 'if-needed',
  });
  t.equal(created.status, 201, created.json.error?.message ?? 'created');
  const id = created.json.data.id as string;
  t.same(created.json.data.spec.upgrade.packages, [{ name: PKG, min_version: '1.1-1' }], 'the package and its fixed version, from the feed');
  t.same(created.json.data.spec.nodes, ids, 'the exposed nodes');
  t.same(created.json.data.waves.map((w: { nodes: string[] }) => w.nodes), [[ids[0]], [ids[1]]], 'the canary is the first node by id');
  const c = await waitFor(async () => {
    const r = (await api('GET', `/api/1/campaigns/${id}`)).json.data;
    return ['finished', 'stopped', 'cancelled'].includes(r.state) ? r : undefined;
  }, 'the campaign to end', 180_000);
  t.match(c, { state: 'finished', next_at: null, message: '2 of 2 nodes upgraded' });
  const [w1, w2] = c.waves;
  t.ok(w1.job_ids.length === 1 && w2.job_ids.length === 1, 'one job per wave');
  t.ok(Date.parse(w2.started_at) >= Date.parse(w1.ended_at), 'the second wave started once the canary ended');
  t.match((await api('GET', `/api/1/jobs/${w1.job_ids[0]}`)).json.data, { type: 'upgrade', campaign_id: id, state: 'finished', nodes: [ids[0]], progress: { done: 1 } });

  const report = (await api('GET', `/api/1/campaigns/${id}/report`)).json.data;
  t.match(report.summary, { total: 2, done: 2, failed: 0, reboot_required: 2, packages_upgraded: 2 });
  for (const n of report.nodes) {
    t.match(n, { state: 'done', exit_code: 0, attempts: 1, reboot_required: true, upgraded: [{ name: PKG, from: '1.0-1', to: '1.1-1' }] }, `node ${n.node_id}`);
    t.match(n.output, /apt-get install .*--only-upgrade/);
    t.match(n.output, /inventory sent/);
  }
  for (const root of roots) t.equal((await root.exec('cat', [`/usr/share/${PKG}/VERSION`])).stdout.trim(), '1.1-1', 'upgraded in its root');
  await waitFor(async () => ((await withVersion('1.1-1')).length === 2 ? true : undefined), 'the fresh inventories at the server');
  t.same(await withVersion('1.0-1'), [], 'no node left at 1.0-1');
  await waitFor(async () => ((await exposed()).nodes === 0 ? true : undefined), `the fresh inventories to close ${CVE} on both nodes`);

  const env = { CAPSTAN_URL: server.url, CAPSTAN_TOKEN: token };
  const cli = await capstan(['campaigns', 'report', id], env);
  t.equal(cli.code, 0, cli.err);
  t.match(cli.out, new RegExp(`${PKG} 1\\.0-1 → 1\\.1-1`));
  t.match((await capstan(['campaigns', 'list'], env)).out, /demo to 1\.1\s+finished/);
  t.match(await api('POST', `/api/1/campaigns/${id}/cancel`), { status: 409, json: { error: { code: 'ERR_CAMPAIGN_STATE' } } });

  // A window that is not open: the campaign waits for it, and a cancel ends it without a job.
  const later = new Date(Date.now() + 6 * 3600_000).toISOString().slice(11, 16);
  const waiting = (await api('POST', '/api/1/campaigns', { name: 'later', nodes: ids, upgrade: 'all', window: { days: ALL_DAYS, start: later, duration: '1h' } })).json.data;
  const w = await waitFor(async () => {
    const r = (await api('GET', `/api/1/campaigns/${waiting.id}`)).json.data;
    return r.state === 'waiting_window' ? r : undefined;
  }, 'the campaign to wait for its window');
  t.ok(Date.parse(w.next_at) > Date.now(), `it waits until ${w.next_at}`);
  t.match((await api('POST', `/api/1/campaigns/${waiting.id}/cancel`)).json.data, { state: 'cancelled', waves: [{ state: 'cancelled', job_ids: [] }] });
});
