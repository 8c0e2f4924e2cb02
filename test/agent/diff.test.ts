/**
 * The text of diff reports (agent/src/methods/diff.ts): unified diffs that apply, notes for
 * binary, oversized and secret content, mode and owner lines, and the secret-path rules.
 */
import { symlink, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import fc from 'fast-check';
import { applyPatch } from 'diff';
import { capDiff, TRUNCATED_LINE } from '@capstan/shared';
import { contentDiff, contentOf, idNames, modeLine, ownerLine, readContent, LINK_NOTE, SECRET_NOTE } from '@capstan/agent/methods/diff';
import { testDiffSettings } from '../helpers/diff.js';

const MB = 1024 * 1024;
const c = (text: string | Buffer) => contentOf(Buffer.isBuffer(text) ? text : Buffer.from(text), MB);

t.test('text content: a unified diff with a/ b/ headers, from and to /dev/null for created and deleted files', async (t) => {
  const s = testDiffSettings();
  const cases: Array<[string, string | null, string | null, string]> = [
    ['changed line', 'a\nb\nc\n', 'a\nB\nc\n', '--- a/etc/motd\n+++ b/etc/motd\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n'],
    ['line added at the end', 'a\n', 'a\nb\n', '--- a/etc/motd\n+++ b/etc/motd\n@@ -1,1 +1,2 @@\n a\n+b\n'],
    ['final newline dropped', 'a\n', 'a', '--- a/etc/motd\n+++ b/etc/motd\n@@ -1,1 +1,1 @@\n-a\n+a\n\\ No newline at end of file\n'],
    ['created', null, 'hi\n', 'created /etc/motd\n--- /dev/null\n+++ b/etc/motd\n@@ -0,0 +1,1 @@\n+hi\n'],
    ['deleted', 'bye\n', null, 'deleted /etc/motd\n--- a/etc/motd\n+++ /dev/null\n@@ -1,1 +0,0 @@\n-bye\n'],
    ['created empty', null, '', 'created /etc/motd\n--- /dev/null\n+++ b/etc/motd\n'],
  ];
  for (const [name, before, after, want] of cases) {
    t.equal(await contentDiff('/etc/motd', before === null ? null : c(before), after === null ? null : c(after), s), want, name);
  }
});

t.test('binary and oversized content: one line with sizes and sha256, never the bytes', async (t) => {
  const s = testDiffSettings({ maxFileSize: 16 });
  const nul = c(Buffer.from('secret\0bytes'));
  const latin1 = c(Buffer.from([0x63, 0x61, 0x66, 0xe9, 0x0a])); // "café\n" in Latin-1: not UTF-8
  const text = c('plain text\n');
  const big = contentOf(Buffer.from('x'.repeat(17)), 16);
  t.equal(await contentDiff('/srv/a', nul, text, s), `binary content: 12 bytes, sha256 ${nul.sha256} → 11 bytes, sha256 ${text.sha256}\n`);
  t.equal(await contentDiff('/srv/a', text, latin1, s), `binary content: 11 bytes, sha256 ${text.sha256} → 5 bytes, sha256 ${latin1.sha256}\n`);
  t.equal(await contentDiff('/srv/a', null, nul, s), `created /srv/a\nbinary content: none → 12 bytes, sha256 ${nul.sha256}\n`);
  t.equal(await contentDiff('/srv/a', nul, null, s), `deleted /srv/a\nbinary content: 12 bytes, sha256 ${nul.sha256} → none\n`);
  t.equal(big.data, null, 'content beyond max_diff_file_size is not kept');
  t.equal(await contentDiff('/srv/a', text, big, s), `content larger than 16 bytes, not diffed: 11 bytes, sha256 ${text.sha256} → 17 bytes, sha256 ${big.sha256}\n`);
  t.notMatch(await contentDiff('/srv/a', nul, text, s), /secret|plain/, 'no byte of either side');

  const dir = t.testdir({ small: 'abc', large: 'y'.repeat(40) });
  t.same(await readContent(join(dir, 'small'), 16), c('abc'));
  t.same(await readContent(join(dir, 'large'), 16), { size: 40, sha256: c('y'.repeat(40)).sha256, data: null }, 'hashed as a stream, not kept');
  t.equal(await readContent(join(dir, 'absent'), 16), null);
});

t.test('a change of more lines than the cap can show is summarised, not diffed line by line', async (t) => {
  const s = testDiffSettings({ maxBytes: 256 });
  const before = c(Array.from({ length: 400 }, (_, i) => `old ${i}`).join('\n'));
  const after = c(Array.from({ length: 400 }, (_, i) => `new ${i}`).join('\n'));
  t.equal(await contentDiff('/etc/big', before, after, s), `more than 128 changed lines, not diffed: ${before.data!.length} bytes, sha256 ${before.sha256} → ${after.data!.length} bytes, sha256 ${after.sha256}\n`);
});

t.test('secret files: the note, and nothing of the content, whatever changed', async (t) => {
  const dir = t.testdir({ etc: { ssh: {} }, state: {}, app: { conf: {} } });
  await writeFile(join(dir, 'etc', 'shadow'), 'root:$6$hash:19000::::::\n');
  await symlink(join(dir, 'etc', 'shadow'), join(dir, 'link-to-shadow'));
  const s = testDiffSettings({ stateDir: join(dir, 'state'), globs: [`${dir}/app/**/*.conf`, `${dir}/vault/*`] });
  const secret: string[] = [
    '/etc/shadow', '/etc/gshadow', '/etc/shadow-', '/etc/gshadow-', '/etc/shadow.bak', '/var/backups/shadow.bak',
    '/etc/ssh/ssh_host_ed25519_key', '/etc/ssh/ssh_host_rsa_key', '/root/.ssh/id_rsa', '/home/a/.ssh/id_ed25519',
    '/etc/ssl/private/site.key', join(dir, 'state', 'agent.key'), join(dir, 'state', 'policy.json'), join(dir, 'state'),
    join(dir, 'app', 'conf', 'db.conf'), join(dir, 'app', 'db.conf'), join(dir, 'vault', 'token'), join(dir, 'link-to-shadow'),
    `${dir}/etc/../state/x`,
  ];
  const plain: string[] = [
    '/etc/motd', '/etc/passwd', '/etc/ssh/ssh_host_ed25519_key.pub', '/root/.ssh/id_rsa.pub', '/root/.ssh/known_hosts',
    '/etc/shadowsocks.json', '/etc/keys.txt', join(dir, 'state-other', 'x'), join(dir, 'app', 'conf', 'db.yaml'), join(dir, 'vault', 'sub', 'x'),
  ];
  for (const p of secret) t.equal(await s.isSecret(p), true, `${p} is secret`);
  for (const p of plain) t.equal(await s.isSecret(p), false, `${p} is not`);

  const before = c('root:$6$oldhash:19000::::::\n');
  const after = c('root:$6$newhash:19001::::::\n');
  t.equal(await contentDiff('/etc/shadow', before, after, s), `${SECRET_NOTE}\n`);
  t.equal(await contentDiff('/etc/shadow', null, after, s), `created /etc/shadow\n${SECRET_NOTE}\n`);
  // A link is never read through: its diff is a note, whatever it points at (as secret as its target).
  t.equal(await contentDiff(join(dir, 'link-to-shadow'), before, after, s), `${LINK_NOTE}\n`, 'a link shows nothing of its target');

  const pem = (kind: string) => `-----BEGIN ${kind}-----\nMIIEvQIBADANBgkqhkiG9w0BAQEFAASC\n-----END ${kind}-----\n`;
  for (const kind of ['PRIVATE KEY', 'RSA PRIVATE KEY', 'EC PRIVATE KEY', 'OPENSSH PRIVATE KEY', 'ENCRYPTED PRIVATE KEY']) {
    t.equal(await contentDiff('/srv/app/bundle.pem', c('old\n'), c(pem(kind)), s), `${SECRET_NOTE}\n`, `${kind} coming in`);
    t.equal(await contentDiff('/srv/app/bundle.pem', c(pem(kind)), c('new\n'), s), `${SECRET_NOTE}\n`, `${kind} going out`);
  }
  t.match(await contentDiff('/srv/app/cert.pem', c('old\n'), c(pem('CERTIFICATE')), s), /^--- a\/srv\/app\/cert.pem/, 'a certificate is not a secret');
});

t.test('mode and owner lines', async (t) => {
  t.equal(modeLine(0o100644, 0o600), 'mode 0644 → 0600\n', 'file type bits dropped');
  t.equal(modeLine(0o4755, 0o755), 'mode 4755 → 0755\n');
  t.equal(await ownerLine({ uid: 0, gid: 0 }, { uid: 0, gid: 0 }), 'owner root:root → root:root\n');
  t.equal(await ownerLine({ uid: 0, gid: 0 }, { uid: 4_000_000, gid: 4_000_001 }), 'owner root:root → 4000000:4000001\n', 'an id without a name stays a number');
  const table: Array<[string, Array<[number, string]>]> = [
    ['', []],
    ['root:x:0:0:root:/root:/bin/bash\n', [[0, 'root']]],
    ['root:x:0:0::/:/bin/sh\napp:x:1000:1000::/srv:/bin/sh\n', [[0, 'root'], [1000, 'app']]],
    ['# comment:x:5\nbroken\nnoid:x::\nneg:x:-1:\nwheel:x:10:a,b\n', [[10, 'wheel']]],
    ['first:x:7:\nsecond:x:7:\n', [[7, 'first']]],
  ];
  for (const [text, want] of table) t.same([...idNames(text)], want, JSON.stringify(text));
  fc.assert(fc.property(fc.string(), (text) => {
    for (const [id, name] of idNames(text)) if (!Number.isSafeInteger(id) || id < 0 || name === '' || name.includes('\n')) return false;
    return true;
  }));
});

t.test('property: every text diff, capped or not, applies to the old content and gives the new one', async (t) => {
  const s = testDiffSettings({ maxBytes: 1 << 30 });
  const line = fc.string({ unit: fc.constantFrom('a', 'b', ' ', '-', '+', '@', '\\', 'é', '\t', '\r') , maxLength: 6 });
  const text = fc.array(line, { maxLength: 30 }).chain((lines) => fc.boolean().map((nl) => lines.join('\n') + (nl && lines.length ? '\n' : '')));
  await fc.assert(fc.asyncProperty(text, text, async (before, after) => {
    fc.pre(before !== after);
    const d = await contentDiff('/etc/f', c(before), c(after), s);
    return applyPatch(before, d) === after;
  }), { numRuns: 300 });
  await fc.assert(fc.asyncProperty(text, text, fc.integer({ min: 24, max: 400 }), async (before, after, cap) => {
    const d = capDiff(await contentDiff('/etc/f', c(before), c(after), s), cap);
    return Buffer.byteLength(d.diff) <= cap && (!d.truncated || d.diff.endsWith(`${TRUNCATED_LINE}\n`));
  }), { numRuns: 200 });
  t.pass('held');
});

t.test('a relative diff_secret_paths glob is refused by name, a good one is kept', async (t) => {
  const { loadAgentConfig } = await import('@capstan/agent/config');
  const dir = t.testdir();
  const path = join(dir, 'agent.toml');
  await writeFile(path, '[methods]\ndiff_secret_paths = ["/etc/app/*", "etc/x"]\n');
  t.throws(() => loadAgentConfig({ path }), { code: 'ERR_CONFIG', message: 'methods.diff_secret_paths[1] must be an absolute path glob' });
  await writeFile(path, '[methods]\ndiff_secret_paths = ["/etc/app/*"]\nmax_diff_bytes = "4KiB"\n');
  const config = loadAgentConfig({ path });
  t.same(config.methods.diff_secret_paths, ['/etc/app/*']);
  t.equal(config.methods.max_diff_bytes, 4096);
  await writeFile(path, '[methods]\nmax_diff_bytes = 100\n');
  t.throws(() => loadAgentConfig({ path }), { code: 'ERR_CONFIG', message: /methods.max_diff_bytes must be at least 256/ });
});
