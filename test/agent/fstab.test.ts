/**
 * fstab and mountinfo as the mount methods read and edit them: escapes, the in-place edit of one
 * mount point's line (every other line kept byte for byte, for any file: a property), and which
 * wanted options count as drift against what the kernel shows.
 */
import t from 'tap';
import fc from 'fast-check';
import { escapeField, fstabEntries, mountAt, optionDrift, parseFstabLine, parseMountInfo, setFstab, unescapeField, type FstabEntry } from '@capstan/agent/methods/fstab';

const entry = (over: Partial<FstabEntry> = {}): FstabEntry => ({ device: 'tmpfs', path: '/mnt/data', fstype: 'tmpfs', options: ['size=16m'], dump: 0, pass: 0, ...over });

t.test('fields with blanks are escaped as the kernel and util-linux read them', async (t) => {
  t.equal(escapeField('/mnt/my disk\\x\t'), '/mnt/my\\040disk\\134x\\011');
  t.equal(unescapeField('/mnt/my\\040disk'), '/mnt/my disk');
  t.same(parseFstabLine('LABEL=My\\040Data /srv/my\\040data ext4 noatime,errors=remount-ro 0 2'), {
    device: 'LABEL=My Data', path: '/srv/my data', fstype: 'ext4', options: ['noatime', 'errors=remount-ro'], dump: 0, pass: 2,
  });
  t.same(parseFstabLine('/dev/sdb1 /srv'), { device: '/dev/sdb1', path: '/srv', fstype: 'auto', options: ['defaults'], dump: 0, pass: 0 }, 'missing fields take fstab(5) defaults');
  t.equal(parseFstabLine('  # /dev/sda1 / ext4'), null);
  t.equal(parseFstabLine(''), null);
  fc.assert(fc.property(fc.stringMatching(/^[^\0-\x08\x0a-\x1f]{1,40}$/), (s) => unescapeField(escapeField(s)) === s && !/[ \t]/.test(escapeField(s))));
});

t.test('setFstab replaces the first line of the mount point where it stands and drops the others', async (t) => {
  const text = '# fstab\n/dev/sda1 / ext4 defaults 0 1\nold /mnt/data tmpfs size=8m 0 0\n\n/dev/sdb1 /srv xfs defaults 0 2\nolder /mnt/data/ tmpfs defaults 0 0\n';
  t.equal(setFstab(text, '/mnt/data', entry()), '# fstab\n/dev/sda1 / ext4 defaults 0 1\ntmpfs /mnt/data tmpfs size=16m 0 0\n\n/dev/sdb1 /srv xfs defaults 0 2\n');
  t.equal(setFstab('/dev/sda1 / ext4 defaults 0 1', '/mnt/data', entry()), '/dev/sda1 / ext4 defaults 0 1\ntmpfs /mnt/data tmpfs size=16m 0 0\n', 'appended after a last line without newline');
  t.equal(setFstab('', '/mnt/data', entry()), 'tmpfs /mnt/data tmpfs size=16m 0 0\n');
  const aligned = 'tmpfs\t/mnt/data\ttmpfs\tsize=16m\t0\t0\n';
  t.equal(setFstab(aligned, '/mnt/data', entry()), aligned, 'a line that already says it is left as written');
  t.equal(setFstab(text, '/mnt/data', null), '# fstab\n/dev/sda1 / ext4 defaults 0 1\n\n/dev/sdb1 /srv xfs defaults 0 2\n');
  t.equal(setFstab('tmpfs /mnt/data tmpfs defaults 0 0\n', '/mnt/data', null), '');
});

t.test('for any fstab, the edit keeps every other line and leaves exactly the wanted one', async () => {
  const paths = ['/srv', '/mnt/data', '/home', '/mnt/data2'];
  const line = fc.oneof(
    fc.tuple(fc.constantFrom('/dev/sda1', 'tmpfs', 'UUID=ab'), fc.constantFrom(...paths), fc.constantFrom('ext4', 'tmpfs'), fc.constantFrom('defaults', 'ro,noexec'))
      .map(([d, p, f, o]) => `${d}  ${p}\t${f} ${o} 0 0`),
    fc.constantFrom('# a comment', '', '   '),
  );
  fc.assert(fc.property(fc.array(line, { maxLength: 12 }), fc.boolean(), (lines, remove) => {
    const text = lines.length ? `${lines.join('\n')}\n` : '';
    const out = setFstab(text, '/mnt/data', remove ? null : entry());
    const others = (s: string) => s.split('\n').filter((l) => parseFstabLine(l)?.path !== '/mnt/data');
    const wanted = fstabEntries(out, '/mnt/data');
    return JSON.stringify(others(out)) === JSON.stringify(others(text)) && wanted.length === (remove ? 0 : 1)
      && setFstab(out, '/mnt/data', remove ? null : entry()) === out;
  }));
});

t.test('mountinfo: the last mount listed at a path is the one in use; escapes are read', async (t) => {
  const text = [
    '26 1 254:0 / / rw,relatime - ext4 /dev/vda rw,discard',
    '100 26 0:50 / /mnt/my\\040data rw,nosuid,nodev,noexec,relatime shared:1 - tmpfs capstan-tmp rw,size=16384k,mode=755',
    '101 100 0:51 / /mnt/my\\040data rw,relatime - tmpfs top rw,size=8192k',
    '102 26 254:0 /srv/bindsrc /mnt/bind rw,relatime - ext4 /dev/vda rw',
    'garbage line',
  ].join('\n');
  const mounts = parseMountInfo(text);
  t.equal(mounts.length, 4);
  t.match(mountAt(mounts, '/mnt/my data'), { source: 'top', fstype: 'tmpfs', options: ['rw', 'relatime'] });
  t.match(mountAt(mounts, '/mnt/bind'), { root: '/srv/bindsrc', source: '/dev/vda' });
  t.equal(mountAt(mounts, '/mnt/none'), undefined);
});

t.test('option drift: flags the kernel shows, and key=value options it shows, sizes compared in bytes', async (t) => {
  const m = parseMountInfo('100 26 0:50 / /mnt/data rw,nosuid,nodev,relatime - tmpfs t rw,size=16384k,mode=755')[0]!;
  const cases: Array<[string[], string[]]> = [
    [['defaults'], []],
    [['size=16m', 'nosuid', 'nodev', 'mode=755'], []],
    [['size=16777216'], []],
    [['noexec'], ['noexec']],
    [['ro'], ['ro']],
    [['rw', 'exec', 'async'], []],
    [['suid'], ['suid']],
    [['size=32m'], ['size=32m (is 16384k)']],
    [['size=50%'], []],
    [['uid=0', 'nofail', 'x-systemd.automount', '_netdev', 'noauto'], []],
    [['mode=700'], ['mode=700 (is 755)']],
  ];
  for (const [wanted, drift] of cases) t.same(optionDrift(wanted, m), drift, wanted.join(','));
});
