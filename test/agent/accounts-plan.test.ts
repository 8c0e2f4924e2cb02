/**
 * What the account methods plan from the account databases, before any tool runs: the drift, the
 * diff lines and the commands. The password hash may only ever be in a command's standard input.
 * (The same plans run for real, with the shadow tools, in methods-accounts.test.ts.)
 */
import t from 'tap';
import '@capstan/shared/policy/methods';
import { userPresentSpec, groupPresentSpec } from '@capstan/shared/policy/specs/accounts';
import { parseGroup, parsePasswd, parseShadow, readAccounts, type AccountsDb } from '@capstan/agent/methods/accounts-db';
import { groupAbsentPlan, groupPlan, userAbsentPlan, userPlan } from '@capstan/agent/methods/accounts-plan';

const HASH = '$6$capstansalt$jNDjk1nSn/KW.bVS/uoBc2Q04df1v/4ZrskgsvuoStq5gdnItN6W2YpZ3dk68s0Y1c3/zprITDbsx.CkdigYL/';
const db = (): AccountsDb => ({
  users: parsePasswd('root:x:0:0:root:/root:/bin/bash\n+nis\napp:x:1500:1600:App:/srv/app:/bin/sh\nbroken:x:abc:1:::\n'),
  groups: parseGroup('root:x:0:\napps:x:1600:\ndocker:x:1601:app,bob\naudio:x:29:app\nwheel:x:10:\n'),
  shadow: parseShadow(`root:*:19000:0:99999:7:::\napp:!${HASH}:19000:0:99999:7:::\n`),
});
const user = (p: Record<string, unknown>) => userPresentSpec.validate({ name: 'app', ...p });

t.test('the databases are read as files; malformed and NIS lines are skipped', async (t) => {
  const d = db();
  t.same([...d.users.keys()], ['root', 'app']);
  t.same(d.groups.get('docker')!.members, ['app', 'bob']);
  t.equal(d.shadow!.get('app'), `!${HASH}`);
  const dir = t.testdir({ passwd: 'a:x:1:1::/:/bin/sh\n', group: 'a:x:1:\n' });
  t.same((await readAccounts(dir)).shadow, new Map(), 'no shadow file: no hashes');
});

t.test('a compliant user plans nothing; drift names each attribute without the hash', async (t) => {
  t.same(userPlan(user({ uid: 1500, group: 'apps', shell: '/bin/sh', groups: ['docker'], password_hash: HASH, locked: true }), db()), { drift: [], changes: [], steps: [] });
  const plan = userPlan(user({ uid: 1501, gid: 10, shell: '/bin/bash', comment: 'New', groups: ['wheel', 'docker'], groups_exclusive: true, password_hash: HASH, locked: false }), db());
  t.same(plan.drift, ['uid 1500 ≠ 1501', 'gid 1600 ≠ 10', 'shell /bin/sh ≠ /bin/bash', 'comment differs', 'not in group wheel', 'also in group audio', 'account is locked']);
  t.same(plan.changes, ['uid 1500 → 1501', 'gid 1600 → 10', 'shell /bin/sh → /bin/bash', 'comment "App" → "New"', 'groups +wheel -audio', 'unlocked']);
  t.same(plan.steps, [
    { cmd: 'usermod', args: ['-u', '1501', '-g', '10', '-s', '/bin/bash', '-c', 'New', '-G', 'wheel,docker', 'app'] },
    { cmd: 'usermod', args: ['-U', 'app'] },
  ]);
});

