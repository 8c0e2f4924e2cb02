/**
 * The system methods' parameters as the server checks them when a directive is saved (and the
 * agent before it applies one): each refusal names its field in `details.field`, defaults are
 * filled in, the components are the ones the agent reports, and a password hash never appears in
 * an error.
 */
import t from 'tap';
import { expectedComponents, validateMethodParams, METHOD_SPECS } from '@capstan/shared/policy/methods';

const HASH = '$y$j9T$capstansaltcapstan$Nb3n5o3jTqWZ5cB0ZB7N4pQ0rD3v2x1mFQ3hZC8bqk5';
const field = (method: string, params: Record<string, unknown>) => {
  try {
    validateMethodParams(method, params);
  } catch (err) {
    const e = err as { code: string; details?: { field?: string }; message: string };
    return { code: e.code, field: e.details?.field, message: e.message };
  }
  return null;
};

t.test('each bad parameter is refused with ERR_METHOD_PARAMS naming its field', async (t) => {
  const cases: Array<[string, Record<string, unknown>, string]> = [
    ['user_present', { name: '-o' }, 'name'],
    ['user_present', { name: '1abc' }, 'name'],
    ['user_present', { name: 'a'.repeat(33) }, 'name'],
    ['user_present', { name: 'app', uid: -1 }, 'uid'],
    ['user_present', { name: 'app', uid: 4294967295 }, 'uid'],
    ['user_present', { name: 'app', gid: 1.5 }, 'gid'],
    ['user_present', { name: 'app', gid: 10, group: 'wheel' }, 'group'],
    ['user_present', { name: 'app', groups: ['ok', 'b:ad'] }, 'groups[1]'],
    ['user_present', { name: 'app', groups_exclusive: true }, 'groups'],
    ['user_present', { name: 'app', shell: 'bash' }, 'shell'],
    ['user_present', { name: 'app', home: '/srv/a:b' }, 'home'],
    ['user_present', { name: 'app', comment: 'two\nlines' }, 'comment'],
    ['user_present', { name: 'app', password_hash: 'hunter2' }, 'password_hash'],
    ['user_present', { name: 'app', password_hash: `!${HASH}` }, 'password_hash'],
    ['user_present', { name: 'app', locked: 'yes' }, 'locked'],
    ['user_present', { name: 'app', manage_home: 1 }, 'manage_home'],
    ['user_present', { name: 'app', passwd: 'x' }, 'passwd'],
    ['user_absent', { name: 'app', remove_home: 'true' }, 'remove_home'],
    ['group_present', { name: 'ops', gid: '10' }, 'gid'],
    ['group_present', { name: 'ops', members: 'alice' }, 'members'],
    ['group_present', { name: 'ops', members_exclusive: true }, 'members'],
    ['group_absent', { name: '' }, 'name'],
    ['service_stopped', { name: 'nginx; rm' }, 'name'],
    ['service_restarted', {}, 'name'],
    ['kernel_module_loaded', { name: '-v' }, 'name'],
    ['kernel_module_loaded', { name: 'loop', persist: 'yes' }, 'persist'],
    ['mount_present', { path: '/', device: 'x', fstype: 'ext4' }, 'path'],
    ['mount_present', { path: 'mnt', device: 'x', fstype: 'ext4' }, 'path'],
    ['mount_present', { path: '/mnt/a/', device: 'x', fstype: 'ext4' }, 'path'],
    ['mount_present', { path: '/mnt/../etc', device: 'x', fstype: 'ext4' }, 'path'],
    ['mount_present', { path: '/mnt/a', device: 'x\ny', fstype: 'ext4' }, 'device'],
    ['mount_present', { path: '/mnt/a', device: 'x', fstype: 'Ext 4' }, 'fstype'],
    ['mount_present', { path: '/mnt/a', device: 'x', fstype: 'ext4', options: 'rw,,noexec' }, 'options'],
    ['mount_present', { path: '/mnt/a', device: 'x', fstype: 'ext4', options: ['rw', 'no exec'] }, 'options[1]'],
    ['mount_present', { path: '/mnt/a', device: 'x', fstype: 'ext4', pass: 3 }, 'pass'],
    ['mount_present', { path: '/mnt/a', device: 'x', fstype: 'ext4', dump: 2 }, 'dump'],
    ['mount_absent', { path: '/' }, 'path'],
    ['hostname', { name: 'Web01' }, 'name'],
    ['hostname', { name: 'web_01' }, 'name'],
    ['hostname', { name: '-web' }, 'name'],
    ['hostname', { name: 'web.' }, 'name'],
    ['hostname', { name: `${'a'.repeat(60)}.example` }, 'name'],
    ['package_present', { name: 'htop', version: 'not a version' }, 'version'],
    ['package_absent', { name: 'htop', purge: 'yes' }, 'purge'],
  ];
  for (const [method, params, want] of cases) {
    t.match(field(method, params), { code: 'ERR_METHOD_PARAMS', field: want }, `${method} ${JSON.stringify(params)}`);
  }
});

