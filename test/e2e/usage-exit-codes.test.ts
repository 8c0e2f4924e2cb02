/**
 * Command-line usage errors exit 2 in every program (commander's default was 1, which Capstan's
 * exit codes reserve for crashes, so systemd's RestartPreventExitStatus=2 3 restarted a unit with
 * a wrong command line). `--test` checks a configuration: the agent's (new) and the file it names;
 * the server's also reaches its database (it used to say "configuration ok" with the database down).
 */
import { access, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { concurrently } from '../helpers/concurrently.js';
import { BIN, runProgram, runProgramToEnd } from '../helpers/programs.js';
import { PG_URL, pgUnavailable } from '../server/pg.js';

const usage: Array<[string, string, string[][]]> = [
  ['capstan-agent', BIN.agent, [['--bogus'], ['nonsense'], ['run', '--bogus'], ['run', '--relay'], ['queue', 'list', 'extra'], []]],
  ['capstan-relayd', BIN.relayd, [['--bogus'], ['--listen'], ['extra']]],
  ['capstan-server', BIN.server, [['--bogus'], ['nonsense'], ['serve', '--bogus'], ['nodes', 'show'], ['nodes', 'list', '--page', 'x'], []]],
];

t.test('usage errors exit 2 and say which program refused what; --help and --version exit 0', async (t) => {
  // Every case is a program start of its own and none depends on another: a few at a time.
  const runs = usage.flatMap(([name, bin, cases]) => [...cases, ['--help'], ['--version']].map((args) => ({ name, bin, args })));
  const ran = await concurrently(runs, ({ bin, args }) => runProgramToEnd(bin, args));
  const result = (name: string, args: string[]) => ran[runs.findIndex((r) => r.name === name && r.args.join(' ') === args.join(' '))]!;
  for (const [name, , cases] of usage) {
    for (const args of cases) {
      const r = result(name, args);
      t.equal(r.code, 2, `${name} ${args.join(' ')}: ${r.stderr.split('\n')[0]}`);
      if (args.length > 0) t.match(r.stderr, new RegExp(`^${name}: error: `, 'm'));
      t.notMatch(r.stderr, /\n\s+at /, 'no stack');
    }
    const help = result(name, ['--help']);
    t.equal(help.code, 0, `${name} --help`);
    t.match(help.stdout, /Exit codes: 0 ok, 1 crash, 2 usage or configuration error, 3 other start-up error/);
    const version = result(name, ['--version']);
    t.equal(version.code, 0, `${name} --version`);
    t.match(version.stdout, /^\d+\.\d+\.\d+/, `${name} --version prints the version`);
  }
  t.match(result('capstan-agent', ['--help']).stdout, /5 the node is waiting for acceptance, 6 the server refused the node/);
});

t.test('capstan-agent --test checks the configuration and the policy key it names, and makes nothing', async (t) => {
  const dir = t.testdir({
    'good.toml': '[agent]\nrelay = "http://relay.example:3030"\n',
    'bad.toml': '[agent]\nrelay = "not a url"\n',
    'nokey.toml': '[policy]\npublic_key = "/nonexistent/policy.pem"\n',
    'notpem.toml': '',
    'garbage.pem': 'hello',
  });
  await writeFile(join(dir, 'notpem.toml'), `[policy]\npublic_key = ${JSON.stringify(join(dir, 'garbage.pem'))}\n`);
  const state = join(dir, 'state');
  const bad = [['bad.toml', /agent\.relay/], ['nokey.toml', /policy\.public_key/], ['notpem.toml', /not a PEM public key/]] as const;
  const [good, onRun, ...refused] = await concurrently([
    ['--test', '-c', join(dir, 'good.toml')],
    // On a command too (what a unit's ExecStartPre would run), and nothing is made.
    ['run', '--test', '-c', join(dir, 'good.toml'), '--state-dir', state],
    ...bad.map(([file]) => ['--test', '-c', join(dir, file)]),
  ], (args) => runProgram(BIN.agent, args));
  t.equal(good!.code, 0, good!.stderr);
  t.equal(good!.stdout, 'configuration ok\n');
  t.equal(onRun!.code, 0, onRun!.stderr);
  t.equal(onRun!.stdout, 'configuration ok\n', 'no run');
  await t.rejects(access(state), 'no state directory made');
  bad.forEach(([file, why], i) => {
    const r = refused[i]!;
    t.equal(r.code, 2, `${file}: ${r.stderr}`);
    t.match(r.stderr, why);
  });
});

t.test('capstan-server serve --test reaches the database', async (t) => {
  const dir = t.testdir({
    'broken.db': 'this is not an SQLite database, not even its header',
    // An existing SQLite file that is not a database.
    broken: { 'capstan.db': 'this is not an SQLite database, not even its header' },
  });
  const why = await pgUnavailable();
  if (why && process.env.CI === 'true') t.fail(why);
  // Five starts of the server, each on a data directory of its own: at once.
  const [fresh, down, serveDown, broken, up] = await concurrently([
    ['serve', '--test', '--data-dir', join(dir, 'fresh')],
    ['serve', '--test', '--data-dir', dir, '--database', 'postgres://capstan:s3cret@127.0.0.1:9/registry'],
    // serve itself, as a unit starts it: the same code, so systemd restarts it until the database answers.
    ['serve', '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'serve-down'), '--database', 'postgres://capstan:s3cret@127.0.0.1:9/registry'],
    ['serve', '--test', '--data-dir', join(dir, 'broken')],
    ...(why ? [] : [['serve', '--test', '--data-dir', join(dir, 'pg'), '--database', PG_URL]]),
  ], (args) => runProgram(BIN.server, args), 5);
  t.equal(fresh!.code, 0, fresh!.stderr);
  t.match(fresh!.stdout, /^configuration ok; database .* will be made at the first start$/m);
  await t.rejects(access(join(dir, 'fresh')), 'nothing made');

  t.equal(down!.code, 75, `a database that does not answer is worth retrying: ${down!.stderr}`);
  t.match(down!.stderr, /ERR_STORE: database postgres:\/\/capstan:\*\*\*@127\.0\.0\.1:9\/registry unreachable/);
  t.notMatch(down!.stderr + down!.stdout, /s3cret/, 'the password is not printed');
  t.equal(serveDown!.code, 75, serveDown!.stderr);
  t.notMatch(serveDown!.stderr + serveDown!.stdout, /s3cret/, 'the password is not printed');

  t.equal(broken!.code, 3, broken!.stderr);
  t.match(broken!.stderr, /ERR_STORE: database .*capstan\.db unreadable/);

  if (why) {
    t.comment(`skipping the reachable PostgreSQL case: ${why}`);
    return;
  }
  t.equal(up!.code, 0, up!.stderr);
  t.match(up!.stdout, /configuration ok; database .* reachable/);
});
