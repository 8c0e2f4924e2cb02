/**
 * user_present, user_absent, group_present and group_absent for real: the host's own shadow tools
 * (useradd, usermod, chpasswd, gpasswd, …) inside a throwaway root, checked by what they wrote to
 * /etc/passwd, /etc/group and /etc/shadow there. Nothing reaches the host (test/helpers/root.ts).
 */
import t, { type Test } from 'tap';
import { rootSkipReason, throwawayRoot, type Root, type RootOutcome } from '../helpers/root.js';

t.setTimeout(120_000);

// Two SHA-512 crypt hashes (openssl passwd -6): secrets the reports must never repeat.
const H1 = '$6$capstansalt$jNDjk1nSn/KW.bVS/uoBc2Q04df1v/4ZrskgsvuoStq5gdnItN6W2YpZ3dk68s0Y1c3/zprITDbsx.CkdigYL/';
const H2 = '$6$othersalt$EZtx4LFMZqJqpkDzicWTmsiow8KfL5uBgpazHAMx8kV.YQmlwOahpKARkeznLitkLjAyLHFY0Xn8S/r8bRpD/1';
const noSecret = (t: Test, outcomes: RootOutcome[][]) => {
  const text = JSON.stringify(outcomes);
  t.notOk(text.includes('capstansalt') || text.includes('othersalt'), 'no report carries a password hash, not even in part');
};
const line = async (root: Root, file: string, name: string) => (await root.exec('grep', [`^${name}:`, file])).stdout.trim();

