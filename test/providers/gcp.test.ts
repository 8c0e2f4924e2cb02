/**
 * The gcp driver against a local endpoint answering Compute Engine's aggregatedList JSON from a
 * fixture file: zones as scopes, pageToken pagination, 429/503 retried, the bearer token taken
 * from the environment variable the manager names, Google's error body reported. Then the
 * application default credentials against a local token endpoint and metadata server: a
 * service-account key (RS256 JWT checked with its public key), gcloud's authorized_user file,
 * the instance's service account from the metadata server; and unreachable zones.
 */
import { generateKeyPairSync } from 'node:crypto';
import { mkdirSync } from 'node:fs';
import { createServer } from 'node:http';
import type { AddressInfo } from 'node:net';
import { readFileSync, writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { applyFilters, checkManager } from '@capstan/toolkit/providers/index';
import { gcpDriver } from '@capstan/toolkit/providers/gcp';
import { programDir } from '../helpers/programs.js';

const TOKEN = 'ya29.local-test-token';

async function fakeGce(t: Test, file: string, tokens: Set<string> = new Set([TOKEN]), extra: Record<string, unknown> = {}) {
  const seen: Array<{ path: string; page: string | null; status: number; auth: string }> = [];
  const throttle: number[] = [];
  const server = createServer((req, res) => {
    const url = new URL(req.url!, 'http://x');
    const send = (status: number, body: unknown, headers: Record<string, string> = {}) => {
      seen.push({ path: url.pathname, page: url.searchParams.get('pageToken'), status, auth: String(req.headers.authorization) });
      res.writeHead(status, { 'content-type': 'application/json', ...headers });
      res.end(JSON.stringify(body));
    };
    if (!tokens.has(String(req.headers.authorization).replace(/^Bearer /, ''))) {
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
      ...extra,
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}`, seen, throttle };
}

const gce = (id: string, status: string, labels: Record<string, string>, ip?: string) =>
  ({ kind: 'compute#instance', id, name: `vm-${id}`, status, labels, ...(ip && { networkInterfaces: [{ networkIP: ip }] }) });

t.test('aggregatedList over zones and pages, throttling retried, labels filtered', async (t) => {
  const dir = programDir(t);
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
  const dir = programDir(t);
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

/** A local OAuth token endpoint and metadata server: what each was asked, and tokens it issues. */
async function fakeGoogleAuth(t: Test, publicKey: string) {
  const { jwtVerify, importSPKI } = await import('jose');
  const asked: Array<Record<string, unknown>> = [];
  let port = 0;
  const server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => void (async () => {
      const send = (status: number, body: unknown) => {
        res.writeHead(status, { 'content-type': 'application/json', 'metadata-flavor': 'Google' });
        res.end(JSON.stringify(body));
      };
      const url = new URL(req.url!, 'http://x');
      if (req.method === 'GET' && url.pathname === '/computeMetadata/v1/instance/service-accounts/default/token') {
        asked.push({ kind: 'metadata', flavor: req.headers['metadata-flavor'], scopes: url.searchParams.get('scopes') });
        if (req.headers['metadata-flavor'] !== 'Google') return send(403, { error: 'missing Metadata-Flavor' });
        return send(200, { access_token: 'ya29.from-metadata', expires_in: 3599, token_type: 'Bearer' });
      }
      const form = new URLSearchParams(Buffer.concat(chunks).toString('utf8'));
      if (req.method !== 'POST' || url.pathname !== '/token') return send(404, { error: 'not_found' });
      const grant = form.get('grant_type');
      if (grant === 'urn:ietf:params:oauth:grant-type:jwt-bearer') {
        try {
          const { payload, protectedHeader } = await jwtVerify(form.get('assertion') ?? '', await importSPKI(publicKey, 'RS256'), {
            audience: `http://127.0.0.1:${port}/token`, issuer: 'discovery@proj-1.iam.gserviceaccount.com',
          });
          asked.push({ kind: 'jwt', scope: payload.scope, kid: protectedHeader.kid, lifetime: payload.exp! - payload.iat! });
          return send(200, { access_token: 'ya29.from-service-account', expires_in: 3599, token_type: 'Bearer' });
        } catch (err) {
          asked.push({ kind: 'jwt', refused: (err as Error).message });
          return send(400, { error: 'invalid_grant', error_description: 'Invalid JWT Signature.' });
        }
      }
      if (grant === 'refresh_token') {
        asked.push({ kind: 'refresh', client_id: form.get('client_id') });
        if (form.get('refresh_token') !== '1//local-refresh') return send(400, { error: 'invalid_grant', error_description: 'Token has been expired or revoked.' });
        return send(200, { access_token: 'ya29.from-user', expires_in: 3599, token_type: 'Bearer' });
      }
      return send(400, { error: 'unsupported_grant_type' });
    })());
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  port = (server.address() as AddressInfo).port;
  t.teardown(() => new Promise<void>((r) => {
    server.closeAllConnections();
    server.close(() => r());
  }));
  return { host: `127.0.0.1:${port}`, tokenUri: `http://127.0.0.1:${port}/token`, asked };
}

