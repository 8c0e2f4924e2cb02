/**
 * Each file method, in enforce and audit mode, writes what it changed (or would change) as a diff
 * report right after the change's report, read back here through the shared run-log parser.
 */
import { createHash } from 'node:crypto';
import { chmod, chown, readFile, stat, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { bundleExpectations, computeCompliance, countByType, summarize, isCompleteRun, parseDiffMessage, parseRunLog, silentLogger, TRUNCATED_LINE, type BundleDirective, type Report, type ReportDiff } from '@capstan/shared';
import { applyDirectives, nodeConditionEnv } from '@capstan/agent/policy/apply';
import { RunLogWriter } from '@capstan/agent/runlog/write';
import type { DiffSettings } from '@capstan/agent/methods/diff';
import { testDiffSettings } from '../helpers/diff.js';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

interface Opts {
  audit?: boolean;
  dryRun?: boolean;
  diff?: Partial<DiffSettings> & { globs?: string[]; stateDir?: string };
  shared?: Record<string, Buffer>;
  sysctlRoot?: string;
}

/** Apply the directives as a run does, and parse the run log it wrote. */
async function run(directives: Array<Omit<BundleDirective, 'rule_id' | 'name' | 'mode'>>, o: Opts = {}) {
  const w = new RunLogWriter({ nodeId: 'node1', configId: 'cfg1', startedAt: new Date('2026-01-01T00:00:00Z'), clock: () => new Date('2026-01-01T00:00:01Z') });
  const fetched: string[] = [];
  w.start();
  await applyDirectives(directives.map((d) => ({ name: d.id, mode: 'enforce', rule_id: 'rule1', ...d })), {
    writer: w,
    forceAudit: o.audit ?? false,
    conditionEnv: nodeConditionEnv(['node1'], {}, process.env),
    ctx: {
      dryRun: o.dryRun ?? false, log: silentLogger, env: process.env, commandTimeoutMs: 10_000, sysctlRoot: o.sysctlRoot ?? '/proc/sys',
      diff: testDiffSettings(o.diff),
      fetchShared: async (path) => {
        fetched.push(path);
        const b = o.shared?.[path];
        if (!b) throw new Error(`no ${path}`);
        return b;
      },
    },
  });
  w.end();
  const text = w.text();
  return { text, fetched, log: parseRunLog(text, { node_id: 'node1', timestamp: '2026-01-01T00:00:00+00:00' }) };
}

/** The directive's reports: its outcome, and the diff report after it (checked to match it field by field). */
function outcome(t: Test, reports: Report[], id: string): { type: string; msg: string; diff: ReportDiff | null } {
  const mine = reports.filter((r) => r.directive_id === id);
  const [main, next] = mine;
  t.ok(main, `${id} reported`);
  if (mine.length === 1) return { type: main!.event_type, msg: main!.msg, diff: null };
  t.equal(mine.length, 2, `${id}: one report and one diff report`);
  const { event_type, msg, execution_datetime: _e, ...same } = next!;
  const { event_type: _t, msg: _m, execution_datetime: _e2, ...sameMain } = main!;
  t.equal(event_type, 'log_info', 'a diff report is log_info');
  t.same(same, sameMain, 'same policy, rule, directive, report id, component and key as the change');
  t.equal(reports.indexOf(next!), reports.indexOf(main!) + 1, 'right after the change');
  const diff = parseDiffMessage(msg);
  t.ok(diff, 'a capstan-diff message');
  return { type: main!.event_type, msg: main!.msg, diff };
}

t.test('file_content: content diff in enforce, the same diff in audit, nothing once compliant', async (t) => {
  const dir = t.testdir({ 'motd': 'welcome\nold line\n' });
  const path = join(dir, 'motd');
  const d = [{ id: 'motd', method: 'file_content', params: { path, content: 'welcome\nnew line\n' } }];
  const want = `--- a${path}\n+++ b${path}\n@@ -1,2 +1,2 @@\n welcome\n-old line\n+new line\n`;

  const audit = await run(d, { audit: true });
  t.match(outcome(t, audit.log.reports, 'motd'), { type: 'audit_noncompliant', diff: { diff: want, truncated: false } });
  t.equal(await readFile(path, 'utf8'), 'welcome\nold line\n', 'audit changed nothing');

  const enforce = await run(d);
  t.match(outcome(t, enforce.log.reports, 'motd'), { type: 'result_repaired', diff: { diff: want, truncated: false } });
  t.equal(await readFile(path, 'utf8'), 'welcome\nnew line\n');

  const again = await run(d);
  t.match(outcome(t, again.log.reports, 'motd'), { type: 'result_success', diff: null }, 'no change, no diff report');

  // Content and mode at once; then a file that did not exist.
  await chmod(path, 0o644);
  const both = await run([{ id: 'motd', method: 'file_content', params: { path, content: 'x\n', mode: '0600' } }]);
  t.match(outcome(t, both.log.reports, 'motd'), { type: 'result_repaired', diff: { diff: /^--- a.*\n-welcome\n-new line\n\+x\nmode 0644 → 0600\n$/s } });
  const fresh = join(dir, 'sub', 'new.conf');
  const created = await run([{ id: 'new', method: 'file_content', params: { path: fresh, content: 'a = 1\n', mode: '0640' } }]);
  t.match(outcome(t, created.log.reports, 'new'), {
    type: 'result_repaired', diff: { diff: `created ${fresh} (mode 0640)\n--- /dev/null\n+++ b${fresh}\n@@ -0,0 +1,1 @@\n+a = 1\n` },
  });
});

t.test('file_line_present: the added line as a diff, in enforce and audit', async (t) => {
  const dir = t.testdir({ hosts: '127.0.0.1 localhost' });
  const path = join(dir, 'hosts');
  const d = [{ id: 'h', method: 'file_line_present', params: { path, line: '10.0.0.1 db' } }];
  const want = `--- a${path}\n+++ b${path}\n@@ -1,1 +1,2 @@\n-127.0.0.1 localhost\n\\ No newline at end of file\n+127.0.0.1 localhost\n+10.0.0.1 db\n`;
  t.match(outcome(t, (await run(d, { audit: true })).log.reports, 'h'), { type: 'audit_noncompliant', diff: { diff: want } });
  t.match(outcome(t, (await run(d)).log.reports, 'h'), { type: 'result_repaired', diff: { diff: want } });
  t.equal(await readFile(path, 'utf8'), '127.0.0.1 localhost\n10.0.0.1 db\n');
});

t.test('file_absent: a diff to /dev/null, a note for a link', async (t) => {
  const dir = t.testdir({ old: 'gone soon\n', target: 'kept\n', link: t.fixture('symlink', 'target') });
  const path = join(dir, 'old');
  const d = [{ id: 'old', method: 'file_absent', params: { path } }];
  const want = `deleted ${path}\n--- a${path}\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-gone soon\n`;
  t.match(outcome(t, (await run(d, { audit: true })).log.reports, 'old'), { type: 'audit_noncompliant', diff: { diff: want } });
  t.match(outcome(t, (await run(d)).log.reports, 'old'), { type: 'result_repaired', diff: { diff: want } });
  const link = join(dir, 'link');
  const l = await run([{ id: 'link', method: 'file_absent', params: { path: link } }]);
  t.match(outcome(t, l.log.reports, 'link'), { type: 'result_repaired', diff: { diff: `deleted ${link} (a symbolic link)\n` } });
  t.notMatch(l.text, /kept/, 'nothing of what the link pointed to');
});

// A repair's diff read through a symbolic link at the managed path: a link to a root-only file
// (the admin token, cloud credentials, sudoers) put its content into the run log, and so into
// every viewer's GET /api/1/changes. Nothing read through a link (at the path or in the
// directories above it) is shown, by any file method, in enforce, audit or dry runs.
t.test('a link at the managed path, or above it: the change is reported without a byte of what it points to', async (t) => {
  const SECRET = 'TOKEN-4f1d9a-root-only\n';
  const cases: Array<[string, (path: string) => Omit<BundleDirective, 'rule_id' | 'name' | 'mode'>, Record<string, Buffer>?]> = [
    ['file_content', (path) => ({ id: 'd', method: 'file_content', params: { path, content: 'public\n' } })],
    ['file_line_present', (path) => ({ id: 'd', method: 'file_line_present', params: { path, line: 'public' } })],
    ['file_from_shared_folder', (path) => ({ id: 'd', method: 'file_from_shared_folder', params: { source: 'p', path, sha256: sha('public\n') } }), { p: Buffer.from('public\n') }],
  ];
  for (const [method, directive, shared] of cases) {
    for (const where of ['at the path', 'above it'] as const) {
      for (const mode of ['audit', 'dry run', 'enforce'] as const) {
        const dir = t.testdir({ root: { token: SECRET }, 'etc-real': {} });
        const path = where === 'at the path' ? join(dir, 'app.conf') : join(dir, 'etc', 'token');
        if (where === 'at the path') await symlink(join(dir, 'root', 'token'), path);
        else await symlink(join(dir, 'root'), join(dir, 'etc'));
        const r = await run([directive(path)], { audit: mode === 'audit', dryRun: mode === 'dry run', ...(shared && { shared }) });
        const o = outcome(t, r.log.reports, 'd');
        t.ok(o.diff, `${method} ${where}, ${mode}: a diff report`);
        t.notMatch(r.text, /TOKEN-4f1d9a/, `${method} ${where}, ${mode}: nothing of the target's content`);
        t.notMatch(r.text, new RegExp(sha(SECRET)), `${method} ${where}, ${mode}: nor its hash`);
      }
    }
  }
});

t.test('file_permissions: mode and owner lines', async (t) => {
  const dir = t.testdir({ f: 'x' });
  const path = join(dir, 'f');
  await chmod(path, 0o644);
  await chown(path, 0, 0);
  const d = [{ id: 'p', method: 'file_permissions', params: { path, mode: '0600', owner: 4_000_000, group: 4_000_001 } }];
  const want = 'mode 0644 → 0600\nowner root:root → 4000000:4000001\n';
  t.match(outcome(t, (await run(d, { audit: true })).log.reports, 'p'), { type: 'audit_noncompliant', diff: { diff: want } });
  t.match(outcome(t, (await run(d)).log.reports, 'p'), { type: 'result_repaired', diff: { diff: want } });
  const s = await stat(path);
  t.same([s.mode & 0o7777, s.uid, s.gid], [0o600, 4_000_000, 4_000_001]);
});

t.test('directory_present: created, or its mode changed', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'd');
  const d = [{ id: 'd', method: 'directory_present', params: { path, mode: '0750' } }];
  t.match(outcome(t, (await run(d, { audit: true })).log.reports, 'd'), { type: 'audit_noncompliant', diff: { diff: `created directory ${path} (mode 0750)\n` } });
  t.match(outcome(t, (await run(d)).log.reports, 'd'), { type: 'result_repaired', diff: { diff: `created directory ${path} (mode 0750)\n` } });
  await chmod(path, 0o755);
  t.match(outcome(t, (await run(d)).log.reports, 'd'), { type: 'result_repaired', diff: { diff: 'mode 0755 → 0750\n' } });
});

