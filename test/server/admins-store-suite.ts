/**
 * Named admins and the audit log in the store, written once and run on every backend by
 * store-sqlite.test.ts and store-postgres.test.ts. (Not named `.test.ts`.)
 */
import type { Test } from 'tap';
import type { AuditInsert } from '@capstan/server/store/index';
import { lifecyclePolicy, sweep } from '@capstan/server/registry/lifecycle';
import { loadServerConfig } from '@capstan/server/config';
import { setup, type Backend } from './store-suite.js';
import { registryOn } from '../helpers/node-changes.js';

const audit = (at: string, over: Partial<AuditInsert> = {}): AuditInsert => ({
  at, admin: 'alice', role: 'operator', action: 'node.accept', target: 'n1', method: 'POST',
  path: '/api/1/nodes/n1/accept', address: '127.0.0.1', status: 200, error: null,
  actor_kind: 'admin', actor: over.admin === undefined ? 'alice' : over.admin, before: null, after: null, ...over,
});

export function adminsStoreSuite(t: Test, backend: Backend): void {
  t.test('admins: create, find by digest, a live name is taken, revoke, replace token, re-create a revoked name', async (t) => {
    const { store } = await setup(t, backend);
    const a = store.admins;
    const made = await a.createAdmin({ name: 'alice', role: 'operator', token_digest: 'aa'.repeat(32), created_at: '2024-05-01T08:00:00.000Z', expires_at: '2025-05-01T08:00:00.000Z' });
    t.same(made, { name: 'alice', role: 'operator', created_at: '2024-05-01T08:00:00.000Z', expires_at: '2025-05-01T08:00:00.000Z', revoked_at: null, last_used_at: null });
    await t.rejects(a.createAdmin({ name: 'alice', role: 'viewer', token_digest: 'bb'.repeat(32), created_at: '2024-05-01T09:00:00.000Z', expires_at: null }), { code: 'ERR_CONFLICT' });
    t.match(await a.adminByDigest('aa'.repeat(32)), { name: 'alice', token_digest: 'aa'.repeat(32) });
    t.equal(await a.adminByDigest('cc'.repeat(32)), null);
    await a.touchAdmin('alice', '2024-05-02T08:00:00.000Z');
    t.equal((await a.getAdmin('alice'))!.last_used_at, '2024-05-02T08:00:00.000Z');
    t.match(await a.replaceToken('alice', 'dd'.repeat(32)), { name: 'alice' });
    t.equal(await a.adminByDigest('aa'.repeat(32)), null, 'the old token is gone');
    t.ok(await a.revokeAdmin('alice', '2024-05-03T08:00:00.000Z'));
    t.notOk(await a.revokeAdmin('alice', '2024-05-03T09:00:00.000Z'), 'revoked once');
    t.notOk(await a.revokeAdmin('nobody', '2024-05-03T09:00:00.000Z'));
    t.equal(await a.replaceToken('alice', 'ee'.repeat(32)), null, 'no new token for a revoked admin');
    t.equal((await a.getAdmin('alice'))!.revoked_at, '2024-05-03T08:00:00.000Z');
    const again = await a.createAdmin({ name: 'alice', role: 'viewer', token_digest: 'ff'.repeat(32), created_at: '2024-05-04T08:00:00.000Z', expires_at: null });
    t.same(again, { name: 'alice', role: 'viewer', created_at: '2024-05-04T08:00:00.000Z', expires_at: null, revoked_at: null, last_used_at: null });
    await a.createAdmin({ name: 'bob', role: 'admin', token_digest: '11'.repeat(32), created_at: '2024-05-04T08:00:00.000Z', expires_at: null });
    t.same((await a.listAdmins()).map((x) => x.name), ['alice', 'bob']);
    t.equal(await a.getAdmin('nobody'), null);
  });

  t.test('console sign-outs: kept until they expire, then dropped by the next sign-out', async (t) => {
    const { store } = await setup(t, backend);
    const a = store.admins;
    await a.endConsoleSignIn('s1', '2026-11-25T13:00:00.000Z', '2026-11-25T12:00:00.000Z');
    await a.endConsoleSignIn('s1', '2026-11-25T13:00:00.000Z', '2026-11-25T12:00:00.000Z');
    t.equal(await a.consoleSignInEnded('s1', '2026-11-25T12:30:00.000Z'), true, 'ended (twice is once)');
    t.equal(await a.consoleSignInEnded('s2', '2026-11-25T12:30:00.000Z'), false);
    t.equal(await a.consoleSignInEnded('s1', '2026-11-25T13:00:00.001Z'), false, 'past its expiry it no longer matters');
    await a.endConsoleSignIn('s2', '2026-11-25T15:00:00.000Z', '2026-11-25T14:00:00.000Z');
    t.equal(await a.consoleSignInEnded('s1', '2026-11-25T12:30:00.000Z'), false, 'the expired one was pruned');
    t.equal(await a.consoleSignInEnded('s2', '2026-11-25T14:30:00.000Z'), true);
    t.equal(await a.consoleSignInEnded('s\u0000x', '2026-11-25T14:30:00.000Z'), false, 'an id with U+0000 was never ended');
  });

  t.test('audit: filters, newest first, paging', async (t) => {
    const { store } = await setup(t, backend);
    const a = store.admins;
    await a.insertAudit(audit('2024-05-01T08:00:00.000Z'));
    await a.insertAudit(audit('2024-05-01T09:00:00.000Z', { admin: 'bob', role: 'admin', action: 'rule.update', target: 'r1', method: 'PUT', path: '/api/1/rules/r1' }));
    await a.insertAudit(audit('2024-05-01T10:00:00.000Z', { status: 403, error: 'ERR_FORBIDDEN', action: 'node.delete', method: 'DELETE' }));
    await a.insertAudit(audit('2024-05-01T11:00:00.000Z', { admin: null, role: null, status: 401, error: 'ERR_UNAUTHORIZED', target: null }));
    const all = await a.listAudit({ page: 1, per_page: 10 });
    t.equal(all.total, 4);
    t.same(all.rows.map((r) => r.at), ['2024-05-01T11:00:00.000Z', '2024-05-01T10:00:00.000Z', '2024-05-01T09:00:00.000Z', '2024-05-01T08:00:00.000Z']);
    t.match(all.rows[1], { admin: 'alice', role: 'operator', action: 'node.delete', target: 'n1', method: 'DELETE', status: 403, error: 'ERR_FORBIDDEN', address: '127.0.0.1' });
    t.equal(all.rows[0]!.admin, null);
    const ids = async (q: Parameters<typeof a.listAudit>[0]) => (await a.listAudit(q)).rows.map((r) => r.at.slice(11, 13));
    t.same(await ids({ admin: 'bob', page: 1, per_page: 10 }), ['09']);
    t.same(await ids({ action: 'node.accept', page: 1, per_page: 10 }), ['11', '08']);
    t.same(await ids({ target: 'r1', page: 1, per_page: 10 }), ['09']);
    t.same(await ids({ result: 'error', page: 1, per_page: 10 }), ['11', '10']);
    t.same(await ids({ result: 'ok', page: 1, per_page: 10 }), ['09', '08']);
    t.same(await ids({ from: '2024-05-01T09:00:00Z', to: '2024-05-01T11:00:00+00:00', page: 1, per_page: 10 }), ['10', '09'], 'from inclusive, to exclusive');
    const p2 = await a.listAudit({ page: 2, per_page: 3 });
    t.equal(p2.total, 4);
    t.same(p2.rows.map((r) => r.at.slice(11, 13)), ['08']);
    t.same(await ids({ admin: 'nul\u0000', page: 1, per_page: 10 }), [], 'an impossible name finds nothing');
  });

  t.test('audit: the sweep deletes records past retention.audit and beyond retention.audit_max_rows, in batches', async (t) => {
    const { store } = await setup(t, backend);
    const a = store.admins;
    for (let i = 0; i < 10; i++) await a.insertAudit(audit(`2023-01-0${i < 9 ? i + 1 : 9}T08:00:00.000Z`));
    for (let i = 0; i < 1005; i++) await a.insertAudit(audit(new Date(Date.UTC(2024, 4, 1, 8, 0, i)).toISOString(), { target: `n${i}` }));
    const config = loadServerConfig({ overrides: { 'retention.audit': '365d', 'retention.audit_max_rows': '1000', 'retention.batch_size': '3' } });
    const r = await sweep(store, registryOn(store), lifecyclePolicy(config), new Date('2024-06-01T00:00:00Z'));
    t.equal(r.audit_deleted, 15, '10 by age, then 5 oldest beyond the cap');
    const left = await a.listAudit({ page: 1, per_page: 1000 });
    t.equal(left.total, 1000);
    t.equal(left.rows.at(-1)!.target, 'n5', 'the oldest kept is the 6th of the recent ones');
    t.equal((await sweep(store, registryOn(store), lifecyclePolicy(config), new Date('2024-06-01T00:00:00Z'))).audit_deleted, 0);
  });
}