t.test('a new password goes to chpasswd on stdin only, keeping the lock unless told otherwise', async (t) => {
  const other = '$y$j9T$othersalt$abcdefghijklmnopqrstuvwxyz0123456789ABCDEFG';
  const plan = userPlan(user({ password_hash: other }), db());
  t.same(plan.drift, ['password differs']);
  t.same(plan.changes, ['password changed']);
  t.same(plan.steps, [{ cmd: 'chpasswd', args: ['-e'], input: `app:!${other}\n` }], 'still locked: it was');
  const fresh = userPlan(user({ name: 'new', password_hash: other, manage_home: true, system: true }), db());
  t.same(fresh.steps, [{ cmd: 'useradd', args: ['-r', '-m', 'new'] }, { cmd: 'chpasswd', args: ['-e'], input: `new:${other}\n` }]);
  t.notOk(JSON.stringify([plan.drift, plan.changes, fresh.drift, fresh.changes, ...[...plan.steps, ...fresh.steps].map((s) => ('args' in s ? s.args : []))]).includes('othersalt'));
});

t.test('what cannot be done is refused with a reason before anything runs', async (t) => {
  t.throws(() => userPlan(user({ group: 'nosuch' }), db()), { code: 'ERR_METHOD_REFUSED', message: /group nosuch does not exist/ });
  t.throws(() => userPlan(user({ gid: 4242 }), db()), { code: 'ERR_METHOD_REFUSED', message: /no group has gid 4242/ });
  t.throws(() => userPlan(user({ groups: ['nosuch'] }), db()), { code: 'ERR_METHOD_REFUSED' });
  t.throws(() => userPlan(user({ name: 'root', locked: false }), db()), { code: 'ERR_METHOD_REFUSED', message: /without a password/ }, 'unlocking a hashless account');
  t.throws(() => userPlan(user({ locked: true }), { ...db(), shadow: null }), { code: 'ERR_METHOD_REFUSED' }, 'shadow unreadable');
  t.throws(() => groupAbsentPlan({ name: 'apps' }, db()), { code: 'ERR_METHOD_REFUSED', message: /primary group of user app/ });
  t.throws(() => groupPlan(groupPresentSpec.validate({ name: 'ops', members: ['carol'] }), db()), { code: 'ERR_METHOD_REFUSED', message: /user carol does not exist/ });
});

t.test('a home that is gone is made again with manage_home; a moved one is moved with usermod -m', async (t) => {
  t.same(userPlan(user({ manage_home: true }), db(), false).steps, [{ home: '/srv/app', user: 'app' }]);
  t.same(userPlan(user({ manage_home: true }), db(), true).steps, []);
  t.same(userPlan(user({ manage_home: true, home: '/home/app' }), db(), true).steps, [
    { cmd: 'usermod', args: ['-d', '/home/app', '-m', 'app'] }, { home: '/home/app', user: 'app' },
  ], 'and made when there was nothing to move');
  t.same(userPlan(user({ home: '/home/app' }), db(), false).steps, [{ cmd: 'usermod', args: ['-d', '/home/app', 'app'] }], 'without manage_home the directory is not touched');
});

t.test('groups and removals', async (t) => {
  t.same(groupPlan(groupPresentSpec.validate({ name: 'docker', members: ['root'] }), db()).steps, [{ cmd: 'gpasswd', args: ['-a', 'root', 'docker'] }]);
  t.same(groupPlan(groupPresentSpec.validate({ name: 'docker', members: [], members_exclusive: true }), db()).steps, [{ cmd: 'gpasswd', args: ['-M', '', 'docker'] }]);
  t.same(groupPlan(groupPresentSpec.validate({ name: 'ops', gid: 3000, system: true, members: ['app'] }), db()).steps, [
    { cmd: 'groupadd', args: ['-g', '3000', '-r', 'ops'] }, { cmd: 'gpasswd', args: ['-M', 'app', 'ops'] },
  ]);
  t.same(userAbsentPlan({ name: 'app', remove_home: true }, db()).steps, [{ cmd: 'userdel', args: ['-r', 'app'] }]);
  t.same(userAbsentPlan({ name: 'nobody-here', remove_home: true }, db()), { drift: [], changes: [], steps: [] });
  t.same(groupAbsentPlan({ name: 'wheel' }, db()).steps, [{ cmd: 'groupdel', args: ['wheel'] }]);
});
