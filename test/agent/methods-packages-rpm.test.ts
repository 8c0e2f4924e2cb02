/**
 * package_present and package_absent for real in an RPM-family throwaway root: dnf and rpm
 * against a local repository of two versions of a tiny noarch RPM, in the root's own rpm
 * database. No network. (The Debian family: methods-packages.test.ts.)
 */
import t from 'tap';
import { rpmRepo } from '../helpers/root-setup.js';
import { rootSkipReason, throwawayRoot } from '../helpers/root.js';

t.setTimeout(180_000);

const PKG = 'capstan-demo';
const statuses = (outcomes: Array<Array<{ status: string }>>) => outcomes.map((o) => o[0]!.status);
const rpmWhy = await rootSkipReason({ family: 'rpm' });

t.test('RPM root: the agent finds rpm; present, latest, a pinned downgrade and absent through dnf', { skip: rpmWhy }, async (t) => {
  const root = await throwawayRoot(t, { family: 'rpm' });
  await rpmRepo(root, PKG, ['1.0-1', '1.1-1']);
  const out = await root.methods([
    { method: 'package_present', params: { name: PKG, version: '1.0' }, mode: 'audit' },
    { method: 'package_present', params: { name: PKG, version: '1.0' } },
    { method: 'package_present', params: { name: PKG, version: '1.0-1' } },
    { method: 'package_present', params: { name: PKG, version: 'latest' }, mode: 'audit' },
    { method: 'package_present', params: { name: PKG, version: 'latest' } },
    { method: 'package_present', params: { name: PKG, version: 'latest' } },
    { method: 'package_present', params: { name: PKG, version: '1.0-1' } },
    { method: 'package_absent', params: { name: PKG, purge: true } },
    { method: 'package_absent', params: { name: PKG } },
  ]);
  t.match(out[0], [{ status: 'noncompliant', message: `${PKG} is not installed` }]);
  t.match(out[1], [{ status: 'repaired' }]);
  t.match(out[2], [{ status: 'success' }], 'a pin with or without its release matches');
  t.match(out[3], [{ status: 'noncompliant', message: `${PKG} is at 1.0-1, 1.1-1 is available` }], 'audit tells the candidate (dnf list --upgrades)');
  t.same(statuses(out.slice(4)), ['repaired', 'success', 'repaired', 'repaired', 'success'], 'upgrade, hold, downgrade to a pin, remove');
  t.match((await root.exec('rpm', ['-q', PKG])).stdout, /not installed/);
  t.match((await root.exec('rpm', ['--dbpath', '/var/lib/rpm', '-qa'])).stdout, /capstan-root-release/, 'the root\'s own rpm database did the work');
});
