/**
 * archive_from_shared_folder (Choria's archive convention): a good bundle installs atomically and
 * stays verified; every unsafe or inconsistent archive is refused with nothing installed; drift in
 * the installed tree is repaired; purge removes bundles the policy no longer assigns.
 * Archives are built here byte by byte (tar headers via node-tar's Header) so that the hostile
 * ones (links, devices, `..`, absolute paths) are exactly what an attacker would craft.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, writeFileSync } from 'node:fs';
import { readdir, readFile, rm, symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t, { type Test } from 'tap';
import { Header } from 'tar';
import { silentLogger, validateMethodParams } from '@capstan/shared';
import { METHODS, type MethodContext, type Outcome } from '@capstan/agent/methods/index';
import { parseSums } from '@capstan/agent/methods/archive';
import { testDiffSettings } from '../helpers/diff.js';

const sha = (b: Buffer | string) => createHash('sha256').update(b).digest('hex');

interface Entry {
  path: string;
  type?: 'File' | 'Directory' | 'SymbolicLink' | 'Link' | 'CharacterDevice' | 'FIFO';
  data?: string;
  linkpath?: string;
  mode?: number;
}

function tarGz(entries: Entry[]): Buffer {
  const blocks: Buffer[] = [];
  for (const e of entries) {
    const type = e.type ?? 'File';
    const data = Buffer.from(type === 'File' ? (e.data ?? '') : '');
    const h = new Header({
      path: e.path, type, size: data.length, mode: e.mode ?? (type === 'Directory' ? 0o755 : 0o644), mtime: new Date(0), uid: 0, gid: 0,
      ...(e.linkpath !== undefined && { linkpath: e.linkpath }),
    });
    const hb = Buffer.alloc(512);
    h.encode(hb, 0);
    blocks.push(hb, data, Buffer.alloc((512 - (data.length % 512)) % 512));
  }
  blocks.push(Buffer.alloc(1024));
  return gzipSync(Buffer.concat(blocks));
}

const sumsOf = (files: Record<string, string>) => Object.entries(files).map(([p, d]) => `${sha(d)}  ${p}\n`).join('');

/** A bundle in the convention, with hooks to break it: the directive params and the archive bytes. */
function bundle(name: string, files: Record<string, string>, opts: { sums?: string; extra?: Entry[]; omit?: string[] } = {}) {
  const sums = opts.sums ?? sumsOf(files);
  const entries: Entry[] = [
    { path: `${name}/`, type: 'Directory' },
    { path: `${name}/SHA256SUMS`, data: sums },
    ...Object.entries(files).filter(([p]) => !opts.omit?.includes(p)).map(([p, d]) => ({ path: `${name}/${p}`, data: d })),
    ...(opts.extra ?? []),
  ];
  const archive = tarGz(entries);
  return { archive, params: { source: `bundles/${name}.tar.gz`, sha256: sha(archive), sums_sha256: sha(sums) } };
}

function ctx(shared: Record<string, Buffer>, over: Partial<MethodContext> = {}): Omit<MethodContext, 'mode'> {
  return {
    dryRun: false, log: silentLogger, env: process.env, commandTimeoutMs: 10_000, sysctlRoot: '/proc/sys', diff: testDiffSettings(),
    fetchShared: async (path) => {
      const b = shared[path];
      if (!b) throw Object.assign(new Error(`no ${path}`), { code: 'ERR_NOT_FOUND' });
      return b;
    },
    ...over,
  };
}

async function apply(params: Record<string, unknown>, mode: 'enforce' | 'audit', c: Omit<MethodContext, 'mode'>): Promise<Outcome[]> {
  const m = METHODS.get('archive_from_shared_folder')!;
  return m.apply(m.validate(params), { ...c, mode });
}

const FILES = { 'a.conf': 'alpha\n', 'sub/b.conf': 'beta\n', 'sub/deeper/c.txt': 'gamma\n' };