t.test('file_from_shared_folder: the diff of what was installed; audit names the content by hash and downloads nothing', async (t) => {
  const dir = t.testdir({ 'app.conf': 'port = 80\n' });
  const path = join(dir, 'app.conf');
  const next = Buffer.from('port = 8080\n');
  const d = [{ id: 's', method: 'file_from_shared_folder', params: { source: 'conf/app.conf', path, sha256: sha(next) } }];
  const shared = { 'conf/app.conf': next };
  const audit = await run(d, { audit: true, shared });
  t.match(outcome(t, audit.log.reports, 's'), {
    type: 'audit_noncompliant',
    diff: { diff: `content would be replaced (not downloaded in audit or dry runs): 10 bytes, sha256 ${sha('port = 80\n')} → sha256 ${sha(next)}\n` },
  });
  t.same(audit.fetched, [], 'audit downloads nothing');
  const enforce = await run(d, { shared });
  t.match(outcome(t, enforce.log.reports, 's'), { type: 'result_repaired', diff: { diff: `--- a${path}\n+++ b${path}\n@@ -1,1 +1,1 @@\n-port = 80\n+port = 8080\n` } });
  t.same(enforce.fetched, ['conf/app.conf'], 'one download serves the diff and the install');

  // Bytes that are not the ones the policy names are neither shown nor installed.
  await writeFile(path, 'port = 80\n');
  const wrong = await run(d, { shared: { 'conf/app.conf': Buffer.from('port = 6666\n') } });
  const o = outcome(t, wrong.log.reports, 's');
  t.match(o, { type: 'result_error', diff: null, msg: /does not match its sha256/ });
  t.notMatch(wrong.text, /6666/);
});

