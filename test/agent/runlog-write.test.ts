import { chmod, stat } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { parseRunLog, Redactor } from '@capstan/shared';
import { RunLogWriter } from '@capstan/agent/runlog/write';
import { selfChecks } from '@capstan/agent/checks';

const NODE = '11111111-2222-4333-8444-555555555555';

t.test('the run log the agent writes parses back as RUDDER reads it', async (t) => {
  let tick = Date.UTC(2026, 10, 22, 10, 0, 0);
  const w = new RunLogWriter({ nodeId: NODE, configId: 'cfg-7', startedAt: new Date(tick), clock: () => new Date((tick += 1000)) });
  w.start();
  w.add({ policy: 'Common', event_type: 'result_repaired', rule_id: 'r', directive_id: 'd', component: 'File', key_value: '/etc/motd', msg: 'line one\nline two' });
  w.end();
  const log = parseRunLog(w.text(), { node_id: NODE, timestamp: '2026-11-22T10:00:00+00:00' });
  t.equal(log.config_id, 'cfg-7');
  t.same(log.reports.map((r) => r.event_type), ['control', 'result_repaired', 'control']);
  t.equal(log.reports[1]!.msg, 'line one\nline two', 'multi-line messages survive');
  t.equal(log.reports[0]!.start_datetime, '2026-11-22T10:00:00+00:00');
  t.equal(log.reports[2]!.execution_datetime, '2026-11-22T10:00:03+00:00');
  t.same(w.reportCounts, { control: 2, result_repaired: 1 });
});

t.test('every line written after a secret is opened has its value redacted, log lines included', async (t) => {
  const redactor = new Redactor();
  const w = new RunLogWriter({ nodeId: NODE, configId: 'cfg-7', startedAt: new Date(0), clock: () => new Date(0), redact: (s) => redactor.redact(s) });
  redactor.add('pa55word');
  w.log('warning', 'could not use pa55word');
  w.start();
  w.add({ policy: 'Common', event_type: 'result_error', rule_id: 'r', directive_id: 'd', component: 'pa55word', key_value: 'k pa55word', msg: 'failed: pa55word' });
  w.end();
  t.notOk(w.text().includes('pa55word'));
  t.equal(w.text().match(/\*{8}/g)?.length, 4);
});

t.test('self-checks repair a node key readable by others, then report success', async (t) => {
  const dir = t.testdir({ 'agent.key': 'secret' });
  const keyPath = join(dir, 'agent.key');
  await chmod(keyPath, 0o644);
  const run = async () => {
    const w = new RunLogWriter({ nodeId: NODE, configId: 'none', startedAt: new Date(), clock: () => new Date() });
    await selfChecks(w, { stateDir: dir, keyPath });
    return w.reportCounts;
  };
  t.same(await run(), { result_success: 1, result_repaired: 1, log_info: 1 });
  const w = new RunLogWriter({ nodeId: NODE, configId: 'none', startedAt: new Date(), clock: () => new Date() });
  await chmod(keyPath, 0o640);
  await selfChecks(w, { stateDir: dir, keyPath });
  const reports = parseRunLog(w.text(), { node_id: NODE, timestamp: '2026-11-22T10:00:00+00:00' }).reports;
  t.match(reports.slice(-2), [
    { event_type: 'result_repaired', component: 'Node key', key_value: keyPath },
    { event_type: 'log_info', component: 'Node key', key_value: keyPath, msg: 'capstan-diff {"diff":"mode 0640 → 0600\\n","truncated":false}' },
  ], 'the repair, then what it changed');
  t.equal((await stat(keyPath)).mode & 0o777, 0o600);
  t.same(await run(), { result_success: 2 }, 'idempotent: nothing to repair the second time');
  t.same(await (async () => {
    const w = new RunLogWriter({ nodeId: NODE, configId: 'none', startedAt: new Date(), clock: () => new Date() });
    await selfChecks(w, { stateDir: join(dir, 'missing'), keyPath: join(dir, 'missing', 'k') });
    return w.reportCounts;
  })(), { result_error: 2 });
});
