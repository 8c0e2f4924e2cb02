/**
 * Failed authentications are limited by address: a window's worth of 401s, then 429
 * ERR_AUTH_RATE_LIMITED whatever is sent (the right token too) until the window ends; the first
 * failure and the limit are in the audit log, the failures between only counted.
 */
import t from 'tap';
import { AuthFailures } from '@capstan/server/api/auth-limit';
import { adminApp, ADMIN_TOKEN } from '../helpers/admin-app.js';

t.test('three wrong tokens from one address: the fourth request is refused, the right token too, with Retry-After', async (t) => {
  const { api, send, store } = await adminApp(t, { overrides: { 'limits.auth_failures': 3, 'limits.auth_failure_window': '1m' } });
  t.equal((await api('GET', '/api/1/nodes')).status, 200, 'the right token before any failure');
  for (const [i, how] of [[1, 'Bearer wrong-1'], [2, 'Bearer wrong-2'], [3, '']] as const) {
    const r = await send('GET', '/api/1/nodes', undefined, {}, how);
    t.same([r.status, r.code], [401, 'ERR_UNAUTHORIZED'], `failure ${i}`);
  }
  const limited = await api('GET', '/api/1/nodes');
  t.same([limited.status, limited.code], [429, 'ERR_AUTH_RATE_LIMITED'], 'the right token is refused too');
  t.ok(Number(limited.headers['retry-after']) > 0 && Number(limited.headers['retry-after']) <= 60, 'Retry-After within the window');
  const signIn = await api('POST', '/console/sign-in', { token: ADMIN_TOKEN });
  t.equal(signIn.status, 429, 'and the console sign-in');
  t.equal((await send('GET', '/rudder/relay-api/1/system/status', undefined, {}, '')).status === 429, false, 'agent-facing endpoints are not covered');
  const audit = (await store.admins.listAudit({ page: 1, per_page: 50 })).rows.filter((r) => r.action.startsWith('auth.'));
  t.same(audit.map((r) => [r.action, r.status, r.admin, r.address]).reverse(), [['auth.failed', 401, null, '127.0.0.1'], ['auth.rate_limited', 429, null, '127.0.0.1']],
    'the first failure and the limit, not every failure');
});

t.test('a window ends, addresses are counted apart, and the tracked addresses are bounded', async (t) => {
  let now = 0;
  const f = new AuthFailures({ limit: 2, windowMs: 60_000, maxAddresses: 3, now: () => now });
  t.same([f.fail('a'), f.fail('a')], ['first', 'limited']);
  t.equal(f.blockedFor('a'), 60_000);
  t.equal(f.blockedFor('b'), 0, 'another address is not limited');
  now = 59_999;
  t.equal(f.blockedFor('a'), 1);
  now = 60_000;
  t.equal(f.blockedFor('a'), 0, 'a new window');
  t.equal(f.fail('a'), 'first');
  for (const x of ['b', 'c', 'd', 'e']) f.fail(x);
  t.equal(f.size, 3, 'the oldest windows forgotten first');
  t.equal(new AuthFailures({ limit: 0, windowMs: 1000 }).blockedFor('a'), 0, '0: no limit');
  const off = new AuthFailures({ limit: 0, windowMs: 1000 });
  for (let i = 0; i < 100; i++) off.fail('a');
  t.equal(off.blockedFor('a'), 0, 'never limited when off');
});