const why = await rootSkipReason({});
if (why !== undefined) {
  console.log(`# SKIP ${why}`);
  t.plan(0, why);
} else {
  await t.test('user_present makes, audits and changes a user with its groups, home and password; user_absent removes it', async (t) => {
    const root = await throwawayRoot(t);
    const user = { name: 'app', uid: 1500, group: 'apps', groups: ['docker', 'audio'], shell: '/bin/bash', home: '/srv/app', manage_home: true, comment: 'App user', password_hash: H1 };
    const changed = { ...user, password_hash: H2, locked: true, shell: '/bin/sh', groups: ['docker'], groups_exclusive: true };
    const first = await root.methods([
      { method: 'user_present', params: user, mode: 'audit' },
      { method: 'group_present', params: { name: 'apps', gid: 1600 } },
      { method: 'group_present', params: { name: 'docker', gid: 1601, system: true } },
      { method: 'user_present', params: user, dryRun: true },
      { method: 'user_present', params: user },
      { method: 'user_present', params: user },
      { method: 'user_present', params: user, mode: 'audit' },
    ]);
    t.match(first[0], [{ component: 'User present', key: 'app', status: 'error', message: /group apps does not exist/ }], 'a primary group that does not exist is an error, not a guess');
    t.match(first[3], [{ status: 'noncompliant', message: /^would repair: user app does not exist/, diff: { diff: /^created user app \(uid 1500, group apps, groups docker, audio, home \/srv\/app, shell \/bin\/bash\), with its home directory\npassword set\n$/ } }]);
    t.match(first[4], [{ status: 'repaired', message: /user app was created/ }]);
    t.same(first.slice(5).map((o) => o[0]!.status), ['success', 'compliant'], 'a second run changes nothing');
    t.equal(await line(root, '/etc/passwd', 'app'), 'app:x:1500:1600:App user:/srv/app:/bin/bash');
    t.equal((await line(root, '/etc/shadow', 'app')).split(':')[1], H1, 'the hash is the one given, unlocked');
    t.match(await line(root, '/etc/group', 'docker'), /^docker:x:1601:app$/);
    t.match(await line(root, '/etc/group', 'audio'), /:app$/);
    const home = await root.sh('stat -c "%a %u %g" /srv/app; ls -A /srv/app');
    t.match(home.stdout, /^\d+ 1500 1600\n(.*\n)*\.bashrc\n/, "useradd -m made the home from /etc/skel, owned by the user");

    const second = await root.methods([
      { method: 'user_present', params: changed, mode: 'audit' },
      { method: 'user_present', params: changed },
      { method: 'user_present', params: changed },
      { method: 'user_present', params: { name: 'app', locked: false } },
      { method: 'user_present', params: { name: 'app', home: '/srv/app2', manage_home: true } },
    ]);
    t.match(second[0], [{ status: 'noncompliant', message: 'shell /bin/bash ≠ /bin/sh, also in group audio, password differs, account is not locked', diff: { diff: 'shell /bin/bash → /bin/sh\ngroups -audio\npassword changed\nlocked\n' } }]);
    t.match(second[1], [{ status: 'repaired' }]);
    t.match(second[2], [{ status: 'success' }]);
    t.match(second[3], [{ status: 'repaired', message: /account is locked/, diff: { diff: 'unlocked\n' } }]);
    t.equal((await line(root, '/etc/shadow', 'app')).split(':')[1], H2, 'the new hash, unlocked again');
    t.match(await line(root, '/etc/group', 'audio'), /:$/, 'groups_exclusive took app out of audio');
    t.match(second[4], [{ status: 'repaired', diff: { diff: 'home /srv/app → /srv/app2\n' } }]);
    t.equal((await root.sh('test ! -e /srv/app && stat -c %u /srv/app2/.bashrc')).stdout, '1500\n', 'manage_home moved the home with its files');
    noSecret(t, [...first, ...second]);

    const gone = await root.methods([
      { method: 'group_absent', params: { name: 'apps' } },
      { method: 'user_absent', params: { name: 'app', remove_home: true }, mode: 'audit' },
      { method: 'user_absent', params: { name: 'app', remove_home: true } },
      { method: 'user_absent', params: { name: 'app', remove_home: true } },
      { method: 'group_absent', params: { name: 'apps' } },
      { method: 'group_absent', params: { name: 'apps' } },
    ]);
    t.match(gone[0], [{ status: 'error', message: /primary group of user app/ }], 'a primary group stays while its user does');
    t.match(gone[1], [{ status: 'noncompliant', diff: { diff: 'deleted user app (uid 1500)\nremoved its home /srv/app2\n' } }]);
    t.same(gone.slice(2).map((o) => o[0]!.status), ['repaired', 'success', 'repaired', 'success']);
    t.equal((await root.exec('test', ['-e', '/srv/app2'])).code, 1, 'remove_home removed the home');
    t.equal(await line(root, '/etc/passwd', 'app'), '');
  });

  await t.test('group_present sets members, exclusively when asked; members that are not users are an error', async (t) => {
    const root = await throwawayRoot(t);
    t.equal((await root.sh('useradd -M alice && useradd -M bob')).code, 0);
    const out = await root.methods([
      { method: 'group_present', params: { name: 'ops', gid: 2000, members: ['alice'] } },
      { method: 'group_present', params: { name: 'ops', members: ['bob'] } },
      { method: 'group_present', params: { name: 'ops', gid: 2001, members: ['bob'], members_exclusive: true }, mode: 'audit' },
      { method: 'group_present', params: { name: 'ops', gid: 2001, members: ['bob'], members_exclusive: true } },
      { method: 'group_present', params: { name: 'ops', gid: 2001, members: ['bob'], members_exclusive: true } },
      { method: 'group_present', params: { name: 'ops', members: ['carol'] } },
    ]);
    t.match(out[0], [{ status: 'repaired', diff: { diff: 'created group ops (gid 2000) with members alice\n' } }]);
    t.match(out[1], [{ status: 'repaired', diff: { diff: 'members +bob\n' } }], 'without members_exclusive, members are added');
    t.match(out[2], [{ status: 'noncompliant', message: 'gid 2000 ≠ 2001, alice also member', diff: { diff: 'gid 2000 → 2001\nmembers -alice\n' } }]);
    t.same(out.slice(3, 5).map((o) => o[0]!.status), ['repaired', 'success']);
    t.match(out[5], [{ status: 'error', message: /user carol does not exist/ }]);
    t.equal(await line(root, '/etc/group', 'ops'), 'ops:x:2001:bob');
  });

}