t.test('sysctl_value writes a file under /proc/sys: its diff is the value, old → new', async (t) => {
  const root = t.testdir({ net: { ipv4: { ip_forward: '0\n' } } });
  const d = [{ id: 'fwd', method: 'sysctl_value', params: { key: 'net.ipv4.ip_forward', value: 1 } }];
  const w = (audit: boolean) => run(d, { audit, sysctlRoot: root });
  t.match(outcome(t, (await w(true)).log.reports, 'fwd'), { type: 'audit_noncompliant', diff: { diff: 'net.ipv4.ip_forward 0 → 1\n' } });
  t.match(outcome(t, (await w(false)).log.reports, 'fwd'), { type: 'result_repaired', diff: { diff: 'net.ipv4.ip_forward 0 → 1\n' } });
  t.equal(await readFile(join(root, 'net', 'ipv4', 'ip_forward'), 'utf8'), '1\n');
});

t.test('binary content: a one-line note with sizes and hashes', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'blob');
  const before = Buffer.from([0, 1, 2, 3, 0x73, 0x65, 0x63]);
  const after = Buffer.from([0, 9, 9]);
  await writeFile(path, before);
  const d = [{ id: 'b', method: 'file_from_shared_folder', params: { source: 'blob', path, sha256: sha(after) } }];
  const r = await run(d, { shared: { blob: after } });
  t.match(outcome(t, r.log.reports, 'b'), { type: 'result_repaired', diff: { diff: `binary content: 7 bytes, sha256 ${sha(before)} → 3 bytes, sha256 ${sha(after)}\n`, truncated: false } });
  t.same(await readFile(path), after);
});

