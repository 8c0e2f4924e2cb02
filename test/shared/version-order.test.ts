/**
 * Capstan's Debian and RPM version orders agree with the package managers' own, on generated
 * pairs full of the cases where orders differ (epochs, `~`, `^`, `+`, revisions and releases,
 * letters against digits, leading zeros): dpkg --compare-versions and rpm 4.18's rpm.vercmp.
 * Table cases pin where the two orders part, so neither can drift into the other.
 */
import t from 'tap';
import { compareRpmVersions, compareVersions, versionKey } from '@capstan/shared';
import { debianVersion, dpkgCompare, oracleMissing, rpmCompare, rpmVersion, versionPairs } from '../helpers/version-oracles.js';

const sign = (n: number) => (n < 0 ? -1 : n > 0 ? 1 : 0);

t.test('the Debian order answers as dpkg --compare-versions on generated pairs', { skip: oracleMissing('dpkg') }, async (t) => {
  // dpkg starts once per question (~13 ms): a few hundred pairs, from two seeds.
  const pairs = [...versionPairs(180, 20260301, debianVersion), ...versionPairs(120, 7, debianVersion)];
  const answers = await dpkgCompare(pairs);
  let checked = 0;
  pairs.forEach(([a, b], i) => {
    const want = answers[i];
    if (want === null || want === undefined) return; // a version dpkg refuses as malformed
    checked++;
    if (sign(compareVersions(a, b)) !== want) t.fail(`${a} vs ${b}: dpkg says ${want}, Capstan ${compareVersions(a, b)}`);
    const byKey = versionKey(a) < versionKey(b) ? -1 : versionKey(a) > versionKey(b) ? 1 : 0;
    if (byKey !== want) t.fail(`version key of ${a} vs ${b}: dpkg says ${want}, the key ${byKey}`);
  });
  t.ok(checked >= 250, `${checked} pairs checked against dpkg`);
});

t.test('the RPM order answers as rpm.vercmp on generated pairs', { skip: oracleMissing('rpm') }, async (t) => {
  const pairs = [...versionPairs(20_000, 42, rpmVersion), ...versionPairs(5_000, 99, rpmVersion)];
  const answers = await rpmCompare(pairs, t.testdir());
  let checked = 0;
  const wrong: string[] = [];
  pairs.forEach(([a, b], i) => {
    const want = answers[i];
    if (want === null || want === undefined) return;
    checked++;
    if (sign(compareRpmVersions(a, b)) !== want) wrong.push(`${a} vs ${b}: rpm says ${want}, Capstan ${compareRpmVersions(a, b)}`);
  });
  t.same(wrong.slice(0, 20), [], 'no disagreement');
  t.ok(checked >= 24_000, `${checked} pairs checked against rpm`);
});

t.test('where dpkg and rpm order differently, each function follows its own tool', async (t) => {
  // [a, b, dpkg's sign, rpm's sign]: each row as dpkg 1.21 and rpm 4.18 answered it.
  const cases: Array<[string, string, number, number]> = [
    ['1+1', '1.0', -1, 1], // dpkg compares separators ('+' before '.'), rpm only the numbers
    ['1.0+b1', '1.0.b1', -1, 0], // rpm ignores separators
    ['1.a', '1a', 1, 0],
    ['1.0.1', '1.0a', 1, 1],
    ['1.01', '1.1', 0, 0],
    ['1.0~rc1', '1.0', -1, -1], // ~ before the end, in both
    ['1:1.0', '2.0', 1, 1], // epochs first, in both
    ['1.0-1', '1.0', 1, 1],
    ['1.0a', '1.0', 1, 1],
  ];
  for (const [a, b, deb, rpm] of cases) {
    t.equal(sign(compareVersions(a, b)), deb, `dpkg order: ${a} vs ${b}`);
    t.equal(sign(compareRpmVersions(a, b)), rpm, `rpm order: ${a} vs ${b}`);
  }
  // `^` is rpm's: after the end of the version, before any more of it.
  t.ok(compareRpmVersions('1.0^git1', '1.0') > 0 && compareRpmVersions('1.0^git1', '1.0.1') < 0 && compareRpmVersions('1.0~rc1', '1.0^') < 0);
});
