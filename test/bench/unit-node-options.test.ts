/**
 * Benchmarks run the server and the relay with the heap settings their shipped systemd units give
 * them (bench/lib/programs.mjs): the NODE_OPTIONS read from each unit, before any the caller has.
 */
import { readFile } from 'node:fs/promises';
import { resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import t from 'tap';
import { ROOT } from '../helpers/programs.js';

const programs = (await import(pathToFileURL(resolve(ROOT, 'bench/lib/programs.mjs')).href)) as {
  unitNodeOptions: (program: string) => string;
  nodeOptionsOfUnit: (text: string) => string;
  withUnitNodeOptions: (program: string, env: NodeJS.ProcessEnv) => NodeJS.ProcessEnv;
};

t.test("each unit's NODE_OPTIONS is what the benchmarks give its program", async (t) => {
  for (const program of ['server', 'relayd']) {
    const unit = await readFile(resolve(ROOT, `packaging/systemd/capstan-${program}.service`), 'utf8');
    const line = unit.split('\n').find((l) => l.startsWith('Environment=NODE_OPTIONS='));
    t.ok(line, `capstan-${program}.service sets NODE_OPTIONS`);
    t.equal(programs.unitNodeOptions(program), line!.slice('Environment=NODE_OPTIONS='.length).trim(), program);
    t.match(programs.unitNodeOptions(program), /^--max-semi-space-size=\d+$/, `${program}: a young generation size`);
  }
  t.equal(programs.unitNodeOptions('agent'), '', 'the agent unit sets none');
});

t.test("the caller's NODE_OPTIONS come after the unit's, the rest of the environment kept", async (t) => {
  const env = programs.withUnitNodeOptions('server', { PATH: '/usr/bin', NODE_OPTIONS: '--cpu-prof' });
  t.equal(env.NODE_OPTIONS, `${programs.unitNodeOptions('server')} --cpu-prof`);
  t.equal(env.PATH, '/usr/bin');
  t.same(programs.withUnitNodeOptions('agent', { PATH: '/usr/bin' }), { PATH: '/usr/bin' }, 'no unit setting: the environment as given');
});

t.test('a unit line is read unquoted or quoted, and a broken one gives nothing', async (t) => {
  t.equal(programs.nodeOptionsOfUnit('[Service]\nEnvironment=NODE_OPTIONS=--max-semi-space-size=8\n'), '--max-semi-space-size=8');
  t.equal(programs.nodeOptionsOfUnit('[Service]\nEnvironment="NODE_OPTIONS=--a --b"\n'), '--a --b');
  t.equal(programs.nodeOptionsOfUnit('[Service]\nEnvironment="NODE_OPTIONS=--a\n'), '', 'an unclosed quote');
  t.equal(programs.nodeOptionsOfUnit('[Service]\nEnvironment=LANG=C\n'), '', 'another variable');
  t.equal(programs.nodeOptionsOfUnit(''), '');
});
