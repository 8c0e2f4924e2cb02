/**
 * apt_repository and yum_repository on temporary paths, with fake apt-get and rpm first on PATH
 * that record their arguments (the real package tools are exercised in throwaway roots elsewhere).
 */
import { readdir, readFile, rm, stat, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { applyMethod, driftCycle, fakeTools, snapshot } from '../helpers/methods.js';

const KEY = '-----BEGIN PGP PUBLIC KEY BLOCK-----\n\nmQINBGRfakeKeyMaterialOnlyForTests\n=abcd\n-----END PGP PUBLIC KEY BLOCK-----\n';

/** apt-get and rpm that fail while <dir>/fail exists. */
async function tools(dir: string) {
  const fail = `if [ -e '${join(dir, 'fail')}' ]; then echo 'E: Failed to fetch https://repo.example.org/dists/bookworm/InRelease  403 Forbidden' >&2; exit 100; fi`;
  return fakeTools(dir, { 'apt-get': fail, rpm: fail });
}

t.test('apt_repository writes the key and a deb822 source, then updates that source alone', async (t) => {
  const dir = t.testdir({ etc: {} });
  const fake = await tools(dir);
  const path = join(dir, 'etc', 'sources.list.d', 'example.sources');
  const signed_by = join(dir, 'etc', 'keyrings', 'example.asc');
  const params = {
    name: 'example', path, signed_by, key: KEY, uris: 'https://repo.example.org/debian', suites: ['bookworm', 'bookworm-updates'],
    components: ['main', 'contrib'], architectures: ['amd64'],
  };
  const out = await driftCycle(t, join(dir, 'etc'), 'apt_repository', params, { env: fake.env });
  t.match(out, { component: 'APT repository', key: 'example' });
  t.equal(await readFile(signed_by, 'utf8'), KEY);
  t.equal(await readFile(path, 'utf8'), [
    '# Managed by Capstan (apt_repository example): changes made here are overwritten.',
    'Types: deb', 'URIs: https://repo.example.org/debian', 'Suites: bookworm bookworm-updates', 'Components: main contrib',
    'Architectures: amd64', `Signed-By: ${signed_by}`, '',
  ].join('\n'));
  t.match(await stat(path), { mode: 0o100644 });
  t.same(await fake.calls(), [`apt-get\tupdate\t-q\t-o\tDir::Etc::sourcelist=${path}\t-o\tDir::Etc::sourceparts=-\t-o\tAPT::Get::List-Cleanup=0`], 'one update, of this source, when it changed');
  t.match(out.diff?.diff, new RegExp(`^created ${signed_by} \\(mode 0644\\)\n[\\s\\S]*created ${path} \\(mode 0644\\)\n`), 'both files in the diff');
});

t.test('apt_repository puts the files back when apt-get update fails, so the next run tries again', async (t) => {
  const dir = t.testdir({ etc: { 'example.sources': 'old source\n' } });
  const fake = await tools(dir);
  const path = join(dir, 'etc', 'example.sources');
  const params = { name: 'example', path, signed_by: join(dir, 'etc', 'example.asc'), key: KEY, uris: ['https://repo.example.org/debian'], suites: 'stable', components: 'main' };
  const before = await snapshot(join(dir, 'etc'));
  await writeFile(join(dir, 'fail'), '');
  const failed = await applyMethod('apt_repository', params, 'enforce', { env: fake.env });
  t.match(failed, { status: 'error', code: 'ERR_COMMAND_FAILED', message: /403 Forbidden/ });
  t.same(await snapshot(join(dir, 'etc')), before, 'the old source is back and the new key is gone');
  await rm(join(dir, 'fail'));
  t.equal((await applyMethod('apt_repository', params, 'enforce', { env: fake.env })).status, 'repaired', 'the next run converges');
  t.equal((await fake.calls()).length, 2, 'and updated again');
});

t.test('apt_repository does not update a disabled source, nor with update false', async (t) => {
  const dir = t.testdir({ etc: {} });
  const fake = await tools(dir);
  const base = { name: 'off', signed_by: '/usr/share/keyrings/debian-archive-keyring.gpg', uris: 'http://deb.debian.org/debian', suites: 'bookworm-backports', components: 'main' };
  await driftCycle(t, join(dir, 'etc'), 'apt_repository', { ...base, path: join(dir, 'etc', 'off.sources'), enabled: false }, { env: fake.env });
  t.match(await readFile(join(dir, 'etc', 'off.sources'), 'utf8'), /\nEnabled: no\n$/);
  await driftCycle(t, join(dir, 'etc'), 'apt_repository', { ...base, path: join(dir, 'etc', 'noupdate.sources'), update: false }, { env: fake.env });
  t.same(await fake.calls(), []);
  t.same((await readdir(join(dir, 'etc'))).sort(), ['noupdate.sources', 'off.sources'], 'no key written without key');
});

t.test('yum_repository writes the .repo file and the key, and imports the key when it changed', async (t) => {
  const dir = t.testdir({ etc: {} });
  const fake = await tools(dir);
  const path = join(dir, 'etc', 'yum.repos.d', 'pgdg16.repo');
  const key_path = join(dir, 'etc', 'pki', 'RPM-GPG-KEY-pgdg16');
  const params = {
    name: 'pgdg16', description: 'PostgreSQL 16', path, key_path, gpgkey: KEY,
    baseurl: ['https://download.postgresql.org/pub/repos/yum/16/redhat/rhel-9-x86_64', 'https://mirror.example.org/pgdg/16'],
    priority: 10, options: { sslverify: true, exclude: 'postgresql*-devel' },
  };
  await driftCycle(t, join(dir, 'etc'), 'yum_repository', params, { env: fake.env });
  t.equal(await readFile(path, 'utf8'), [
    '# Managed by Capstan (yum_repository pgdg16): changes made here are overwritten.',
    '[pgdg16]', 'name=PostgreSQL 16',
    'baseurl=https://download.postgresql.org/pub/repos/yum/16/redhat/rhel-9-x86_64', '        https://mirror.example.org/pgdg/16',
    'enabled=1', 'gpgcheck=1', `gpgkey=file://${key_path}`, 'priority=10', 'exclude=postgresql*-devel', 'sslverify=1', '',
  ].join('\n'));
  t.equal(await readFile(key_path, 'utf8'), KEY);
  t.same(await fake.calls(), [`rpm\t--import\t${key_path}`]);
  await driftCycle(t, join(dir, 'etc'), 'yum_repository', { ...params, options: {}, enabled: false }, { env: fake.env });
  t.equal((await fake.calls()).length, 1, 'the key did not change: not imported again');

  await writeFile(join(dir, 'fail'), '');
  const before = await snapshot(join(dir, 'etc'));
  const failed = await applyMethod('yum_repository', { ...params, gpgkey: KEY.replace('fake', 'other') }, 'enforce', { env: fake.env });
  t.match(failed, { status: 'error', code: 'ERR_COMMAND_FAILED' });
  t.same(await snapshot(join(dir, 'etc')), before, 'a key rpm refused is not left installed');
});

t.test('yum_repository with key URLs or a metalink writes them as they are and imports nothing', async (t) => {
  const dir = t.testdir({ etc: {} });
  const fake = await tools(dir);
  const path = join(dir, 'etc', 'epel.repo');
  await driftCycle(t, join(dir, 'etc'), 'yum_repository', {
    name: 'epel', path, metalink: 'https://mirrors.fedoraproject.org/metalink?repo=epel-9&arch=$basearch', gpgkey: 'https://dl.fedoraproject.org/pub/epel/RPM-GPG-KEY-EPEL-9',
  }, { env: fake.env });
  t.match(await readFile(path, 'utf8'), /\nmetalink=https:\/\/mirrors\.fedoraproject\.org\/metalink\?repo=epel-9&arch=\$basearch\nenabled=1\ngpgcheck=1\ngpgkey=https:\/\/dl\.fedoraproject\.org\/pub\/epel\/RPM-GPG-KEY-EPEL-9\n$/);
  t.same(await fake.calls(), []);
});
