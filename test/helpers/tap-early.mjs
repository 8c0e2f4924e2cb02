/**
 * The first module of every test process: tap's `test-env` puts it in NODE_OPTIONS, whose
 * `--import` flags Node runs before those on the command line, so it runs before tap's own.
 *
 * tap starts every test file with `--import @tapjs/processinfo/import`, which records the files a
 * test loads, for coverage and `tap --changed`. On Node 20 it does so through `module.register`:
 * a hooks thread of its own, started in each test process, through which every module load then
 * passes. This suite collects no coverage (`disable-coverage`) and never runs `--changed`, and
 * the thread costs each test process 0.5–0.9 s of CPU (its start, and a message per module
 * loaded): on two cores, tap's own time for the suite went from 1,084 to 996 s without it. This
 * module lets that one registration through as a no-op and puts `module.register` back as it
 * was; processinfo still writes its record of the process, with the main file only.
 *
 * `./ts-loader.mjs` takes this module out of NODE_OPTIONS again, so the programs a test starts
 * never load it.
 *
 * The price: a NODE_OPTIONS of the caller's no longer reaches the test processes (`test-env`
 * replaces it). Node flags for them go through tap's `--node-arg`, which replaces the list in
 * package.json, so name ts-loader's too:
 * `npx tap --node-arg=--import=./test/helpers/ts-loader.mjs --node-arg=--cpu-prof test/x.test.js`.
 */
import Module from 'node:module';

const register = Module.register;
if (typeof register === 'function') {
  Module.register = function registerUnlessProcessinfo(specifier, ...rest) {
    const parent = typeof rest[0] === 'object' && rest[0] !== null ? rest[0].parentURL : rest[0];
    if (/[/\\]@tapjs[/\\+]processinfo[/\\]/.test(`${String(specifier)} ${String(parent ?? '')}`)) {
      Module.register = register;
      return undefined;
    }
    return register.call(this, specifier, ...rest);
  };
}
