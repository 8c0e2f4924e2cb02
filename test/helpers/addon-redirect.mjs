/**
 * Loaded with `--import` into a program run on another Node.js release than the one the
 * repository's native addons were built for (programNode() in programs.ts): `better-sqlite3`,
 * whether imported or required, resolves to the copy built for that release under
 * $CAPSTAN_TEST_ADDONS/node_modules. module.registerHooks runs in the program's own thread
 * (Node.js 22.15 and later), so nothing else about loading changes.
 */
import { registerHooks } from 'node:module';
import { join } from 'node:path';
import { pathToFileURL } from 'node:url';

const addons = process.env.CAPSTAN_TEST_ADDONS;
if (addons) {
  const target = pathToFileURL(join(addons, 'node_modules', 'better-sqlite3', 'lib', 'index.js')).href;
  registerHooks({
    resolve(specifier, context, next) {
      return specifier === 'better-sqlite3' ? { url: target, format: 'commonjs', shortCircuit: true } : next(specifier, context);
    },
  });
}