t.test('a good archive installs under <target>/<name>, verifies on every run and audits compliant', async (t) => {
  const target = join(t.testdir(), 'bundles');
  const b = bundle('web', FILES);
  const c = ctx({ [b.params.source]: b.archive });
  const p = { ...b.params, target };
  t.match(await apply(p, 'audit', c), [{ component: 'Archive from shared folder', key: `${target}/web`, status: 'noncompliant', message: /does not exist/ }]);
  t.match(await apply(p, 'enforce', c), [{ status: 'repaired' }]);
  for (const [path, data] of Object.entries(FILES)) t.equal(await readFile(join(target, 'web', path), 'utf8'), data, path);
  t.equal(await readFile(join(target, 'web', 'SHA256SUMS'), 'utf8'), sumsOf(FILES));
  t.same((await readdir(target)).sort(), ['web'], 'no temporary directory left behind');
  t.match(await apply(p, 'enforce', c), [{ status: 'success' }], 'idempotent');
  t.match(await apply(p, 'audit', c), [{ status: 'compliant' }]);
  t.same(validateMethodParams('archive_from_shared_folder', p), p, 'the server accepts the same parameters');
});

t.test('an archive made as docs/policy.md says, with the system tar and sha256sum, installs', async (t) => {
  try {
    execFileSync('tar', ['--version'], { stdio: 'ignore' });
    execFileSync('sha256sum', ['--version'], { stdio: 'ignore' });
  } catch {
    t.pass('skipped: no tar or sha256sum on this host', { skip: 'tar and sha256sum are needed' });
    return;
  }
  const build = t.testdir();
  mkdirSync(join(build, 'web', 'conf.d'), { recursive: true });
  writeFileSync(join(build, 'web', 'index.html'), '<h1>hi</h1>\n');
  writeFileSync(join(build, 'web', 'conf.d', 'site.conf'), 'listen 80;\n');
  execFileSync('sh', ['-c', '(cd web && find . -type f ! -name SHA256SUMS -print0 | sort -z | xargs -0 sha256sum > SHA256SUMS) && tar -czf web.tar.gz web'], { cwd: build });
  const archive = readFileSync(join(build, 'web.tar.gz'));
  const params = { source: 'b/web.tar.gz', sha256: sha(archive), sums_sha256: sha(readFileSync(join(build, 'web', 'SHA256SUMS'))) };
  const target = join(build, 'installed');
  t.match(await apply({ ...params, target }, 'enforce', ctx({ 'b/web.tar.gz': archive })), [{ status: 'repaired' }]);
  t.equal(await readFile(join(target, 'web', 'conf.d', 'site.conf'), 'utf8'), 'listen 80;\n');
  t.match(await apply({ ...params, target }, 'enforce', ctx({})), [{ status: 'success' }], 'verified without downloading again');
});

t.test('a new version of the bundle replaces the old one whole', async (t) => {
  const target = t.testdir();
  const v1 = bundle('app', { 'old.txt': 'one\n', 'keep.txt': 'k\n' });
  const v2 = bundle('app', { 'new.txt': 'two\n', 'keep.txt': 'k2\n' });
  t.match(await apply({ ...v1.params, target }, 'enforce', ctx({ [v1.params.source]: v1.archive })), [{ status: 'repaired' }]);
  t.match(await apply({ ...v2.params, target }, 'enforce', ctx({ [v2.params.source]: v2.archive })), [{ status: 'repaired', message: /SHA256SUMS differs/ }]);
  t.same((await readdir(join(target, 'app'))).sort(), ['SHA256SUMS', 'keep.txt', 'new.txt']);
  t.equal(await readFile(join(target, 'app', 'keep.txt'), 'utf8'), 'k2\n');
});

/** Each refused archive: the outcome is an error naming why, and nothing lands under the target. */
async function refused(t: Test, name: string, b: { archive: Buffer; params: Record<string, unknown> }, why: RegExp) {
  const target = t.testdir();
  const out = await apply({ ...b.params, target }, 'enforce', ctx({ [String(b.params.source)]: b.archive }));
  t.match(out, [{ status: 'error', message: why }], name);
  t.same(await readdir(target), [], `${name}: nothing installed, no temporary left`);
}

