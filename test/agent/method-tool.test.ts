/**
 * How the system methods run host tools and read what they say: a failure is ERR_METHOD_TOOL with
 * the tool's code and last line, a secret is masked in it, input goes to stdin only; and how an
 * installed rpm version is matched against a pin.
 */
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { lastLine, tool } from '@capstan/agent/methods/tool';
import { packageFamily, rpmMatches } from '@capstan/agent/methods/packages';
import type { MethodContext } from '@capstan/agent/methods/types';
import { testDiffSettings } from '../helpers/diff.js';

const ctx = { env: process.env, commandTimeoutMs: 10_000 };
const SECRET = '$6$saltsalt$verysecrethashvalue';

t.test('a failing tool is ERR_METHOD_TOOL with its exit code and last line, the secret masked', async (t) => {
  await t.rejects(tool('sh', ['-c', 'echo "first" >&2; echo "chpasswd: line 1: bad $0" >&2; exit 3', SECRET], ctx, { secret: SECRET }), {
    code: 'ERR_METHOD_TOOL', message: 'sh exited 3: chpasswd: line 1: bad <hidden>',
  });
  await t.rejects(tool('/nonexistent/useradd', [], ctx), { code: 'ERR_METHOD_TOOL', message: /^\/nonexistent\/useradd could not run/ });
  await t.rejects(tool('sleep', ['5'], { ...ctx, commandTimeoutMs: 100 }), { code: 'ERR_METHOD_TOOL', message: /timed out after 100 ms/ });
  t.equal(lastLine(`${'x'.repeat(400)}\n`).length, 301, 'a long line is cut');
});

t.test('input reaches the tool on stdin, never its arguments', async (t) => {
  const r = await tool('sh', ['-c', 'read line; echo "got ${#line} chars; args: $#"'], ctx, { input: `app:${SECRET}\n` });
  t.equal(r.stdout, `got ${`app:${SECRET}`.length} chars; args: 0\n`);
});

t.test('without dpkg-query, rpm or apk on PATH there is no package family', async (t) => {
  const dir = t.testdir();
  const c: MethodContext = { mode: 'audit', dryRun: false, log: silentLogger, env: { PATH: dir }, commandTimeoutMs: 1000, sysctlRoot: '/proc/sys', diff: testDiffSettings(), fetchShared: async () => Buffer.alloc(0) };
  await t.rejects(packageFamily(c), { code: 'ERR_METHOD_TOOL' });
});

t.test('an rpm pin matches with or without its release, and epoch 0 is no epoch', async (t) => {
  const cases: Array<[string, string, boolean]> = [
    ['1.0-1', '1.0-1', true], ['1.0-1', '1.0', true], ['1.0-1.el9', '1.0', true], ['1.0-1', '1.0-2', false], ['1.0.1-1', '1.0', false],
    ['2:1.0-1', '2:1.0-1', true], ['2:1.0-1', '1.0-1', false], ['0:1.0-1', '1.0-1', true], ['1.0-1', '0:1.0-1', true], ['2:1.0-1', '2:1.0', true],
  ];
  for (const [have, pin, want] of cases) t.equal(rpmMatches(have, pin), want, `${have} vs ${pin}`);
});
