/**
 * The filter language's parser and Debian version order: table-driven cases, the position a bad
 * expression is reported at, and properties (the version key sorts as compareVersions does;
 * CIDR membership agrees with a bit-by-bit check).
 */
import t from 'tap';
import fc from 'fast-check';
import { addressKey, compareVersions, parseCidr, parseFilter, versionKey } from '@capstan/shared';

t.test('Debian version order, as dpkg --compare-versions answers', async (t) => {
  // [a, b, sign of compare(a, b)]: checked against dpkg's documented rules.
  const cases: Array<[string, string, number]> = [
    ['1.0', '1.0', 0], ['1.0', '1.1', -1], ['1.10', '1.9', 1], ['1.0~rc1', '1.0', -1], ['1.0', '1.0a', -1],
    ['1.0', '1.0.1', -1], ['1.0', '1.0+b1', -1], ['1:1.0', '2.0', 1], ['0:1.0', '1.0', 0], ['1.0-1', '1.0-2', -1],
    ['1.0-1', '1.0', 1], ['1.0-0', '1.0', 0], ['3.0.11', '3.0.2', 1], ['3.0.11-1~deb12u2', '3.0.11-1', -1],
    ['1.2.3~~', '1.2.3~', -1], ['a', '', 1], ['~', '', -1], ['1.00', '1.0', 0], ['a0', 'a', 0], ['1.0-1ubuntu1', '1.0-1', 1],
    ['2.36-9+deb12u4', '2.36-9+deb12u10', -1], ['1a', '1.', -1], ['10', '9', 1], ['1.0.0', '1.0', 1], ['1:0', '0:9', 1],
  ];
  for (const [a, b, want] of cases) {
    t.equal(compareVersions(a, b), want, `${a} vs ${b}`);
    t.equal(Math.sign(versionKey(a) < versionKey(b) ? -1 : versionKey(a) > versionKey(b) ? 1 : 0), want, `key ${a} vs ${b}`);
  }
});

t.test('the version key sorts as compareVersions, for any versions', async () => {
  const part = fc.stringMatching(/^[0-9a-zA-Z.+~]{0,8}$/);
  const version = fc.tuple(fc.option(fc.nat(20)), part, fc.option(part)).map(([e, u, r]) =>
    `${e === null ? '' : `${e}:`}${u}${r === null ? '' : `-${r}`}`);
  fc.assert(fc.property(version, version, (a, b) => {
    const byKey = versionKey(a) < versionKey(b) ? -1 : versionKey(a) > versionKey(b) ? 1 : 0;
    return byKey === compareVersions(a, b);
  }), { numRuns: 3000 });
});

t.test('CIDR ranges hold exactly the addresses whose prefix bits match', async (t) => {
  t.same(parseCidr('10.0.0.0/8'), { from: '00000000000000000000ffff0a000000', to: '00000000000000000000ffff0affffff' });
  t.equal(addressKey('::ffff:10.1.2.3'), addressKey('10.1.2.3'));
  t.equal(addressKey('2001:db8::1'), '20010db8000000000000000000000001');
  t.equal(addressKey('fe80::1%eth0'), 'fe800000000000000000000000000001');
  for (const bad of ['10.0.0.256', '1:2:3:4:5:6:7:8:9', ':::1', '1::2::3', 'x']) t.equal(addressKey(bad), null, bad);
  t.equal(parseCidr('10.0.0.0/33'), null);
  fc.assert(fc.property(fc.ipV4(), fc.ipV4(), fc.integer({ min: 0, max: 32 }), (net, addr, bits) => {
    const range = parseCidr(`${net}/${bits}`)!;
    const k = addressKey(addr)!;
    const toBits = (ip: string) => ip.split('.').map((o) => Number(o).toString(2).padStart(8, '0')).join('');
    return (k >= range.from && k <= range.to) === (toBits(net).slice(0, bits) === toBits(addr).slice(0, bits));
  }), { numRuns: 2000 });
});

