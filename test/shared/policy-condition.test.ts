import t from 'tap';
import fc from 'fast-check';
import { evaluateCondition, parseCondition, type ConditionEnv } from '@capstan/shared';

const env: ConditionEnv = {
  identities: ['node-1', 'web01.example.com'],
  hasFile: (p) => p === '/etc/motd',
  hasDirectory: (p) => p === '/etc',
  hasCommand: (c) => c === 'apt-get',
  fact: (p) => ({ 'os.name': 'debian', 'os.version': '12', 'cpus.count': 2 } as Record<string, unknown>)[p],
};
const ev = (s: string) => evaluateCondition(parseCondition(s), env);

t.test('each matcher function', async (t) => {
  t.equal(ev("identity('^web')"), true);
  t.equal(ev("identity('^db')"), false);
  t.equal(ev("has_file('/etc/motd')"), true);
  t.equal(ev("has_file('/etc')"), false);
  t.equal(ev("has_directory('/etc')"), true);
  t.equal(ev("has_command('apt-get')"), true);
  t.equal(ev("has_command('dnf')"), false);
  t.equal(ev("fact('os.name') == 'debian'"), true);
  t.equal(ev('fact("os.name") != "debian"'), false);
  t.equal(ev("fact('os.version') == 12"), true, 'numbers compare with numeric-looking facts');
  t.equal(ev("fact('cpus.count') == 2"), true);
  t.equal(ev("fact('os.name') =~ '^deb'"), true);
  t.equal(ev("fact('missing')"), false, 'an absent fact is false');
  t.equal(ev("fact('os.name')"), true, 'a present fact is true');
});

t.test('combinations and precedence', async (t) => {
  t.equal(ev("identity('^web') && has_file('/etc/motd')"), true);
  t.equal(ev("identity('^db') || has_file('/etc/motd')"), true);
  t.equal(ev("!identity('^db')"), true);
  t.equal(ev("identity('^db') && has_file('/nope') || has_directory('/etc')"), true, '&& binds tighter than ||');
  t.equal(ev("identity('^db') && (has_file('/nope') || has_directory('/etc'))"), false);
  t.equal(ev("!(identity('^web') && !has_command('dnf'))"), false);
});

t.test('parse errors are coded, with a position', async (t) => {
  for (const bad of ['', "identity('^web'", "nope('x')", "has_file(/etc)", "identity('[')", "has_file('x') &&", "has_file('x') has_file('y')",
    "fact('a') == ", "'unterminated", "has_file('x') ==> 1", '('.repeat(100) + "has_file('x')" + ')'.repeat(100)]) {
    t.throws(() => parseCondition(bad), { code: 'ERR_CONDITION_SYNTAX' }, JSON.stringify(bad.slice(0, 40)));
  }
  t.throws(() => parseCondition('x'.repeat(5000)), { code: 'ERR_CONDITION_SYNTAX' });
});

t.test('property: any text parses or fails with a coded error', async (t) => {
  fc.assert(
    fc.property(fc.string({ maxLength: 80 }), (s) => {
      try {
        evaluateCondition(parseCondition(s), env);
      } catch (err) {
        if ((err as { code?: string }).code !== 'ERR_CONDITION_SYNTAX') throw err;
      }
    }),
    { numRuns: 2000 },
  );
  t.pass('no uncoded exception');
});