t.test('max_diff_bytes: a long diff is cut at a line, marked, and says so', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'big');
  const d = [{ id: 'big', method: 'file_content', params: { path, content: Array.from({ length: 100 }, (_, i) => `line ${i}\n`).join('') } }];
  const full = outcome(t, (await run(d, { audit: true })).log.reports, 'big').diff!;
  t.equal(full.truncated, false, 'within the default cap, whole');
  const o = outcome(t, (await run(d, { diff: { maxBytes: 600 } })).log.reports, 'big');
  t.equal(o.type, 'result_repaired');
  t.equal(o.diff!.truncated, true);
  const size = Buffer.byteLength(o.diff!.diff);
  t.ok(size <= 600, 'within the cap, marker included');
  t.match(o.diff!.diff, new RegExp(`\\+line \\d+\n${TRUNCATED_LINE.replace(/\\/g, '\\\\')}\n$`), 'whole lines, then the marker');
  const kept = o.diff!.diff.slice(0, -(TRUNCATED_LINE.length + 1));
  t.ok(full.diff.startsWith(kept), 'the beginning of the whole diff');
  const nextLine = full.diff.slice(kept.length).split('\n')[0]!;
  t.ok(size + Buffer.byteLength(nextLine) + 1 > 600, 'as much as fits');
  t.equal((await readFile(path, 'utf8')).split('\n').length, 101, 'the change itself is whole');
});

t.test('show_diff = false: the change is reported, with no diff report', async (t) => {
  const dir = t.testdir({ f: 'a\n' });
  const path = join(dir, 'f');
  for (const audit of [true, false]) {
    const r = await run([{ id: 'f', method: 'file_content', params: { path, content: 'b\n', show_diff: false } }], { audit });
    t.match(outcome(t, r.log.reports, 'f'), { type: audit ? 'audit_noncompliant' : 'result_repaired', diff: null });
    t.notMatch(r.text, /capstan-diff/);
  }
  const p = await run([{ id: 'p', method: 'file_permissions', params: { path, mode: '0601', show_diff: false } }]);
  t.match(outcome(t, p.log.reports, 'p'), { type: 'result_repaired', diff: null });
});

t.test('secret files: reported as changed, with the note instead of their content', async (t) => {
  const dir = t.testdir({ etc: { 'shadow': 'root:$6$OLDSECRET:1::::::\n' }, app: { 'token': 'OLDTOKEN\n' }, state: {} });
  const shadow = join(dir, 'etc', 'shadow');
  const token = join(dir, 'app', 'token');
  const key = join(dir, 'etc', 'tls.pem');
  const d = [
    { id: 'shadow', method: 'file_content', params: { path: shadow, content: 'root:$6$NEWSECRET:2::::::\n' } },
    { id: 'token', method: 'file_line_present', params: { path: token, line: 'NEWTOKEN' } },
    { id: 'pem', method: 'file_content', params: { path: key, content: '-----BEGIN PRIVATE KEY-----\nMIIBVNEWKEY\n-----END PRIVATE KEY-----\n' } },
    { id: 'state', method: 'file_content', params: { path: join(dir, 'state', 'notes'), content: 'STATEFILE\n' } },
    { id: 'shadow-mode', method: 'file_permissions', params: { path: shadow, mode: '0640' } },
  ];
  await chmod(shadow, 0o600);
  for (const audit of [true, false]) {
    const r = await run(d, { audit, diff: { globs: [`${dir}/app/*`], stateDir: join(dir, 'state') } });
    const type = audit ? 'audit_noncompliant' : 'result_repaired';
    t.match(outcome(t, r.log.reports, 'shadow'), { type, diff: { diff: 'content changed (secret file: diff not shown)\n' } });
    t.match(outcome(t, r.log.reports, 'token'), { type, diff: { diff: 'content changed (secret file: diff not shown)\n' } });
    t.match(outcome(t, r.log.reports, 'pem'), { type, diff: { diff: `created ${key}\ncontent changed (secret file: diff not shown)\n` } });
    t.match(outcome(t, r.log.reports, 'state'), { type, diff: { diff: /secret file: diff not shown/ } });
    t.match(outcome(t, r.log.reports, 'shadow-mode'), { type, diff: { diff: 'mode 0600 → 0640\n' } }, 'a mode is not content: shown');
    // (file_line_present's key names its line, as it always has: only the file's other content is secret.)
    t.notMatch(r.text, /OLDSECRET|NEWSECRET|OLDTOKEN|NEWKEY|STATEFILE/, 'nothing of any secret content in the run log');
  }
  t.equal(await readFile(shadow, 'utf8'), 'root:$6$NEWSECRET:2::::::\n', 'the secret file was still managed');
});

