#!/usr/bin/env node
// @ts-check
/**
 * Builds the web console into server/dist/web/ (part of `npm run build`): type-checks
 * server/web/ (tsc, no output), bundles it with esbuild (Preact, uPlot and the console's own
 * code, minified, one script and one stylesheet named by their content hash), and writes
 * index.html naming them. Nothing is fetched: every file comes from node_modules and server/web.
 * capstan-server serves what is there (server/src/console/static.ts); scripts/package.mjs ships it.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { mkdirSync, readFileSync, rmSync, writeFileSync } from 'node:fs';
import { basename, join, resolve } from 'node:path';
import { gzipSync } from 'node:zlib';
import { build } from 'esbuild';

const REPO = resolve(import.meta.dirname, '..');
const WEB = join(REPO, 'server', 'web');
const OUT = join(REPO, 'server', 'dist', 'web');

const started = Date.now();
execFileSync(process.execPath, [join(REPO, 'node_modules', 'typescript', 'bin', 'tsc'), '-p', WEB], { stdio: 'inherit' });

rmSync(OUT, { recursive: true, force: true });
mkdirSync(join(OUT, 'assets'), { recursive: true });
const result = await build({
  entryPoints: [join(WEB, 'src', 'main.tsx')],
  bundle: true,
  minify: true,
  format: 'esm',
  target: ['es2022', 'chrome110', 'firefox110', 'safari16'],
  jsx: 'automatic',
  jsxImportSource: 'preact',
  outdir: join(OUT, 'assets'),
  entryNames: 'app-[hash]',
  metafile: true,
  legalComments: 'none', // the licences are in assets/licenses.txt
  logLevel: 'warning',
});
const outputs = Object.keys(result.metafile.outputs).map((p) => basename(p));
const js = outputs.find((f) => f.endsWith('.js'));
const css = outputs.find((f) => f.endsWith('.css'));
if (!js || !css) throw new Error(`esbuild produced ${outputs.join(', ')}: expected one .js and one .css`);
const icon = readFileSync(join(WEB, 'icon.svg'));
const iconName = `icon-${createHash('sha256').update(icon).digest('hex').slice(0, 10)}.svg`;
writeFileSync(join(OUT, 'assets', iconName), icon);
// The libraries bundled into the script keep their licences beside it (MIT: the notice travels with the code).
const BUNDLED = ['preact', 'uplot'];
writeFileSync(join(OUT, 'assets', 'licenses.txt'), BUNDLED.map((name) => {
  const pkg = JSON.parse(readFileSync(join(REPO, 'node_modules', name, 'package.json'), 'utf8'));
  return `${pkg.name} ${pkg.version} (${pkg.license})\n\n${readFileSync(join(REPO, 'node_modules', name, 'LICENSE'), 'utf8').trim()}\n`;
}).join('\n----------------------------------------------------------------\n\n'));
const html = readFileSync(join(WEB, 'index.html'), 'utf8').replace('%JS%', js).replace('%CSS%', css).replace('%ICON%', iconName);
writeFileSync(join(OUT, 'index.html'), html);

// What a first load costs, compressed as the server sends it (gzip; brotli is smaller still).
const first = [join(OUT, 'index.html'), join(OUT, 'assets', js), join(OUT, 'assets', css), join(OUT, 'assets', iconName)];
const kb = (n) => (n / 1024).toFixed(1);
const raw = first.reduce((s, f) => s + readFileSync(f).length, 0);
const gz = first.reduce((s, f) => s + gzipSync(readFileSync(f), { level: 9 }).length, 0);
process.stdout.write(`console built in ${Date.now() - started} ms: ${js}, ${css}; first load ${kb(raw)} KiB, ${kb(gz)} KiB gzip\n`);
// The first load's budget (docs/console.md): a build over it fails, so a heavier console is a choice made here.
const budget = Number(process.env.CAPSTAN_CONSOLE_BUDGET_KIB ?? 100);
if (!(budget > 0)) throw new Error(`CAPSTAN_CONSOLE_BUDGET_KIB must be a number of KiB above 0, not ${process.env.CAPSTAN_CONSOLE_BUDGET_KIB}`);
if (gz > budget * 1024) {
  process.stderr.write(`the console's first load is ${kb(gz)} KiB gzip, over its budget of ${budget} KiB (CAPSTAN_CONSOLE_BUDGET_KIB): load the new pages lazily\n`);
  process.exit(1);
}
