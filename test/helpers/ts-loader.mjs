/**
 * tap's --import for every test process. `npm test` runs the JavaScript that `tsc -p test` writes
 * beside each test file: no loader, so a test file's process spends its CPU on the test, not on
 * compiling (tsx's hooks cost ~1.8 s of CPU per file, ~7 minutes over the suite on 2 cores).
 * A file named by its TypeScript source (`npx tap test/e2e/x.test.ts`, while editing) gets tsx,
 * which reads the sources as they are now.
 */
if (/\.[cm]?tsx?$/.test(process.argv[1] ?? '')) {
  const { register } = await import('tsx/esm/api');
  register();
}
