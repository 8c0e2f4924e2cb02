/**
 * The agent's upgrade action (patch campaigns) for real, in a Debian throwaway root with local
 * flat repositories: a named upgrade with its minimum met (from→to read from dpkg), pre and
 * post commands, a reboot needed and reported but never done here; security-only updates (the
 * candidate from a repository whose suite is *-security) leaving the others alone; `all`;
 * a minimum not met and a failing pre command, each with its exit code. The same with dnf in an
 * RPM-family root (security-only there: dnf's advisories, none in a plain repository). No
 * network, nothing on the host.
 */
import { join } from 'node:path';
import t from 'tap';
import { ROOT } from '../helpers/programs.js';
import { debRepo, rpmRepo } from '../helpers/root-setup.js';
import { rootSkipReason, throwawayRoot, type Root } from '../helpers/root.js';

t.setTimeout(240_000);

const PKG = 'capstan-demo';
const SEC = 'capstan-sec';
const DRIVER = join(ROOT, 'test/helpers/upgrade-driver.mjs');
const why = await rootSkipReason({});
const rpmWhy = await rootSkipReason({ family: 'rpm' });

const deb = (name: string, v: string) => {
  const d = `/srv/debbuild/${name}_${v}`;
  return [
    `mkdir -p ${d}/DEBIAN ${d}/usr/share/${name}`, `echo ${v} > ${d}/usr/share/${name}/VERSION`,
    `printf 'Package: ${name}\\nVersion: ${v}\\nArchitecture: all\\nMaintainer: Capstan tests <tests@capstan.invalid>\\nDescription: a package the tests upgrade\\n' > ${d}/DEBIAN/control`,
  ].join('\n') + `\ndpkg-deb -Zgzip -b ${d} DEST/${name}_${v}_all.deb >/dev/null`;
};
const index = (dir: string) => `cd ${dir} && for f in *.deb; do dpkg-deb -f "$f"; echo "Filename: ./$f"; echo "Size: $(stat -c %s "$f")"; echo "SHA256: $(sha256sum "$f" | cut -d" " -f1)"; echo; done > Packages`;

/** A second package: 1.0-1 in the plain repository, 1.1-1 in one whose Release says stable-security. */
async function securityRepo(root: Root): Promise<void> {
  const r = await root.sh([
    'mkdir -p /srv/secrepo',
    deb(SEC, '1.0-1').replace('DEST', '/srv/debrepo'),
    deb(SEC, '1.1-1').replace('DEST', '/srv/secrepo'),
    deb(PKG, '1.2-1').replace('DEST', '/srv/debrepo'),
    index('/srv/debrepo'), index('/srv/secrepo'),
    `printf 'Origin: Debian\\nLabel: Debian-Security\\nSuite: stable-security\\nCodename: capstan-security\\n' > /srv/secrepo/Release`,
    'echo "deb [trusted=yes] file:/srv/secrepo ./" > /etc/apt/sources.list.d/capstan-sec.list',
    'apt-get update -qq',
    `DEBIAN_FRONTEND=noninteractive apt-get install -y -q ${PKG}=1.0-1 ${SEC}=1.0-1 >/dev/null`,
  ].join('\n'));
  if (r.code !== 0) throw new Error(`security repository: ${r.stderr}`);
}

interface Answer {
  result?: { upgraded: Array<{ name: string; from: string | null; to: string }>; unmet: string[]; steps: Array<{ step: string; code: number }>; reboot_required: boolean; rebooted: boolean; exit_code: number };
  error?: { code: string; message: string };
  lines: string[];
}

async function upgrade(root: Root, requests: object[]): Promise<Answer[]> {
  const r = await root.exec(process.execPath, [DRIVER], { input: JSON.stringify(requests), env: { CAPSTAN_UPGRADE_NO_REBOOT: '1' }, timeoutMs: 200_000 });
  const lines = r.stdout.trim().split('\n').filter((l) => l.startsWith('{'));
  if (r.code !== 0 || lines.length !== requests.length) throw new Error(`upgrade driver exited ${r.code}: ${r.stderr}${r.stdout}`);
  return lines.map((l) => JSON.parse(l) as Answer);
}

const version = async (root: Root, name: string) => (await root.exec('dpkg-query', ['-W', '-f', '${Version}', name])).stdout;

