/**
 * The agent's printed compliance and the server's figure for the same run come from one
 * computation on the same expectations. This property drives both ends over random policies
 * (methods, parameters, enforce or audit), random outcomes (every report type, components left
 * out, reports nobody expected, log lines, repeated reports) and random report orders: the
 * agent's run-log writer writes the run, the server's parser reads it back, the store judges it
 * against the policy's expectations, and the two answers must be equal.
 */
import { join } from 'node:path';
import t from 'tap';
import fc from 'fast-check';
import { bundleExpectations, computeCompliance, isCompleteRun, parseRunLog, summarize, type BundleDirective } from '@capstan/shared';
import { RunLogWriter } from '@capstan/agent/runlog/write';
import { complianceClock, complianceView } from '@capstan/server/registry/compliance';
import { openRegistry } from '@capstan/server/registry/open';
import { inventory } from '../server/store-suite.js';
import { programDir } from '../helpers/programs.js';
import { setAcceptance } from '../helpers/node-changes.js';

const METHODS: Array<[string, (i: number) => Record<string, unknown>]> = [
  ['file_content', (i) => ({ path: `/etc/app${i}.conf`, content: 'x' })],
  ['file_absent', (i) => ({ path: `/tmp/gone${i}` })],
  ['directory_present', (i) => ({ path: `/srv/d${i}` })],
  ['package_present', (i) => ({ name: `pkg${i}` })],
  ['service_running', (i) => ({ name: `svc${i}` })],
];
const ENFORCE = ['result_success', 'result_repaired', 'result_error', 'result_na'];
const AUDIT = ['audit_compliant', 'audit_noncompliant', 'audit_error', 'audit_na'];

const directiveArb = fc.record({ method: fc.integer({ min: 0, max: METHODS.length - 1 }), audit: fc.boolean(), rule: fc.integer({ min: 0, max: 2 }) });
/** What happens to one expected component: reported with one of its mode's types (maybe twice), or not at all. */
const fateArb = fc.record({ kind: fc.constantFrom('report', 'report', 'report', 'twice', 'missing'), type: fc.integer({ min: 0, max: 3 }), other: fc.integer({ min: 0, max: 3 }) });
const extraArb = fc.record({ type: fc.constantFrom(...ENFORCE, ...AUDIT, 'log_info', 'log_warn', 'result_weird'), component: fc.constantFrom('Stray', 'Other') });

t.test('the agent and the server agree on every run', async (t) => {
  const dir = programDir(t);
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  t.teardown(() => store.close());
  let round = 0;
  await fc.assert(fc.asyncProperty(
    fc.array(directiveArb, { minLength: 0, maxLength: 6 }), fc.array(fateArb, { minLength: 12, maxLength: 12 }),
    fc.array(extraArb, { maxLength: 3 }), fc.infiniteStream(fc.nat()),
    async (ds, fates, extras, order) => {
      round++;
      const nodeId = `node-${round}`;
      const directives: BundleDirective[] = ds.map((d, i) => ({
        id: `d${i}`, name: `d${i}`, rule_id: `rule${d.rule}`, method: METHODS[d.method]![0], params: METHODS[d.method]![1](i),
        mode: d.audit ? 'audit' : 'enforce',
      }) as BundleDirective);
      const expected = bundleExpectations(directives);
      // The reports the agent writes, in a random order (the control reports stay first and last).
      const reports: Array<{ event_type: string; rule_id: string; directive_id: string; component: string }> = [];
      expected.forEach((e, i) => {
        const fate = fates[i % fates.length]!;
        const audit = directives.find((d) => d.id === e.directive_id)?.mode === 'audit';
        const types = audit ? AUDIT : ENFORCE;
        if (fate.kind === 'missing') return;
        reports.push({ ...e, event_type: types[fate.type]! });
        if (fate.kind === 'twice') reports.push({ ...e, event_type: types[fate.other]! });
      });
      for (const x of extras) reports.push({ rule_id: 'rule0', directive_id: 'dx', component: x.component, event_type: x.type });
      const it = order[Symbol.iterator]();
      for (let i = reports.length - 1; i > 0; i--) {
        const j = it.next().value! % (i + 1);
        [reports[i], reports[j]] = [reports[j]!, reports[i]!];
      }
      const startedAt = new Date(Date.UTC(2024, 4, 1, 10, 0, 0));
      const w = new RunLogWriter({ nodeId, configId: `cfg-${round}`, startedAt, clock: () => startedAt });
      w.start();
      for (const r of reports) w.add({ policy: 'p', key_value: 'k', msg: 'm', ...r });
      w.end();
      const agent = computeCompliance(expected, summarize(w.reports).outcomes).counts;

      // The server: parse what was written, store it, judge it against the node's expectations.
      await store.upsertFromInventory(inventory(nodeId, { received_at: '2024-05-01T09:00:00Z' }));
      await setAcceptance(store, nodeId, 'accepted', '2024-05-01T09:00:00Z');
      await store.setExpectations(nodeId, `cfg-${round}`, expected, '2024-05-01T09:30:00Z');
      const log = parseRunLog(w.text(), { node_id: nodeId, timestamp: startedAt.toISOString() });
      const { counts, outcomes } = summarize(log.reports);
      await store.insertRun({
        node_id: nodeId, started_at: '2024-05-01T10:00:00Z', config_id: log.config_id, complete: isCompleteRun(log), report_count: log.reports.length,
        counts, outcomes, file_name: `x@${nodeId}.log`, sha256: 'f'.repeat(64), log_compressed: Buffer.from('x'), received_at: '2024-05-01T10:00:05Z',
      });
      const clock = complianceClock({ runIntervalMs: 300_000, missedRuns: 3, applyingGraceMs: 300_000 }, new Date('2024-05-01T10:01:00Z'));
      const server = complianceView((await store.getComplianceBase(nodeId))!, clock).summary.counts;
      const summed = (await store.complianceSummary([{ key: 'id', values: [nodeId] }], clock)).counts;
      if (JSON.stringify(agent) !== JSON.stringify(server) || JSON.stringify(server) !== JSON.stringify(summed)) {
        throw new Error(`agent ${JSON.stringify(agent)}\nserver ${JSON.stringify(server)}\nsummed ${JSON.stringify(summed)}`);
      }
    },
  ), { numRuns: 60 });
  t.pass('agent, node view and stored sums agree');
});