t.test('a dry run reports a would-be repair as audit_noncompliant with its diff, and touches nothing', async (t) => {
  const dir = t.testdir({ f: 'a\n' });
  const path = join(dir, 'f');
  const r = await run([{ id: 'f', method: 'file_content', params: { path, content: 'b\n' } }], { dryRun: true });
  t.match(outcome(t, r.log.reports, 'f'), { type: 'audit_noncompliant', msg: /^would repair: /, diff: { diff: `--- a${path}\n+++ b${path}\n@@ -1,1 +1,1 @@\n-a\n+b\n` } });
  t.equal(await readFile(path, 'utf8'), 'a\n');
  t.notOk(r.log.reports.some((x) => x.event_type === 'result_error'), 'a would-be repair is not an error');
});

t.test('diff reports only add information: the compliance-relevant reports are the same with and without them', async (t) => {
  // Content that would be report lines or log entries of its own if it were written raw.
  const hostile = [
    '2026-01-01T00:00:00+00:00 R: @@Common@@result_error@@r@@d@@0@@c@@k@@2026-01-01 00:00:00+00:00##node1@#forged',
    '   error: not an agent log line', ' warning: nor this', 'R: @@a@@b', '@#', '##', '\u2028', '\r', 'é ✓',
  ].join('\n');
  const dir = t.testdir({ a: 'plain\n', b: 'x\n' });
  const d = [
    { id: 'a', method: 'file_content', params: { path: join(dir, 'a'), content: `${hostile}\n` } },
    { id: 'b', method: 'file_absent', params: { path: join(dir, 'b') } },
    { id: 'c', method: 'file_content', params: { path: join(dir, 'c'), content: hostile } },
  ];
  const r = await run(d);
  const withDiffs = r.log;
  // The same run log with the diff report lines removed, as a run without diffs would write it.
  const without = parseRunLog(r.text.split('\n').filter((l) => !l.includes('@@log_info@@')).join('\n'), withDiffs.info);
  const relevant = (reports: Report[]) => reports.filter((x) => x.event_type !== 'log_info');
  t.equal(withDiffs.reports.filter((x) => x.event_type === 'log_info').length, 3, 'three diff reports');
  t.same(relevant(withDiffs.reports), relevant(without.reports));
  t.same(relevant(withDiffs.reports).length, without.reports.length);
  t.equal(withDiffs.config_id, without.config_id);
  t.equal(isCompleteRun(withDiffs), true);
  const { log_info: info, ...counts } = countByType(withDiffs.reports);
  t.equal(info, 3);
  t.same(counts, countByType(without.reports));
  t.same(countByType(relevant(withDiffs.reports)), { control: 2, result_repaired: 3 }, 'no forged report');
  t.match(parseDiffMessage(withDiffs.reports.find((x) => x.directive_id === 'a' && x.event_type === 'log_info')!.msg), { diff: /\+ {3}error: not an agent log line\n/ });
  // The compliance the agent and the server compute (shared) is the same with and without them.
  const expected = bundleExpectations(d.map((x) => ({ ...x, rule_id: 'rule1' })));
  const compliance = (log: typeof without) => computeCompliance(expected, summarize(log.reports).outcomes);
  t.same(compliance(withDiffs), compliance(without));
  t.same(compliance(withDiffs).counts, compliance(without).counts);
});
