/**
 * The gcp driver against a local endpoint answering Compute Engine's aggregatedList JSON from a
 * fixture file: zones as scopes, pageToken pagination, 429/503 retried, the bearer token taken
 * from the environment variable the manager names, Google's error body reported.
 */
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { applyFilters, checkManager } from '@capstan/shared/providers/index';
import { gcpDriver } from '@capstan/shared/providers/gcp';

const TOKEN = 'ya29.local-test-token';

async function fakeGce(t: Test, file: string) {
  const seen: Array<{ path: string; page: string | null; status: number; auth: string }> = [];
  const throttle: number[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      seen.push({ path: url.pathname, page: url.searchParams.get('pageToken'), status, auth: String(req.headers.authorization) });
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    if (req.headers.authorization !== `Bearer ${TOKEN}`) {
      return send(401, { error: { code: 401, message: 'Request had invalid authentication credentials.', status: 'UNAUTHENTICATED' } });
    }
    const th = throttle.shift();
    if (th) return send(th, { error: { code: th, message: 'Quota exceeded', status: 'RESOURCE_EXHAUSTED' } }, th === 429 ? { 'retry-after': '0' } : {});
    const m = /^\/compute\/v1\/projects\/([^/]+)\/aggregated\/instances$/.exec(url.pathname);
    const fx = JSON.parse(readFileSync(file, 'utf8')) as Record<string, Array<Record<string, unknown>>>;
    if (!m || m[1] !== 'proj-1') return send(404, { error: { code: 404, message: `The resource 'projects/${m?.[1]}' was not found`, status: 'NOT_FOUND' } });
    const pages = Object.entries(fx);
    const i = Number(url.searchParams.get('pageToken') ?? 0);
    const [zone, instances] = pages[i]!;
    send(200, {
      kind: 'compute#instanceAggregatedList', id: 'projects/proj-1/aggregated/instances',
      items: { [`zones/${zone}`]: { instances }, 'zones/us-east1-b': { warning: { code: 'NO_RESULTS_ON_PAGE', message: 'none' } } },
      ...(i + 1 < pages.length && { nextPageToken: String(i + 1) }),
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, throttle };
}

const gce = (id: string, status: string, labels: Record<string, string>, ip?: string) =>
  ({ kind: 'compute#instance', id, name: `vm-${id}`, status, labels, ...(ip && { networkInterfaces: [{ networkIP: ip }] }) });

t.test('aggregatedList over zones and pages, throttling retried, labels filtered', async (t) => {
  const dir = t.testdir();
  const file = join(dir, 'gce.json');
  writeFileSync(file, JSON.stringify({
    'europe-west1-b': [gce('101', 'RUNNING', { env: 'prod' }, '10.128.0.2'), gce('102', 'TERMINATED', { env: 'prod' })],
    'europe-west1-c': [gce('103', 'STAGING', { env: 'dev' })],
    'us-central1-a': [gce('104', 'RUNNING', { env: 'prod' })],
  }));
  const g = await fakeGce(t, file);
  process.env.CAPSTAN_TEST_GCP_TOKEN = TOKEN;
  const spec = checkManager({
    id: 'gcp', type: 'gcp', config: { project: 'proj-1', endpoint: g.url },
    credentials: { source: 'env', vars: { access_token: 'CAPSTAN_TEST_GCP_TOKEN' } },
    filters: { regions: { include: ['europe-'] }, tags: { include: [{ key: 'env', values: ['pro?'] }] } },
  });
  g.throttle.push(429, 503);
  const driver = gcpDriver(spec, process.env, { baseDelayMs: 5 });
  const found = applyFilters(spec.filters, await driver.list());
  t.same(found.map((i) => [i.source_id, i.region, i.account_id, i.state, i.address]), [
    ['101', 'europe-west1-b', 'proj-1', 'running', '10.128.0.2'],
    ['102', 'europe-west1-b', 'proj-1', 'stopped', null],
  ]);
  t.same(g.seen.map((s) => `${s.status}:${s.page ?? '-'}`), ['429:-', '503:-', '200:-', '200:1', '200:2'], 'retried, then every page');
  t.same(await driver.test(), { reachable: true });
});

t.test('a wrong project or token is unreachable with Google error', async (t) => {
  const dir = t.testdir();
  const file = join(dir, 'gce.json');
  writeFileSync(file, JSON.stringify({ 'europe-west1-b': [] }));
  const g = await fakeGce(t, file);
  process.env.CAPSTAN_TEST_GCP_TOKEN = TOKEN;
  process.env.CAPSTAN_TEST_GCP_BAD = 'ya29.wrong';
  const mk = (project: string, v: string) => gcpDriver(checkManager({ id: 'g', type: 'gcp', config: { project, endpoint: g.url }, credentials: { source: 'env', vars: { access_token: v } } }), process.env, { baseDelayMs: 5 });
  t.match(await mk('other', 'CAPSTAN_TEST_GCP_TOKEN').test(), { reachable: false, error: /HTTP 404: NOT_FOUND: The resource 'projects\/other' was not found/ });
  const bad = await mk('proj-1', 'CAPSTAN_TEST_GCP_BAD').test();
  t.match(bad, { reachable: false, error: /UNAUTHENTICATED/ });
  t.notMatch(bad.error, /ya29/, 'the token is never in the error');
  t.match(await mk('proj-1', 'CAPSTAN_TEST_GCP_UNSET').test(), { reachable: false, error: /CAPSTAN_TEST_GCP_UNSET is not set/ });
});
