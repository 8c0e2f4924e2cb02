/**
 * package_present and package_absent for real in a Debian throwaway root: apt-get and dpkg
 * against a local flat repository of two versions of a tiny .deb. No network. (The RPM family:
 * methods-packages-rpm.test.ts.)
 */
import t from 'tap';
import { debRepo } from '../helpers/root-setup.js';
import { rootSkipReason, throwawayRoot, type Root } from '../helpers/root.js';

t.setTimeout(180_000);

const PKG = 'capstan-demo';
const statuses = (outcomes: Array<Array<{ status: string }>>) => outcomes.map((o) => o[0]!.status);
const installedFile = async (root: Root) => (await root.exec('cat', [`/usr/share/${PKG}/VERSION`])).stdout.trim();

const debWhy = await rootSkipReason({});

t.test('Debian root: present, pinned, latest (an upgrade), a pinned downgrade, absent and purge', { skip: debWhy }, async (t) => {
  const root = await throwawayRoot(t);
  await debRepo(root, PKG, ['1.0-1', '1.1-1']);
  const out = await root.methods([
    { method: 'package_present', params: { name: PKG, version: '1.0-1' }, mode: 'audit' },
    { method: 'package_present', params: { name: PKG, version: '1.0-1' } },
    { method: 'package_present', params: { name: PKG, version: '1.0-1' } },
    { method: 'package_present', params: { name: PKG } },
    { method: 'package_present', params: { name: PKG, version: 'latest' }, mode: 'audit' },
  ]);
  t.match(out[0], [{ component: 'Package present', key: PKG, status: 'noncompliant', message: `${PKG} is not installed` }]);
  t.match(out[1], [{ status: 'repaired', message: /set to 1\.0-1/ }]);
  t.same(statuses(out.slice(2, 4)), ['success', 'success'], 'a pinned package stays, and any version will do without one');
  t.match(out[4], [{ status: 'noncompliant', message: `${PKG} is at 1.0-1, 1.1-1 is available` }], 'audit tells the candidate');
  t.equal(await installedFile(root), '1.0-1');

  const up = await root.methods([
    { method: 'package_present', params: { name: PKG, version: 'latest' } },
    { method: 'package_present', params: { name: PKG, version: 'latest' } },
    { method: 'package_present', params: { name: PKG, version: '1.0-1' } },
  ]);
  t.match(up[0], [{ status: 'repaired', message: /was upgraded/ }]);
  t.match(up[1], [{ status: 'success', message: /latest/ }]);
  t.match(up[2], [{ status: 'repaired', message: /1\.1-1, not 1\.0-1/ }], 'a pin below the installed version downgrades');
  t.equal(await installedFile(root), '1.0-1');

  const gone = await root.methods([
    { method: 'package_absent', params: { name: PKG } },
    { method: 'package_absent', params: { name: PKG } },
    { method: 'package_absent', params: { name: PKG, purge: true }, mode: 'audit' },
    { method: 'package_absent', params: { name: PKG, purge: true } },
    { method: 'package_absent', params: { name: PKG, purge: true } },
  ]);
  t.same(statuses(gone.slice(0, 2)), ['repaired', 'success']);
  t.match(gone[2], [{ status: 'noncompliant', message: `${PKG} has configuration files left` }], 'removed is not purged');
  t.same(statuses(gone.slice(3)), ['repaired', 'success']);
  t.equal((await root.exec('test', ['-e', `/etc/${PKG}.conf`])).code, 1, 'purge took the conffile');
  t.match((await root.exec('dpkg-query', ['-W', PKG])).stderr, /no packages found/);

});
