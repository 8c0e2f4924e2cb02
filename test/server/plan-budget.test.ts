/**
 * POST /api/1/policy/plan cannot hold the server (server/src/api/plan-budget.ts): a body over
 * [policy] max_plan_size is 413, a plan past plan_time_limit is answered 503 ERR_PLAN_TIMEOUT
 * soon after it, a caller with a plan running is answered 429 ERR_PLAN_BUSY, and meanwhile
 * another request is answered.
 */
import t from 'tap';
import { adminApp } from '../helpers/admin-app.js';

/** Small and dear: techniques and the directives using them, every one rendered for the plan. */
function dearPlan(techniques = 2000, directives = 4000) {
  const ts = Array.from({ length: techniques }, (_, i) => ({
    id: `t${i}`, name: `T${i}`, version: '1.0', parameters: [{ name: 'p', type: 'string', default: 'x' }],
    calls: [{ id: 'c', method: 'package_present', params: { name: '{{params.p}}' } }],
  }));
  const ds = Array.from({ length: directives }, (_, i) => ({ id: `d${i}`, name: `D${i}`, method: 'technique', technique: { id: `t${i % techniques}`, version: '1.0' }, params: {} }));
  const rules = Array.from({ length: Math.ceil(directives / 1000) }, (_, k) => ({
    id: `r${k}`, directives: ds.slice(k * 1000, k * 1000 + 1000).map((d) => d.id), groups: ['all-nodes'],
  }));
  return { techniques: ts, directives: ds, rules };
}

t.test('a plan is bounded in size, time and concurrency; other requests are answered meanwhile', async (t) => {
  const { api } = await adminApp(t, { maxPlanBytes: 64 * 1024, overrides: { 'policy.plan_time_limit': '300ms', 'policy.max_plan_size': '64KiB' } });

  const big = await api('POST', '/api/1/policy/plan', { directives: Array.from({ length: 2000 }, (_, i) => ({ id: `m${i}`, method: 'file_absent', params: { path: `/tmp/${i}` } })) });
  t.same([big.status, big.code], [413, 'ERR_BODY_TOO_LARGE'], 'a body over max_plan_size');

  const { api: api2 } = await adminApp(t, { overrides: { 'policy.plan_time_limit': '300ms' } });
  let slowest = 0;
  let stop = false;
  const other = (async () => {
    while (!stop) {
      const s = performance.now();
      t.equal((await api2('GET', '/api/1/system/status')).status, 200);
      slowest = Math.max(slowest, performance.now() - s);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  const started = performance.now();
  const dear = api2('POST', '/api/1/policy/plan', dearPlan());
  // The same caller again while it runs: refused at once.
  let busy: string | undefined;
  for (let i = 0; i < 500 && busy === undefined; i++) {
    const r = await api2('POST', '/api/1/policy/plan', { directives: [] });
    if (r.code === 'ERR_PLAN_BUSY') busy = `${r.status} ${r.code}`;
    else await new Promise((res) => setTimeout(res, 5));
  }
  t.equal(busy, '429 ERR_PLAN_BUSY', 'a second plan of the same caller');
  const r = await dear;
  const took = performance.now() - started;
  stop = true;
  await other;
  t.same([r.status, r.code], [503, 'ERR_PLAN_TIMEOUT'], 'stopped past plan_time_limit');
  t.ok(took < 4000, `answered in ${Math.round(took)} ms (limit 300 ms; the body is read and checked before the first check)`);
  t.ok(slowest < 2000, `another request waited at most ${Math.round(slowest)} ms`);
  // Its place is given back once the plan's work has stopped.
  let after: number | undefined;
  for (let i = 0; i < 200 && after !== 200; i++) {
    after = (await api2('POST', '/api/1/policy/plan', { directives: [] })).status;
    if (after !== 200) await new Promise((res) => setTimeout(res, 20));
  }
  t.equal(after, 200, 'the next plan of the caller runs');
});
