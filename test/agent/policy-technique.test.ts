/**
 * A technique's directive on the agent (agent/src/policy/calls.ts): calls run in order with real
 * methods in a temporary directory, a call whose `if` is false reports not applicable, and a
 * property over random techniques and outcomes (stand-in methods): the agent runs exactly the
 * calls the shared resultCondition allows, reports exactly the components the server expects,
 * and the server's replay of its reports finds them consistent. Then secrets: filled in for the
 * method, never in the run log, even when a method fails with the value in its message.
 */
import { generateKeyPairSync } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import fc from 'fast-check';
import {
  bundleExpectations, callOutcome, checkCallReports, computeCompliance, fileContentSpec, parseRunLog, recordOutcome, resultCondition, sealForNode,
  secretMarker, silentLogger, summarize, type BundleDirective, type CallOutcome, type Report, type TechniqueCall,
} from '@capstan/shared';
import { applyDirectives, nodeConditionEnv, type ApplyOptions } from '@capstan/agent/policy/apply';
import { RunLogWriter } from '@capstan/agent/runlog/write';
import type { Method, Status } from '@capstan/agent/methods/types';
import { testDiffSettings } from '../helpers/diff.js';

const AT = new Date('2026-01-01T00:00:00Z');

async function run(directives: BundleDirective[], extra: Partial<ApplyOptions> = {}, log = silentLogger) {
  const w = new RunLogWriter({ nodeId: 'node1', configId: 'cfg1', startedAt: AT, clock: () => AT });
  w.start();
  await applyDirectives(directives, {
    writer: w, forceAudit: false, conditionEnv: nodeConditionEnv(['node1'], { role: 'web' }, process.env),
    ctx: { dryRun: false, log, env: process.env, commandTimeoutMs: 10_000, sysctlRoot: '/proc/sys', diff: testDiffSettings(), fetchShared: async () => Buffer.alloc(0) },
    ...extra,
  });
  w.end();
  const text = w.text();
  return { text, w, reports: parseRunLog(text, { node_id: 'node1', timestamp: '2026-01-01T00:00:00+00:00' }).reports };
}

const directive = (calls: TechniqueCall[], extra: Partial<BundleDirective> = {}): BundleDirective => ({
  id: 'tech', name: 'tech', method: 'technique', technique: { id: 't', version: '1.0' }, params: {}, mode: 'enforce', rule_id: 'r1', calls, ...extra,
});
const mine = (reports: Report[]) => reports.filter((r) => r.directive_id === 'tech' && !r.event_type.startsWith('log_')).map((r) => `${r.component}=${r.event_type}`);

t.test('calls run in order; an if over an earlier repair decides the next call', async (t) => {
  const dir = t.testdir();
  const calls: TechniqueCall[] = [
    { id: 'conf', component: 'Config', method: 'file_content', params: { path: join(dir, 'app.conf'), content: 'a=1\n' } },
    { id: 'stamp', component: 'Reload stamp', method: 'file_content', params: { path: join(dir, 'reloaded'), content: 'yes\n' }, if: "repaired('conf')" },
    { id: 'only-db', component: 'DB only', method: 'file_absent', params: { path: join(dir, 'x') }, condition: "fact('role') == 'db'" },
    { id: 'audit', component: 'Audited', method: 'file_content', params: { path: join(dir, 'audited'), content: 'z' }, mode: 'audit' },
  ];
  const first = await run([directive(calls)]);
  t.same(mine(first.reports), ['Config=result_repaired', 'Reload stamp=result_repaired', 'DB only=result_na', 'Audited=audit_noncompliant']);
  t.equal(await readFile(join(dir, 'reloaded'), 'utf8'), 'yes\n');
  t.equal(first.reports.find((r) => r.component === 'Config')!.policy, 'file_content', "a call's reports name its method");
  const second = await run([directive(calls)]);
  t.same(mine(second.reports), ['Config=result_success', 'Reload stamp=result_na', 'DB only=result_na', 'Audited=audit_noncompliant'], 'nothing repaired: the if is false');
  const c = computeCompliance(bundleExpectations([directive(calls)]).filter((e) => e.rule_id === 'r1'), summarize(second.reports).outcomes).counts;
  t.equal(c.missing + c.unexpected, 0, 'every expected component reported, nothing else');
  const audited = await run([directive(calls, { mode: 'audit' })]);
  t.ok(mine(audited.reports).every((x) => x.endsWith('audit_compliant') || x.endsWith('audit_na') || x.endsWith('audit_noncompliant')), 'an audit directive audits every call');
  const off = await run([directive(calls, { condition: "fact('role') == 'db'" })]);
  t.same(mine(off.reports), ['Config=result_na', 'Reload stamp=result_na', 'DB only=result_na', 'Audited=audit_na'], "the directive's condition rules every call");
  const broken = await run([directive([{ id: 'a', component: 'Bad', method: 'file_content', params: { path: 'relative' } }, { id: 'b', component: 'Nope', method: 'no_such', params: {} }])]);
  t.same(mine(broken.reports), ['Bad=result_error', 'Nope=result_error'], 'bad params and unknown methods are reported errors');
});