t.test('refused archives install nothing', async (t) => {
  const good = bundle('web', FILES);
  await refused(t, 'archive checksum', { ...good, params: { ...good.params, sha256: sha('something else') } }, /does not match its sha256/);
  await refused(t, 'SUMS checksum', { ...good, params: { ...good.params, sums_sha256: sha('other sums') } }, /SHA256SUMS does not match the directive's sums_sha256/);
  await refused(t, 'file hash', bundle('web', FILES, { sums: sumsOf({ ...FILES, 'a.conf': 'tampered\n' }) }), /a\.conf does not match its SHA256SUMS hash/);
  await refused(t, 'missing file (SUMS line with no file)', bundle('web', FILES, { omit: ['sub/b.conf'] }), /lists sub\/b\.conf, which the archive does not hold/);
  await refused(t, 'extra SUMS line', bundle('web', FILES, { sums: sumsOf(FILES) + `${sha('x')}  ghost.txt\n` }), /lists ghost\.txt, which the archive does not hold/);
  await refused(t, 'file not in SUMS', bundle('web', FILES, { extra: [{ path: 'web/stowaway', data: 'x' }] }), /stowaway is in the archive but not in SHA256SUMS/);
  await refused(t, 'upper-case SUMS', bundle('web', FILES, { sums: sumsOf(FILES).replace(/^[0-9a-f]{64}/, (h) => h.toUpperCase()) }), /upper-case hash/);
  await refused(t, 'malformed SUMS line', bundle('web', FILES, { sums: sumsOf(FILES) + 'not a sums line\n' }), /line 4 is malformed/);
  await refused(t, 'symbolic link', bundle('web', FILES, { extra: [{ path: 'web/link', type: 'SymbolicLink', linkpath: '/etc/shadow' }] }), /is a SymbolicLink/);
  await refused(t, 'hard link', bundle('web', FILES, { extra: [{ path: 'web/hard', type: 'Link', linkpath: 'web/a.conf' }] }), /is a Link/);
  await refused(t, 'device', bundle('web', FILES, { extra: [{ path: 'web/dev', type: 'CharacterDevice' }] }), /is a CharacterDevice/);
  await refused(t, 'fifo', bundle('web', FILES, { extra: [{ path: 'web/fifo', type: 'FIFO' }] }), /is a FIFO/);
  await refused(t, '.. path', bundle('web', FILES, { extra: [{ path: 'web/../escaped', data: 'x' }] }), /contains \.\./);
  await refused(t, 'absolute path', bundle('web', FILES, { extra: [{ path: '/tmp/escaped', data: 'x' }] }), /is absolute/);
  await refused(t, 'entry outside the top directory', bundle('web', FILES, { extra: [{ path: 'other/x', data: 'x' }] }), /outside the top directory web\//);
  await refused(t, 'duplicate entry', bundle('web', FILES, { extra: [{ path: 'web/a.conf', data: 'again' }] }), /appears twice/);
  const notTar = Buffer.from('this is not an archive');
  await refused(t, 'not a tar.gz', { archive: notTar, params: { ...good.params, sha256: sha(notTar) } }, /not a valid tar\.gz|top directory|no SHA256SUMS/);
});

t.test('drift in the installed bundle is found by audit and repaired by enforce', async (t) => {
  const target = t.testdir();
  const b = bundle('web', FILES);
  const c = ctx({ [b.params.source]: b.archive });
  const p = { ...b.params, target };
  await apply(p, 'enforce', c);
  const dir = join(target, 'web');
  await writeFile(join(dir, 'a.conf'), 'changed by hand\n');
  await rm(join(dir, 'sub', 'deeper', 'c.txt'));
  await writeFile(join(dir, 'sub', 'dropped-in'), 'x');
  await symlink('/etc/passwd', join(dir, 'sub', 'deeper', 'link'));
  t.match(await apply(p, 'audit', c), [{ status: 'noncompliant', message: /not a plain file/ }]);
  await rm(join(dir, 'sub', 'deeper', 'link'));
  t.match(await apply(p, 'audit', c), [{ status: 'noncompliant', message: /a\.conf was modified.*sub\/deeper\/c\.txt is missing.*sub\/dropped-in is not part of the bundle/ }]);
  t.match(await apply(p, 'enforce', c), [{ status: 'repaired' }]);
  t.equal(await readFile(join(dir, 'a.conf'), 'utf8'), 'alpha\n');
  t.equal(await readFile(join(dir, 'sub', 'deeper', 'c.txt'), 'utf8'), 'gamma\n');
  t.same((await readdir(join(dir, 'sub'))).sort(), ['b.conf', 'deeper']);
  t.match(await apply(p, 'enforce', c), [{ status: 'success' }]);
});

t.test('purge removes bundles under the target that the policy no longer assigns', async (t) => {
  const target = t.testdir({ 'not-a-bundle': { 'file': 'mine' } });
  const web = bundle('web', FILES);
  const db = bundle('db', { 'db.conf': 'x\n' });
  const old = bundle('old', { 'o.txt': 'o\n' });
  const c = ctx({ [web.params.source]: web.archive, [db.params.source]: db.archive, [old.params.source]: old.archive });
  for (const b of [web, db, old]) await apply({ ...b.params, target }, 'enforce', c);
  t.same((await readdir(target)).sort(), ['db', 'not-a-bundle', 'old', 'web']);

  // The policy now assigns web (with purge) and db: old is no longer assigned.
  const webP = { ...web.params, target, purge: true };
  const siblings = [
    { method: 'archive_from_shared_folder', params: webP },
    { method: 'archive_from_shared_folder', params: { ...db.params, target } },
    { method: 'archive_from_shared_folder', params: { ...old.params, target: join(target, 'elsewhere') } },
  ];
  const withPolicy = { ...c, siblings };
  t.match(await apply(webP, 'audit', withPolicy), [{ status: 'compliant' }, { component: 'Archive purge', key: target, status: 'noncompliant', message: 'unassigned bundles: old' }]);
  t.match(await apply(webP, 'enforce', withPolicy), [{ status: 'success' }, { component: 'Archive purge', status: 'repaired' }]);
  t.same((await readdir(target)).sort(), ['db', 'not-a-bundle', 'web'], 'old removed; a directory without SHA256SUMS is not a bundle and stays');
  t.match(await apply(webP, 'enforce', withPolicy), [{ status: 'success' }, { status: 'success' }]);
  t.match(await apply({ ...web.params, target }, 'enforce', withPolicy), [{ status: 'success' }], 'without purge there is no purge component');
});

t.test('parameters are validated where the server saves them', async (t) => {
  const base = { source: 'b/web.tar.gz', sha256: sha('a'), sums_sha256: sha('b'), target: '/opt/bundles' };
  const v = (p: Record<string, unknown>) => () => validateMethodParams('archive_from_shared_folder', p);
  t.doesNotThrow(v(base));
  t.equal(METHODS.get('archive_from_shared_folder')!.validate(base).name, 'web', 'name defaults to the file name without .tar.gz');
  t.equal(METHODS.get('archive_from_shared_folder')!.validate({ ...base, source: 'x/app-1.2.tgz' }).name, 'app-1.2');
  t.throws(v({ ...base, source: 'b/web.zip' }), { code: 'ERR_METHOD_PARAMS', message: /source must name a \.tar\.gz/ });
  t.throws(v({ ...base, source: '../web.tar.gz' }), { code: 'ERR_METHOD_PARAMS', message: /source/ });
  t.throws(v({ ...base, sha256: sha('a').toUpperCase() }), { code: 'ERR_METHOD_PARAMS', message: /sha256 must be 64 lowercase hex/ });
  t.throws(v({ ...base, sums_sha256: undefined }), { code: 'ERR_METHOD_PARAMS', message: /sums_sha256/ });
  t.throws(v({ ...base, target: 'relative' }), { code: 'ERR_METHOD_PARAMS', message: /target must be an absolute path/ });
  t.throws(v({ ...base, target: '/opt/../etc' }), { code: 'ERR_METHOD_PARAMS', message: /target/ });
  t.throws(v({ ...base, name: '..' }), { code: 'ERR_METHOD_PARAMS', message: /name/ });
  t.throws(v({ ...base, purge: 'yes' }), { code: 'ERR_METHOD_PARAMS', message: /purge must be true or false/ });
});

t.test('SHA256SUMS parsing accepts sha256sum output and nothing else', async (t) => {
  const h = sha('x');
  t.same(parseSums(`${h}  a\n${h} *./b/c\n`), [{ hash: h, path: 'a' }, { hash: h, path: 'b/c' }]);
  for (const [bad, why] of [
    ['', /no files/], [`${h}  a\n\n`, /malformed/], [`${h} a\n`, /malformed/], [`${h}  a\r\n`, /malformed/], [`${h}  /etc/x\n`, /absolute/],
    [`${h}  a/../../x\n`, /\.\./], [`${h}  a\n${h}  a\n`, /twice/], [`${h}  SHA256SUMS\n`, /itself/], [`${h.slice(1)}  a\n`, /malformed/],
  ] as const) {
    t.throws(() => parseSums(bad), { code: 'ERR_ARCHIVE_INVALID', message: why }, JSON.stringify(bad));
  }
});

t.test('the diff report of an archive: per file in enforce, what differs in audit (no download), removed bundles', async (t) => {
  const { applyDirectives, nodeConditionEnv } = await import('@capstan/agent/policy/apply');
  const { RunLogWriter } = await import('@capstan/agent/runlog/write');
  const { parseRunLog, parseDiffMessage } = await import('@capstan/shared');
  const target = join(t.testdir(), 'bundles');
  const v1 = bundle('web', { ...FILES, 'tls/site.key': 'KEYV1\n' });
  const v2Files = { 'a.conf': 'alpha\nmore\n', 'sub/b.conf': 'beta\n', 'new.txt': 'fresh\n', 'tls/site.key': 'KEYV2\n' };
  const v2 = bundle('web', v2Files);
  const old = bundle('old', { 'x.txt': 'x\n' });
  const shared = { [v1.params.source]: v1.archive };
  const fetched: string[] = [];
  /** One run of the given archive directives, parsed back: each directive's reports, diffs decoded. */
  const runOf = async (directives: Array<{ id: string; params: Record<string, unknown> }>, audit = false) => {
    const w = new RunLogWriter({ nodeId: 'n', configId: 'c', startedAt: new Date(0), clock: () => new Date(0) });
    w.start();
    const c = ctx({});
    await applyDirectives(directives.map((d) => ({ ...d, name: d.id, rule_id: 'r', mode: 'enforce', method: 'archive_from_shared_folder' })), {
      writer: w, forceAudit: audit, conditionEnv: nodeConditionEnv([], {}, process.env),
      ctx: { ...c, fetchShared: async (path) => (fetched.push(path), shared[path]!) },
    });
    w.end();
    return parseRunLog(w.text(), { node_id: 'n', timestamp: '1970-01-01T00:00:00+00:00' }).reports
      .filter((r) => r.rule_id === 'r')
      .map((r) => ({ type: r.event_type, component: r.component, msg: r.event_type === 'log_info' ? parseDiffMessage(r.msg)?.diff : r.msg }));
  };
  const web = (b: typeof v1) => ({ id: 'web', params: { ...b.params, target, purge: true } });
  // A bundle installed earlier that the policy no longer assigns: purge removes it.
  shared[old.params.source] = old.archive;
  await runOf([{ id: 'old', params: { ...old.params, target } }]);

  const first = await runOf([web(v1)]);
  const dir = join(target, 'web');
  t.match(first, [
    { type: 'result_repaired', component: 'Archive from shared folder' },
    { type: 'log_info', component: 'Archive from shared folder', msg: new RegExp(`^created ${dir}/SHA256SUMS\n--- /dev/null\n\\+\\+\\+ b${dir}/SHA256SUMS\n`) },
    { type: 'result_repaired', component: 'Archive purge' },
    { type: 'log_info', component: 'Archive purge', msg: `removed bundle ${join(target, 'old')}\n` },
  ]);
  t.match(first[1]!.msg, `created ${dir}/tls/site.key\ncontent changed (secret file: diff not shown)\n`, 'a key in a bundle is secret too');
  t.notMatch(JSON.stringify(first), /KEYV1/);

  shared[v2.params.source] = v2.archive;
  fetched.length = 0;
  const audit = await runOf([web(v2)], true);
  t.same(fetched, [], 'audit downloads nothing');
  t.match(audit, [
    { type: 'audit_noncompliant' },
    { type: 'log_info', msg: `${dir} would be installed from ${v2.params.source} (not downloaded in audit or dry runs): SHA256SUMS differs from the assigned one\n` },
  ]);

  const second = await runOf([web(v2)]);
  t.same(fetched, [v2.params.source], 'one download for the diff and the install');
  const diff = second[1]!.msg!;
  t.match(diff, `--- a${dir}/a.conf\n+++ b${dir}/a.conf\n@@ -1,1 +1,2 @@\n alpha\n+more\n`, 'a changed file');
  t.match(diff, `created ${dir}/new.txt\n--- /dev/null\n+++ b${dir}/new.txt\n@@ -0,0 +1,1 @@\n+fresh\n`, 'an added file');
  t.match(diff, `deleted ${dir}/sub/deeper/c.txt\n--- a${dir}/sub/deeper/c.txt\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-gamma\n`, 'a removed file');
  t.match(diff, `${dir}/tls/site.key: content changed (secret file: diff not shown)\n`, 'a changed secret, named');
  t.notMatch(diff, `a${dir}/sub/b.conf`, 'nothing about an unchanged file');
  t.notMatch(diff, /KEYV/, 'nothing of a secret');
  t.equal(await readFile(join(dir, 'new.txt'), 'utf8'), 'fresh\n');
});
