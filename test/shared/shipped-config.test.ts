/**
 * Each shipped, commented config in packaging/etc/ must list every key at its default: uncomment
 * every `# key = value` line and the result must load to exactly the schema's defaults.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import t from 'tap';
import { defaultsOf, loadConfig, type Schema } from '@capstan/shared';
import { RELAYD_SCHEMA } from '@capstan/relayd/config';
import { SERVER_SCHEMA } from '@capstan/server/config';
import { AGENT_SCHEMA } from '@capstan/agent/config';

const ETC = resolve(import.meta.dirname, '../../packaging/etc/capstan');
const CASES: Array<[string, Schema]> = [
  ['relayd.toml', RELAYD_SCHEMA],
  ['server.toml', SERVER_SCHEMA],
  ['agent.toml', AGENT_SCHEMA],
];

/**
 * What a package sets apart from the program's defaults, uncommented under the commented default
 * (a packaged relay links upstream so that remote runs and jobs pass down). Nothing else may differ.
 */
const PACKAGE_CHOICES: Record<string, Record<string, Record<string, unknown>>> = {
  'relayd.toml': { remote_run: { link_upstream: true } },
};

function withChoices(defaults: Record<string, Record<string, unknown>>, file: string): Record<string, Record<string, unknown>> {
  const out = structuredClone(defaults);
  for (const [sec, keys] of Object.entries(PACKAGE_CHOICES[file] ?? {})) Object.assign(out[sec]!, keys);
  return out;
}

for (const [file, schema] of CASES) {
  t.test(`${file} lists every key at its default`, async (t) => {
    const text = await readFile(join(ETC, file), 'utf8');
    const defaults = defaultsOf(schema) as Record<string, Record<string, unknown>>;
    t.same(loadConfig(schema, { path: join(ETC, file) }), withChoices(defaults, file), 'loads as shipped: the defaults and the package\'s choices');
    // The commented defaults alone (the package's uncommented choices left out).
    const uncommented = text.replace(/^([a-z_]+ = .*)$/gm, '').replace(/^# ([a-z_]+ = .*)$/gm, '$1');
    const path = join(t.testdir(), file);
    await writeFile(path, uncommented);
    t.same(loadConfig(schema, { path }), defaults, 'uncommented keys equal the defaults');
    for (const [sec, fields] of Object.entries(schema)) {
      for (const key of Object.keys(fields)) t.match(text, new RegExp(`^# ${key} = `, 'm'), `${sec}.${key} is documented`);
    }
  });
}
