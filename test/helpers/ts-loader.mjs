/**
 * tap's --import for every test process. `npm test` runs the JavaScript that `tsc -p test` writes
 * beside each test file: no loader, so a test file's process spends its CPU on the test, not on
 * compiling (tsx's hooks cost ~1.8 s of CPU per file, ~7 minutes over the suite on 2 cores).
 * A file named by its TypeScript source (`npx tap test/e2e/x.test.ts`, while editing) gets tsx,
 * which reads the sources as they are now.
 *
 * The programs a test starts (servers, relays, agents, the CLI) run without tap's process-info
 * hooks: tap puts them in NODE_OPTIONS and in a hook on every spawn, for coverage, which this
 * suite does not collect, and they cost each child ~1 s of CPU (a server's start: 1.3 → 2.6 s).
 * The test process itself keeps processinfo's record (tap reads it), without its module hooks
 * (`./tap-early.mjs`, which tap's `test-env` puts in NODE_OPTIONS; taken out of it here too).
 */
if (/\.[cm]?tsx?$/.test(process.argv[1] ?? '')) {
  const { register } = await import('tsx/esm/api');
  register();
}

const onSpawn = globalThis[Symbol.for('process-on-spawn@*:singletonId')];
if (onSpawn && Array.isArray(onSpawn.listeners)) onSpawn.listeners.splice(0);
for (const k of Object.keys(process.env)) if (k.startsWith('_TAPJS_PROCESSINFO_')) delete process.env[k];
if (process.env.NODE_OPTIONS) {
  const rest = process.env.NODE_OPTIONS
    .replace(/"?--(?:import|loader)=[^"\s]*@tapjs[/+]processinfo[^"\s]*"?/g, '')
    .replace(/"?--import=[^"\s]*test\/helpers\/tap-early\.mjs"?/g, '')
    .trim();
  if (rest) process.env.NODE_OPTIONS = rest;
  else delete process.env.NODE_OPTIONS;
}