t.test('application default credentials: service-account key, gcloud user file, metadata server; one token for every page', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'gce.json');
  writeFileSync(file, JSON.stringify({ 'europe-west1-b': [gce('101', 'RUNNING', {})], 'europe-west1-c': [gce('102', 'STOPPED', {})] }));
  const g = await fakeGce(t, file, new Set(['ya29.from-service-account', 'ya29.from-user', 'ya29.from-metadata']));
  const { publicKey, privateKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const auth = await fakeGoogleAuth(t, publicKey.export({ type: 'spki', format: 'pem' }).toString());
  const pkcs8 = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const keyFile = join(dir, 'sa.json');
  writeFileSync(keyFile, JSON.stringify({
    type: 'service_account', project_id: 'proj-1', private_key_id: 'kid-1', private_key: pkcs8,
    client_email: 'discovery@proj-1.iam.gserviceaccount.com', client_id: '1', token_uri: auth.tokenUri,
  }));
  const spec = (credentials?: unknown) => checkManager({ id: 'g', type: 'gcp', config: { project: 'proj-1', endpoint: g.url }, ...(credentials !== undefined && { credentials }) });
  const ids = async (env: NodeJS.ProcessEnv, credentials?: unknown) =>
    (await gcpDriver(spec(credentials), env, { baseDelayMs: 5 }).list()).map((i) => `${i.source_id}:${i.state}`);

  // 1. GOOGLE_APPLICATION_CREDENTIALS names a service-account key: a signed JWT exchanged once.
  t.same(await ids({ GOOGLE_APPLICATION_CREDENTIALS: keyFile, GCE_METADATA_HOST: auth.host }), ['101:running', '102:stopped']);
  t.same(auth.asked, [{ kind: 'jwt', scope: 'https://www.googleapis.com/auth/compute.readonly', kid: 'kid-1', lifetime: 3600 }], 'one exchange for two pages');
  t.same(g.seen.map((s) => s.auth), ['Bearer ya29.from-service-account', 'Bearer ya29.from-service-account']);

  // The same key named by a manager's env reference (credentials_file).
  auth.asked.length = 0;
  t.same(await ids({ CAPSTAN_GCP_KEY: keyFile }, { source: 'env', vars: { credentials_file: 'CAPSTAN_GCP_KEY' } }), ['101:running', '102:stopped']);
  t.match(auth.asked, [{ kind: 'jwt', kid: 'kid-1' }]);

  // 2. No variable: gcloud's application default credentials file (authorized_user).
  auth.asked.length = 0;
  const gcloud = join(dir, 'gcloud');
  mkdirSync(gcloud);
  writeFileSync(join(gcloud, 'application_default_credentials.json'), JSON.stringify({
    type: 'authorized_user', client_id: 'cid.apps.googleusercontent.com', client_secret: 'local-client-secret', refresh_token: '1//local-refresh', token_uri: auth.tokenUri,
  }));
  t.same(await ids({ CLOUDSDK_CONFIG: gcloud, GCE_METADATA_HOST: auth.host }), ['101:running', '102:stopped']);
  t.same(auth.asked, [{ kind: 'refresh', client_id: 'cid.apps.googleusercontent.com' }]);

  // 3. Neither: the instance's service account, from the metadata server.
  auth.asked.length = 0;
  t.same(await ids({ CLOUDSDK_CONFIG: join(dir, 'none'), GCE_METADATA_HOST: auth.host }), ['101:running', '102:stopped']);
  t.same(auth.asked, [{ kind: 'metadata', flavor: 'Google', scopes: 'https://www.googleapis.com/auth/compute.readonly' }]);
});