t.test('property: the agent runs what resultCondition allows and reports what the server expects', async (t) => {
  const planned = new Map<string, Status>();
  const ran: string[] = [];
  // file_content's shared spec (so the server's expectations are the real ones) with a stand-in apply.
  const stand: Method<any> = {
    ...fileContentSpec,
    apply: async (p: { path: string }) => {
      const id = p.path.slice(3);
      ran.push(id);
      return [{ component: 'File content', key: p.path, status: planned.get(id)!, message: 'planned' }];
    },
  };
  const fn = fc.constantFrom('repaired', 'error', 'kept', 'ok', 'skipped');
  const arb = fc.array(fc.record({ status: fc.constantFrom<Status>('success', 'repaired', 'error'), audit: fc.boolean(), refs: fc.array(fc.tuple(fn, fc.nat(), fc.boolean()), { maxLength: 3 }), or: fc.boolean() }), { minLength: 1, maxLength: 7 });
  await fc.assert(fc.asyncProperty(arb, async (specs) => {
    planned.clear();
    ran.length = 0;
    const calls: TechniqueCall[] = specs.map((s, i) => {
      const id = `c${i}`;
      planned.set(id, s.audit && s.status === 'repaired' ? 'noncompliant' : s.audit && s.status === 'success' ? 'compliant' : s.status);
      const terms = i === 0 ? [] : s.refs.map(([f, n, neg]) => `${neg ? '!' : ''}${f}('c${n % i}')`);
      return { id, component: `Step ${i}`, method: 'file_content', params: { path: `/p/${id}`, content: 'x' }, ...(s.audit && { mode: 'audit' as const }),
        ...(terms.length > 0 && { if: terms.join(s.or ? ' || ' : ' && ') }) };
    });
    const { reports } = await run([directive(calls)], { methods: new Map([['file_content', stand]]) });
    // The model: the shared decision over the planned outcomes, call by call.
    const outcomes = new Map<string, CallOutcome>();
    const expectRan: string[] = [];
    for (const c of calls) {
      const go = c.if === undefined || resultCondition(c.if, outcomes) === true;
      if (go) expectRan.push(c.id);
      const type = go ? ({ success: 'result_success', repaired: 'result_repaired', error: 'result_error', compliant: 'audit_compliant', noncompliant: 'audit_noncompliant' } as Record<string, string>)[planned.get(c.id)!]! : 'result_na';
      recordOutcome(outcomes, c.id, callOutcome([type]));
    }
    const reported = new Map(reports.filter((r) => r.directive_id === 'tech').map((r) => [r.component, r.event_type]));
    const expected = bundleExpectations([directive(calls)]).filter((e) => e.directive_id === 'tech').map((e) => e.component);
    return JSON.stringify(ran) === JSON.stringify(expectRan)
      && JSON.stringify([...reported.keys()]) === JSON.stringify(expected)
      && checkCallReports(calls, reported).every((c) => c.consistent);
  }), { numRuns: 150 });
});

t.test('secrets: filled in for the method, never written to the run log', async (t) => {
  const dir = t.testdir();
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  const keyPem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  const SECRET = 's3cr3t-Value';
  const secrets = { db_pw: sealForNode(SECRET, publicKey.export({ type: 'spki', format: 'pem' }).toString()) };
  const conf = join(dir, 'db.conf');
  const directives: BundleDirective[] = [
    { id: 'conf', name: 'conf', method: 'file_content', params: { path: conf, content: `password=${secretMarker('db_pw')}\n` }, mode: 'enforce', rule_id: 'r1' },
    // A method that fails with the value in its message: the command is not found.
    { id: 'fails', name: 'fails', method: 'command_check', params: { command: join(dir, `no-such-${secretMarker('db_pw')}`) }, mode: 'enforce', rule_id: 'r1' },
    directive([{ id: 'c', component: 'In a technique', method: 'file_content', params: { path: join(dir, 'other'), content: secretMarker('db_pw') } }], { secrets }),
    { id: 'missing', name: 'missing', method: 'file_content', params: { path: join(dir, 'm'), content: secretMarker('other') }, mode: 'enforce', rule_id: 'r1' },
  ];
  const logged: unknown[] = [];
  const log = { ...silentLogger, warn: (...a: unknown[]) => logged.push(a), error: (...a: unknown[]) => logged.push(a) };
  const { text, reports } = await run(directives, { nodeKeyPem: keyPem, bundleSecrets: secrets }, log);
  t.equal(await readFile(conf, 'utf8'), `password=${SECRET}\n`, 'the file has the value');
  t.equal(await readFile(join(dir, 'other'), 'utf8'), SECRET);
  t.notOk(text.includes(SECRET), 'the run log never holds the value');
  t.notOk(JSON.stringify(logged).includes(SECRET), 'nor do log lines');
  const fails = reports.find((r) => r.directive_id === 'fails' && r.event_type === 'audit_error');
  t.ok(fails && fails.msg.includes('********'), `the failure is reported, value redacted: ${fails?.msg}`);
  const diff = reports.find((r) => r.directive_id === 'conf' && r.event_type === 'log_info');
  t.match(diff?.msg, /secret value: diff not shown/, 'a directive that used a secret shows no diff content');
  t.match(reports.find((r) => r.directive_id === 'missing')?.event_type, 'result_error', 'a secret the policy does not carry is an error');
  const noKey = await run(directives.slice(0, 1));
  t.equal(noKey.reports.find((r) => r.directive_id === 'conf')?.event_type, 'result_error', 'without the node key nothing is applied');
});