t.test('valid parameters come back typed, with their defaults', async (t) => {
  const spec = (m: string) => METHOD_SPECS.get(m)!;
  t.same(spec('user_present').validate({ name: 'app', groups: ['a', 'a', 'b'], password_hash: HASH }), {
    name: 'app', uid: undefined, gid: undefined, group: undefined, groups: ['a', 'b'], groups_exclusive: false, shell: undefined, home: undefined,
    manage_home: false, comment: undefined, locked: undefined, system: false, password_hash: HASH,
  });
  t.same(spec('mount_present').validate({ path: '/mnt/a b', device: 'UUID=1234', fstype: 'ext4' }), { path: '/mnt/a b', device: 'UUID=1234', fstype: 'ext4', options: ['defaults'], dump: 0, pass: 0 });
  t.same(spec('mount_present').validate({ path: '/mnt/a', device: 'x', fstype: 'tmpfs', options: 'size=1g,noexec', pass: 2, dump: 1 }).options, ['size=1g', 'noexec']);
  t.same(spec('package_present').validate({ name: 'nginx', version: 'latest' }), { name: 'nginx', version: 'latest' });
  t.same(spec('package_absent').validate({ name: 'nginx' }), { name: 'nginx', purge: false });
  t.same(spec('hostname').validate({ name: `${'a'.repeat(63)}` }), { name: 'a'.repeat(63) });
  t.same(spec('kernel_module_loaded').validate({ name: 'br_netfilter' }), { name: 'br_netfilter', persist: false });
  t.equal(validateMethodParams('user_present', { name: 'svc$', comment: '', locked: true, system: true, show_diff: false }).name, 'svc$', 'an empty comment is a comment');
});

t.test('a password hash never appears in an error, whatever is wrong with it', async (t) => {
  for (const bad of [`${HASH} `, `${HASH}:x`, `$6$${'a'.repeat(2000)}`, 'correct horse battery staple']) {
    const e = field('user_present', { name: 'app', password_hash: bad });
    t.equal(e?.code, 'ERR_METHOD_PARAMS');
    t.notOk(e!.message.includes(bad.trim().slice(0, 12)), 'the value is not repeated');
  }
});

t.test('the components the server expects are the ones the agent reports', async (t) => {
  t.same(expectedComponents('user_present', { name: 'app' }), [{ component: 'User present', key: 'app' }]);
  t.same(expectedComponents('group_absent', { name: 'ops' }), [{ component: 'Group absent', key: 'ops' }]);
  t.same(expectedComponents('service_restarted', { name: 'nginx' }), [{ component: 'Service restarted', key: 'nginx' }]);
  t.same(expectedComponents('kernel_module_loaded', { name: 'loop' }), [{ component: 'Kernel module loaded', key: 'loop' }]);
  t.same(expectedComponents('kernel_module_loaded', { name: 'loop', persist: true }), [
    { component: 'Kernel module loaded', key: 'loop' }, { component: 'Kernel module persistent', key: 'loop' },
  ]);
  t.same(expectedComponents('mount_present', { path: '/srv', device: '/dev/sdb1', fstype: 'xfs' }), [{ component: 'Mount present', key: '/srv' }]);
  t.same(expectedComponents('hostname', { name: 'web-01' }), [{ component: 'Hostname', key: 'web-01' }]);
  const { METHODS } = await import('@capstan/agent/methods/index');
  for (const name of METHOD_SPECS.keys()) t.ok(METHODS.has(name), `the agent implements ${name}`);
});