t.test('credentials that Google refuses or that cannot be found are unreachable with the reason, never the key', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'gce.json');
  writeFileSync(file, JSON.stringify({ 'europe-west1-b': [] }));
  const g = await fakeGce(t, file);
  const trusted = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const auth = await fakeGoogleAuth(t, trusted.publicKey.export({ type: 'spki', format: 'pem' }).toString());
  const other = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const keyFile = join(dir, 'sa.json');
  writeFileSync(keyFile, JSON.stringify({ type: 'service_account', private_key: other, client_email: 'discovery@proj-1.iam.gserviceaccount.com', token_uri: auth.tokenUri }));
  const spec = checkManager({ id: 'g', type: 'gcp', config: { project: 'proj-1', endpoint: g.url } });
  const test = (env: NodeJS.ProcessEnv) => gcpDriver(spec, env, { baseDelayMs: 5 }).test();

  const refused = await test({ GOOGLE_APPLICATION_CREDENTIALS: keyFile });
  t.match(refused, { reachable: false, error: /token endpoint 127\.0\.0\.1:\d+ answered HTTP 400: invalid_grant: Invalid JWT Signature/ });
  t.notMatch(refused.error, /PRIVATE KEY|ya29/);
  t.equal(g.seen.length, 0, 'no listing call without a token');

  writeFileSync(keyFile, JSON.stringify({ type: 'external_account' }));
  t.match(await test({ GOOGLE_APPLICATION_CREDENTIALS: keyFile }), { reachable: false, error: /type "external_account" is not service_account or authorized_user/ });
  writeFileSync(keyFile, JSON.stringify({ type: 'service_account', private_key: other, client_email: 'x@y', token_uri: 'http://token.example.com/token' }));
  t.match(await test({ GOOGLE_APPLICATION_CREDENTIALS: keyFile }), { reachable: false, error: /token_uri must be https/ });
  t.match(await test({ GOOGLE_APPLICATION_CREDENTIALS: join(dir, 'absent.json') }), { reachable: false, error: /cannot read key file/ });
  // No key file anywhere and no metadata server (a closed port): said plainly.
  t.match(await test({ CLOUDSDK_CONFIG: join(dir, 'none'), GCE_METADATA_HOST: '127.0.0.1:1' }), { reachable: false, error: /no credentials: .*metadata server 127\.0\.0\.1:1 is unreachable/ });

  t.throws(() => checkManager({ id: 'g', type: 'gcp', config: { project: 'p' }, credentials: { source: 'env', vars: {} } }), { code: 'ERR_MANAGER_INVALID' });
  t.throws(() => checkManager({ id: 'g', type: 'gcp', config: { project: 'p' }, credentials: { source: 'env', vars: { access_token: 'A', credentials_file: 'B' } } }), { code: 'ERR_MANAGER_INVALID' });
});

t.test('a zone the listing could not reach fails the poll instead of making its instances missing', async (t) => {
  const dir = programDir(t);
  const file = join(dir, 'gce.json');
  writeFileSync(file, JSON.stringify({ 'europe-west1-b': [gce('101', 'RUNNING', {})] }));
  process.env.CAPSTAN_TEST_GCP_TOKEN = TOKEN;
  const spec = (filters?: unknown) => checkManager({
    id: 'g', type: 'gcp', config: { project: 'proj-1', endpoint: g.url }, credentials: { source: 'env', vars: { access_token: 'CAPSTAN_TEST_GCP_TOKEN' } },
    ...(filters !== undefined && { filters }),
  });
  // returnPartialSuccess: the failed scopes are listed in `unreachables`.
  let g = await fakeGce(t, file, undefined, { unreachables: ['zones/asia-east1-a'] });
  await t.rejects(gcpDriver(spec(), process.env, { baseDelayMs: 5 }).list(), { code: 'ERR_PROVIDER', message: /could not reach zones\/asia-east1-a; poll not applied/ });
  t.same((await gcpDriver(spec({ regions: { include: ['europe-'] } }), process.env, { baseDelayMs: 5 }).list()).map((i) => i.source_id), ['101'],
    'a zone the region filters leave out does not matter');
  // Without it, an unreachable scope carries the warning UNREACHABLE.
  g = await fakeGce(t, file, undefined, { items: { 'zones/europe-west1-b': { instances: [gce('101', 'RUNNING', {})] }, 'zones/europe-west1-d': { warning: { code: 'UNREACHABLE', message: 'The resource is not available' } } } });
  await t.rejects(gcpDriver(spec(), process.env, { baseDelayMs: 5 }).list(), { code: 'ERR_PROVIDER', message: /could not reach zones\/europe-west1-d/ });
});
