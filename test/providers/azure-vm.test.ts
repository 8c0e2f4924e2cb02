/**
 * The azure-vm driver (@azure/arm-compute) against a local HTTPS endpoint answering ARM's
 * virtualMachines listAll JSON from a fixture file: nextLink pagination, 429 and 503 retried,
 * power states from the instance view, resource groups and filters applied, ARM's error body
 * reported. ARM bearer tokens go over TLS only (the SDK refuses http), so the test makes a
 * certificate for 127.0.0.1 with openssl and the manager trusts it through config.ca_file.
 */
import { execFileSync } from 'node:child_process';
import { createServer } from 'node:https';
import type { AddressInfo } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { applyFilters, checkManager } from '@capstan/toolkit/providers/index';
import { azureDriver } from '@capstan/toolkit/providers/azure-vm';
import { programDir } from '../helpers/programs.js';

const TOKEN = 'local-arm-token';
const SUB = '00000000-1111-2222-3333-444444444444';

function openssl(): boolean {
  try {
    execFileSync('openssl', ['version'], { stdio: 'ignore' });
    return true;
  } catch {
    return false;
  }
}

async function fakeArm(t: Test, dir: string, file: string) {
  execFileSync('openssl', ['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:prime256v1', '-nodes', '-keyout', 'arm.key', '-out', 'arm.pem',
    '-days', '2', '-subj', '/CN=127.0.0.1', '-addext', 'subjectAltName=IP:127.0.0.1'], { cwd: dir, stdio: 'ignore' });
  const seen: Array<{ page: string | null; status: number; statusOnly: string | null }> = [];
  const throttle: number[] = [];
  let port = 0;
  const server = createServer({ key: readFileSync(join(dir, 'arm.key')), cert: readFileSync(join(dir, 'arm.pem')) }, (req, res) => {
    const url = new URL(req.url!, 'https://x');
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      seen.push({ page: url.searchParams.get('$skiptoken'), status, statusOnly: url.searchParams.get('statusOnly') });
      res.writeHead(status, { 'content-type': 'application/json; charset=utf-8', 'x-ms-request-id': String(seen.length), ...headers });
      res.end(JSON.stringify(body));
    };
    if (req.headers.authorization !== `Bearer ${TOKEN}`) {
      return send(401, { error: { code: 'InvalidAuthenticationToken', message: 'The access token is invalid.' } });
    }
    const th = throttle.shift();
    if (th) return send(th, { error: { code: th === 429 ? 'TooManyRequests' : 'ServiceUnavailable', message: 'try later' } }, { 'retry-after': '0' });
    const m = /^\/subscriptions\/([^/]+)\/providers\/Microsoft\.Compute\/virtualMachines$/.exec(url.pathname);
    if (!m || m[1] !== SUB) return send(404, { error: { code: 'SubscriptionNotFound', message: `The subscription '${m?.[1]}' could not be found.` } });
    const pages = JSON.parse(readFileSync(file, 'utf8')) as unknown[][];
    const i = Number(url.searchParams.get('$skiptoken') ?? 0);
    const next = i + 1 < pages.length
      ? `https://127.0.0.1:${port}/subscriptions/${SUB}/providers/Microsoft.Compute/virtualMachines?api-version=${url.searchParams.get('api-version')}&statusOnly=true&$skiptoken=${i + 1}`
      : undefined;
    send(200, { value: pages[i], ...(next && { nextLink: next }) });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
  t.teardown(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  return { url: `https://127.0.0.1:${port}`, ca: join(dir, 'arm.pem'), seen, throttle };
}

const vm = (name: string, group: string, location: string, power: string | null, tags: Record<string, string>) => ({
  id: `/subscriptions/${SUB}/resourceGroups/${group}/providers/Microsoft.Compute/virtualMachines/${name}`,
  name, type: 'Microsoft.Compute/virtualMachines', location, tags,
  properties: {
    vmId: `vmid-${name}`, provisioningState: 'Succeeded', osProfile: { computerName: `${name}-host` },
    instanceView: { statuses: [{ code: 'ProvisioningState/succeeded' }, ...(power ? [{ code: `PowerState/${power}` }] : [])] },
  },
});

t.test('listAll pages through nextLink, retries 429 and 503, maps power states, applies groups and filters', { skip: openssl() ? false : 'openssl not installed' }, async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'arm.json');
  writeFileSync(file, JSON.stringify([
    [vm('web1', 'RG-Prod', 'westeurope', 'running', { env: 'prod' }), vm('web2', 'rg-prod', 'westeurope', 'deallocated', { env: 'prod' })],
    [vm('web3', 'rg-prod', 'northeurope', 'stopped', { env: 'prod' }), vm('dev1', 'rg-dev', 'westeurope', 'running', { env: 'prod' })],
    [vm('web4', 'rg-prod', 'eastus', 'running', { env: 'prod' }), vm('web5', 'rg-prod', 'westeurope', null, { env: 'prodx' })],
  ]));
  const arm = await fakeArm(t, dir, file);
  process.env.CAPSTAN_TEST_ARM_TOKEN = TOKEN;
  const spec = checkManager({
    id: 'az', type: 'azure-vm', config: { subscription_id: SUB, endpoint: arm.url, ca_file: arm.ca, resource_groups: ['rg-prod'] },
    credentials: { source: 'env', vars: { access_token: 'CAPSTAN_TEST_ARM_TOKEN' } },
    filters: { regions: { exclude: ['east'] }, tags: { include: [{ key: 'env', values: ['prod'] }] } },
  });
  arm.throttle.push(429, 503);
  const driver = azureDriver(spec, process.env, { retryDelayMs: 10 });
  const found = applyFilters(spec.filters, await driver.list());
  t.same(found.map((i) => [i.source_id, i.region, i.account_id, i.hostname, i.state]), [
    ['vmid-web1', 'westeurope', SUB, 'web1-host', 'running'],
    ['vmid-web2', 'westeurope', SUB, 'web2-host', 'stopped'],
    ['vmid-web3', 'northeurope', SUB, 'web3-host', 'stopped'],
  ], 'rg-dev, eastus and a non-matching tag are left out; the group matches case-insensitively');
  t.same(arm.seen.map((s) => `${s.status}:${s.page ?? '-'}`), ['429:-', '503:-', '200:-', '200:1', '200:2'], 'throttling retried, then every page');
  t.ok(arm.seen.every((s) => s.statusOnly === 'true'), 'power states asked for in the listing');
  t.same(await driver.test(), { reachable: true });
});

t.test('a wrong subscription or token is unreachable with ARM error', { skip: openssl() ? false : 'openssl not installed' }, async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'arm.json');
  writeFileSync(file, JSON.stringify([[]]));
  const arm = await fakeArm(t, dir, file);
  process.env.CAPSTAN_TEST_ARM_TOKEN = TOKEN;
  process.env.CAPSTAN_TEST_ARM_BAD = 'wrong-token';
  const mk = (sub: string, v: string) => azureDriver(checkManager({
    id: 'az', type: 'azure-vm', config: { subscription_id: sub, endpoint: arm.url, ca_file: arm.ca },
    credentials: { source: 'env', vars: { access_token: v } },
  }), process.env, { retryDelayMs: 10 });
  t.match(await mk('ffffffff-0000-0000-0000-000000000000', 'CAPSTAN_TEST_ARM_TOKEN').test(), { reachable: false, error: /SubscriptionNotFound/ });
  const bad = await mk(SUB, 'CAPSTAN_TEST_ARM_BAD').test();
  t.match(bad, { reachable: false, error: /InvalidAuthenticationToken/ });
  t.notMatch(bad.error, /wrong-token/);
});