t.test('Debian root: security only, named with minimums, pre/post and reboot, all; failures coded', { skip: why }, async (t) => {
  const root = await throwawayRoot(t);
  await debRepo(root, PKG, ['1.0-1', '1.1-1']);
  await securityRepo(root);
  t.same([await version(root, PKG), await version(root, SEC)], ['1.0-1', '1.0-1'], 'both installed at 1.0-1');

  const [sec, failedPre, named, unmet, all] = await upgrade(root, [
    { mode: 'security' },
    { mode: 'packages', packages: [PKG], pre: ['echo draining', 'exit 7'] },
    { mode: 'packages', packages: [`${PKG}>=1.1-1`, 'capstan-not-installed'], pre: ['echo drained > /tmp/drained'], post: ['touch /run/reboot-required'], reboot: 'if-needed' },
    { mode: 'packages', packages: [`${PKG}>=9.0`] },
    // The pre command runs before the versions are read: a downgrade there is what `all` brings back.
    { mode: 'all', pre: [`DEBIAN_FRONTEND=noninteractive apt-get install -y -q --allow-downgrades ${PKG}=1.0-1 >/dev/null`] },
  ]) as [Answer, Answer, Answer, Answer, Answer];

  t.match(sec.result, { exit_code: 0, upgraded: [{ name: SEC, from: '1.0-1', to: '1.1-1' }], reboot_required: false });
  t.equal(sec.result!.upgraded.length, 1, 'only the security update');
  t.ok(sec.lines.includes(`security updates: ${SEC}`), sec.lines.join('\n'));
  t.match(sec.lines.at(-1), /^upgrade-result \{/, 'the result is the last line');

  t.match(failedPre.result, { exit_code: 7, upgraded: [], steps: [{ step: 'pre', code: 0 }, { step: 'pre', code: 7 }] }, 'a failing pre command stops before any upgrade');
  t.equal(failedPre.result!.steps.length, 2);

  // A package not installed is left alone; PKG goes to the newest candidate (1.2-1, over its minimum).
  t.match(named.result, {
    exit_code: 0, unmet: [], reboot_required: true, rebooted: false,
    upgraded: [{ name: PKG, from: '1.0-1', to: '1.2-1' }],
    steps: [{ step: 'pre', code: 0 }, { step: 'refresh', code: 0 }, { step: 'upgrade', code: 0 }, { step: 'post', code: 0 }],
  });
  t.ok(named.lines.some((l) => l.includes('--only-upgrade')), 'apt-get install --only-upgrade');
  t.ok(named.lines.includes(`upgraded ${PKG} 1.0-1 -> 1.2-1`));
  t.ok(named.lines.includes('reboot left to the admin (CAPSTAN_UPGRADE_NO_REBOOT=1)'), 'reported, not rebooted');
  t.equal((await root.exec('cat', ['/tmp/drained'])).stdout, 'drained\n', 'the pre command ran in the root');
  t.equal((await root.exec('cat', [`/usr/share/${PKG}/VERSION`])).stdout.trim(), '1.2-1');

  t.match(unmet.result, { exit_code: 3, unmet: [PKG], upgraded: [] }, 'a minimum no candidate reaches');

  t.match(all.result, { exit_code: 0, upgraded: [{ name: PKG, from: '1.0-1', to: '1.2-1' }] }, 'all: every upgrade there is');
  t.equal(all.result!.upgraded.length, 1);
  t.ok(all.lines.some((l) => /^\$ apt-get upgrade /.test(l)), 'all runs apt-get upgrade');
  t.same([await version(root, PKG), await version(root, SEC)], ['1.2-1', '1.1-1']);
  t.equal((await root.exec('dpkg', ['--audit'])).stdout, '', 'the package database is consistent');
});

t.test('RPM root: dnf upgrades named packages, security-only finds no advisory, minimums checked', { skip: rpmWhy }, async (t) => {
  const root = await throwawayRoot(t, { family: 'rpm' });
  await rpmRepo(root, PKG, ['1.0-1', '1.1-1']);
  t.equal((await root.sh(`dnf install -y -q ${PKG}-1.0-1 >/dev/null`)).code, 0);
  const [sec, named, unmet] = await upgrade(root, [
    { mode: 'security' },
    { mode: 'packages', packages: [`${PKG}>=1.1`, 'capstan-not-installed'], post: ['true'] },
    { mode: 'packages', packages: [`${PKG}>=2.0`] },
  ]) as [Answer, Answer, Answer];
  t.match(sec.result, { exit_code: 0, upgraded: [] }, 'no security advisory: nothing upgraded');
  t.ok(sec.lines.some((l) => l.startsWith('$ dnf upgrade -y -q --security')), sec.lines.join('\n'));
  t.match(named.result, { exit_code: 0, unmet: [], upgraded: [{ name: PKG, from: '1.0-1', to: '1.1-1' }], steps: [{ step: 'upgrade', code: 0 }, { step: 'post', code: 0 }] });
  t.equal(named.result!.upgraded.length, 1);
  t.match(unmet.result, { exit_code: 3, unmet: [PKG] }, 'rpm\'s own version order says 1.1-1 < 2.0');
  t.match((await root.exec('rpm', ['-q', PKG])).stdout, /^capstan-demo-1\.1-1/);
});
