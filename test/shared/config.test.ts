import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { loadConfig, parseDuration, parseListen, parseSize } from '@capstan/shared';

const SCHEMA = {
  general: { listen: { type: 'listen', default: '127.0.0.1:3030' } },
  upstream: { timeout: { type: 'duration', default: '30s', min: 1, max: 600_000 }, url: { type: 'url', default: 'http://127.0.0.1:3031' } },
  spool: { max: { type: 'size', default: '64MiB' }, workers: { type: 'integer', default: 4, min: 1, max: 8 } },
} as const;

t.test('durations read as RUDDER writes them', async (t) => {
  t.equal(parseDuration('10s'), 10_000);
  t.equal(parseDuration('1h 7s'), 3_607_000);
  t.equal(parseDuration('30min 20s'), 1_820_000);
  t.equal(parseDuration('1d 7seconds'), 86_407_000);
  t.equal(parseDuration(10), 10_000, 'a bare integer means seconds');
  t.equal(parseDuration('9136'), 9_136_000);
  t.equal(parseDuration('913j'), null, 'unknown unit refused');
  t.equal(parseDuration('18446744073709551615'), null, 'overflow refused');
  t.equal(parseDuration(''), null);
});

t.test('sizes and listen addresses', async (t) => {
  t.equal(parseSize('64MiB'), 64 * 1024 * 1024);
  t.equal(parseSize('8192'), 8192);
  t.equal(parseSize('1 GB'), 1e9);
  t.equal(parseSize('12 parsecs'), null);
  t.same(parseListen('127.0.0.1:0'), { host: '127.0.0.1', port: 0 });
  t.same(parseListen('[::1]:3030'), { host: '::1', port: 3030 });
  t.equal(parseListen('127.0.0.1:70000'), null);
  t.equal(parseListen('nope'), null);
});

t.test('a config file is merged over defaults, overrides win, result is frozen', async (t) => {
  const dir = t.testdir();
  const path = join(dir, 'c.toml');
  await writeFile(path, '[upstream]\ntimeout = "5m"\n[spool]\nworkers = 2\n');
  const c = loadConfig(SCHEMA, { path, overrides: { 'spool.workers': 3, 'general.listen': undefined } });
  t.equal(c.upstream.timeout, 300_000);
  t.equal(c.spool.workers, 3);
  t.equal(c.general.listen, '127.0.0.1:3030');
  t.equal(c.spool.max, 64 * 1024 * 1024);
  t.ok(Object.isFrozen(c) && Object.isFrozen(c.spool));
});

t.test('bad configuration names the key that is wrong', async (t) => {
  const dir = t.testdir();
  const write = async (text: string) => {
    const p = join(dir, `${Math.random()}.toml`);
    await writeFile(p, text);
    return p;
  };
  t.throws(() => loadConfig(SCHEMA, { path: join(dir, 'absent.toml') }), { code: 'ERR_CONFIG' });
  t.throws(() => loadConfig(SCHEMA, { path: '/dev/null/x' }), { code: 'ERR_CONFIG' });
  const syntax = await write('[upstream\ntimeout=');
  t.throws(() => loadConfig(SCHEMA, { path: syntax }), { code: 'ERR_CONFIG_SYNTAX' });
  const soon = await write('[upstream]\ntimeout = "soon"\n');
  const typo = await write('[upstream]\ntimout = "5s"\n');
  const section = await write('[nope]\n');
  const many = await write('[spool]\nworkers = 9\n');
  t.throws(() => loadConfig(SCHEMA, { path: soon }), {
    code: 'ERR_CONFIG', message: 'upstream.timeout must be a duration such as "30s", "5m" or "1h 30m"',
  });
  t.throws(() => loadConfig(SCHEMA, { path: typo }), { code: 'ERR_CONFIG', message: /unknown key upstream.timout/ });
  t.throws(() => loadConfig(SCHEMA, { path: section }), { code: 'ERR_CONFIG', message: /unknown section/ });
  t.throws(() => loadConfig(SCHEMA, { path: many }), { code: 'ERR_CONFIG', message: 'spool.workers must be at most 8' });
  t.throws(() => loadConfig(SCHEMA, { overrides: { 'upstream.timeout': '11m' } }), { code: 'ERR_CONFIG', message: 'upstream.timeout must be at most 600000 ms' });
  t.equal(loadConfig(SCHEMA, { overrides: { 'upstream.timeout': '10m' } }).upstream.timeout, 600_000, 'the bound itself is allowed');
  t.throws(() => loadConfig(SCHEMA, { overrides: { 'upstream.url': 'ftp://x' } }), { code: 'ERR_CONFIG' });
  t.throws(() => loadConfig(SCHEMA, { overrides: { 'upstream.nope': 'x' } }), { code: 'ERR_CONFIG' });
});

t.test('a list of strings is read from a TOML array, and anything else is refused by name', async (t) => {
  const LIST = { methods: { globs: { type: 'strings', default: [] } } } as const;
  const dir = t.testdir();
  const cases: Array<[string, string[] | null]> = [
    ['', []],
    ['[methods]\nglobs = []\n', []],
    ['[methods]\nglobs = ["/etc/a/*", "/srv/**/k"]\n', ['/etc/a/*', '/srv/**/k']],
    ['[methods]\nglobs = "/etc/a/*"\n', null],
    ['[methods]\nglobs = ["/etc", 3]\n', null],
    ['[methods]\nglobs = [["/etc"]]\n', null],
  ];
  for (const [i, [text, want]] of cases.entries()) {
    const path = join(dir, `${i}.toml`);
    await writeFile(path, text);
    if (want === null) t.throws(() => loadConfig(LIST, { path }), { code: 'ERR_CONFIG', message: 'methods.globs must be a list of strings' }, text);
    else t.same(loadConfig(LIST, { path }).methods.globs, want, text);
  }
  t.ok(Object.isFrozen(loadConfig(LIST, {}).methods.globs), 'the list is frozen with the rest');
});
