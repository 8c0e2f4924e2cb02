/**
 * What each workspace may import. `shared` is the contract and imports no other workspace;
 * `toolkit` (the daemons' spool, HTTP, providers…) may import shared; the three programs never
 * import each other, and the agent loads neither the toolkit nor shared's full index (its imports
 * are its load surface; the relay and server, too, import shared and the toolkit by subpath).
 * `bench` (the benchmarks and the fleet simulator) may import every workspace, through its
 * package exports only, and nothing else imports it: what the programs
 * ship holds no benchmark or simulator code. Every package a library or the bench imports is
 * declared in its own package.json.
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join, relative, resolve, sep } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

/** Built output, installed packages, results and caches: not sources. */
const NOT_SOURCES = new Set(['dist', 'node_modules', 'results', '.cache']);

function sources(dir: string, out: string[] = [], scripts = false): string[] {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) {
      if (!NOT_SOURCES.has(e)) sources(p, out, scripts);
    } else if ((e.endsWith('.ts') && !e.endsWith('.d.ts')) || (scripts && e.endsWith('.mjs'))) out.push(p);
  }
  return out;
}

/**
 * Every module specifier a workspace's sources name (static, dynamic and type imports,
 * re-exports, import.meta.resolve). The bench's scripts (bench/*.mjs, bench/lib/) count as its
 * sources beside bench/src/.
 */
function specifiers(ws: string): { file: string; spec: string }[] {
  const found: { file: string; spec: string }[] = [];
  const files = ws === 'bench' ? sources(join(ROOT, ws), [], true) : sources(join(ROOT, ws, 'src'));
  for (const file of files) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:^|\s)(?:import|export)\b[^'"]*?\bfrom\s*'([^']+)'|\bimport\(\s*'([^']+)'\s*\)|^import\s+'([^']+)'|\bimport\.meta\.resolve\(\s*'([^']+)'\s*\)/gm)) {
      found.push({ file: file.slice(ROOT.length + 1), spec: (m[1] ?? m[2] ?? m[3] ?? m[4])! });
    }
  }
  return found;
}

const packageOf = (spec: string) => (spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!);
const bare = (spec: string) => !spec.startsWith('.') && !spec.startsWith('node:');

const NO_BENCH = 'the benchmarks and the simulator are not shipped: nothing imports @capstan/bench';
/**
 * The programs name the modules they use, never a library's whole index: a command line that
 * prints its help or lists nodes then loads neither the S/MIME library nor the HTTP stack.
 */
const WHOLE_INDEX = (s: string) => (s === '@capstan/shared' || s === '@capstan/toolkit' ? `${s}'s modules are imported by subpath, not its whole index` : null);
const RULES: Record<string, (spec: string) => string | null> = {
  shared: (s) => (/^@capstan\//.test(s) ? 'shared imports no other workspace' : null),
  toolkit: (s) => (/^@capstan\/(agent|relayd|server)(\/|$)/.test(s) ? 'toolkit imports no program' : /^@capstan\/bench(\/|$)/.test(s) ? NO_BENCH : null),
  agent: (s) =>
    /^@capstan\/(toolkit|relayd|server)(\/|$)/.test(s) ? 'the agent imports neither the toolkit nor another program'
      : s === '@capstan/shared' ? "the agent imports shared's modules by subpath, not its whole index"
        : /^@capstan\/bench(\/|$)/.test(s) ? NO_BENCH : null,
  relayd: (s) => (/^@capstan\/(agent|server)(\/|$)/.test(s) ? 'programs never import each other' : /^@capstan\/bench(\/|$)/.test(s) ? NO_BENCH : WHOLE_INDEX(s)),
  server: (s) => (/^@capstan\/(agent|relayd)(\/|$)/.test(s) ? 'programs never import each other' : /^@capstan\/bench(\/|$)/.test(s) ? NO_BENCH : WHOLE_INDEX(s)),
  // The bench may import every workspace (it measures them all), by package name.
  bench: () => null,
};

for (const [ws, rule] of Object.entries(RULES)) {
  t.test(`${ws}: imports within its bounds`, async (t) => {
    const all = specifiers(ws);
    t.ok(all.length > 0, 'sources found');
    const bad = all.map((x) => ({ ...x, why: rule(x.spec) })).filter((x) => x.why !== null);
    t.same(bad, [], 'no import crosses a boundary');
  });
}

t.test('bench: reaches the programs through their package exports, never their files', async (t) => {
  const bad = specifiers('bench')
    .filter((x) => x.spec.startsWith('.'))
    .map((x) => ({ ...x, to: relative(ROOT, resolve(ROOT, x.file, '..', x.spec)) }))
    .filter((x) => !x.to.startsWith(`bench${sep}`));
  t.same(bad, [], 'every relative import stays inside bench/');
});

for (const ws of ['shared', 'toolkit', 'bench']) {
  t.test(`${ws}: every package it imports is declared`, async (t) => {
    const pkg = JSON.parse(readFileSync(join(ROOT, ws, 'package.json'), 'utf8')) as { name: string; dependencies?: Record<string, string> };
    const declared = new Set(Object.keys(pkg.dependencies ?? {}));
    // The bench's scripts import its built modules by its own name.
    const used = new Set(specifiers(ws).map((x) => x.spec).filter(bare).map(packageOf).filter((p) => p !== pkg.name));
    t.same([...used].filter((p) => !declared.has(p)).sort(), [], 'imported but not declared');
    t.same([...declared].filter((p) => !used.has(p)).sort(), [], 'declared but never imported');
  });
}

/**
 * The server's store is the bottom room: the registry, jobs, policy and the API are built on it,
 * so it imports none of them (it once reached up into jobs/ for the task states, which made the
 * store's types depend on the job runner's folder).
 */
t.test('server: the store imports nothing from the rooms above it', async (t) => {
  const store = join(ROOT, 'server', 'src', 'store');
  const bad = specifiers('server')
    .filter((x) => x.file.startsWith(`server${sep}src${sep}store${sep}`) && x.spec.startsWith('.'))
    .map((x) => ({ ...x, to: resolve(ROOT, x.file, '..', x.spec) }))
    .filter((x) => !x.to.startsWith(store + sep))
    .map(({ file, spec }) => ({ file, spec }));
  t.same(bad, [], 'every relative import stays inside server/src/store/');
});