t.test('expressions parse into typed comparisons', async (t) => {
  const e = parseFilter('os.name = debian and os.version >= 12 and package:openssl < 3.0.11 and not tag:env = dev');
  t.equal(e.kind, 'and');
  t.same(parseFilter('package:openssl'), { kind: 'has', field: 'package', key: 'openssl', position: 0 });
  t.match(parseFilter('memory >= 4GiB'), { value: { number: 4 * 1024 ** 3 } });
  t.match(parseFilter('memory > 1.5GB'), { value: { number: 1.5e9 } });
  t.match(parseFilter('last_run.age > 2h'), { value: { number: 7200 } });
  t.match(parseFilter('ip in 10.0.0.0/8'), { field: 'ip', op: '=', value: { kind: 'cidr' } });
  t.match(parseFilter('fact:"a b" = "it\'s \\"x\\""'), { key: 'a b', value: { text: 'it\'s "x"' } });
  t.match(parseFilter('(a_b)'.replace('a_b', 'hostname = web*')), { field: 'hostname', value: { text: 'web*' } });
  t.match(parseFilter('a = 1 OR NOT b = 2'.replace('a', 'cpus').replace('b', 'cpus')), { kind: 'or' });
  t.match(parseFilter('fact:cpu.load < -0.5'), { value: { kind: 'number', number: -0.5 } });
});

t.test('a bad expression answers ERR_FILTER_SYNTAX at the offending position', async (t) => {
  const cases: Array<[string, number]> = [
    ['', 0], ['os.name', 7], ['colour = red', 0], ['os.name = debian and', 20], ['os.name = debian or (cpus > 2', 29],
    ['cpus > two', 7], ['memory > 4 GiB', 11], ['ip = 10.0.0.0/99', 5], ['hostname < web', 11], ['os.name = "x', 10],
    ['cpus > 2)', 8], ['os.name = debian $', 17], ['package: = 1', 8], ['fact:x < abc', 9], ['hostname in 10.0.0.0/8', 9],
    ['last_run.age > 2 hours', 15], ['nope:x', 0], ['a\u0000', 1],
  ];
  for (const [text, position] of cases) {
    try {
      parseFilter(text);
      t.fail(`${JSON.stringify(text)} parsed`);
    } catch (err) {
      t.match(err, { code: 'ERR_FILTER_SYNTAX', details: { position } }, JSON.stringify(text));
    }
  }
  t.throws(() => parseFilter('not '.repeat(40) + 'cpus > 1'), { code: 'ERR_FILTER_SYNTAX' }, 'nesting is bounded');
  t.throws(() => parseFilter(Array(70).fill('cpus > 1').join(' or ')), { code: 'ERR_FILTER_SYNTAX' }, 'comparisons are bounded');
  t.throws(() => parseFilter('x'.repeat(5000)), { code: 'ERR_FILTER_SYNTAX' }, 'length is bounded');
  // Numbers stay inside what the columns and dates hold: beyond, a syntax error, never a 500 later.
  for (const [q, what] of [['last_run.age > 999999999w', 'an age past year 0'], ['last_inventory.age < 5219w', 'an age of over 100 years'],
    ['cpus > 2147483648', 'a count past PostgreSQL integer'], ['memory > 999999999999999TB', 'a size past bigint'], ['memory >= 9000TiB', 'a size past 2^53']] as const) {
    t.throws(() => parseFilter(q), { code: 'ERR_FILTER_SYNTAX', message: /at most/ }, what);
  }
  t.ok(parseFilter('last_run.age > 5217w and cpus <= 2147483647 and memory < 8000TiB'), 'the limits themselves are accepted');
});

t.test('the parser never throws anything but ERR_FILTER_SYNTAX', async () => {
  fc.assert(fc.property(fc.string({ maxLength: 60 }), (text) => {
    try {
      parseFilter(text);
    } catch (err) {
      return (err as { code?: string }).code === 'ERR_FILTER_SYNTAX';
    }
    return true;
  }), { numRuns: 3000 });
});
