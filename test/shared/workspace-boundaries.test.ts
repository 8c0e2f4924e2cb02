/**
 * What each workspace may import. `shared` is the contract and imports no other workspace;
 * `toolkit` (the daemons' spool, HTTP, providers…) may import shared; the three programs never
 * import each other, and the agent loads neither the toolkit nor shared's full index (its imports
 * are its load surface). Every package a library imports is declared in its own package.json.
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { join } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');

function sources(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) sources(p, out);
    else if (e.endsWith('.ts') && !e.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** Every module specifier a workspace's sources name (static, dynamic and type imports, re-exports). */
function specifiers(ws: string): { file: string; spec: string }[] {
  const found: { file: string; spec: string }[] = [];
  for (const file of sources(join(ROOT, ws, 'src'))) {
    const text = readFileSync(file, 'utf8');
    for (const m of text.matchAll(/(?:^|\s)(?:import|export)\b[^'"]*?\bfrom\s*'([^']+)'|\bimport\(\s*'([^']+)'\s*\)|^import\s+'([^']+)'/gm)) {
      found.push({ file: file.slice(ROOT.length + 1), spec: (m[1] ?? m[2] ?? m[3])! });
    }
  }
  return found;
}

const packageOf = (spec: string) => (spec.startsWith('@') ? spec.split('/').slice(0, 2).join('/') : spec.split('/')[0]!);
const bare = (spec: string) => !spec.startsWith('.') && !spec.startsWith('node:');

const RULES: Record<string, (spec: string) => string | null> = {
  shared: (s) => (/^@capstan\//.test(s) ? 'shared imports no other workspace' : null),
  toolkit: (s) => (/^@capstan\/(agent|relayd|server)(\/|$)/.test(s) ? 'toolkit imports no program' : null),
  agent: (s) =>
    /^@capstan\/(toolkit|relayd|server)(\/|$)/.test(s) ? 'the agent imports neither the toolkit nor another program'
      : s === '@capstan/shared' ? "the agent imports shared's modules by subpath, not its whole index" : null,
  relayd: (s) => (/^@capstan\/(agent|server)(\/|$)/.test(s) ? 'programs never import each other' : null),
  server: (s) => (/^@capstan\/(agent|relayd)(\/|$)/.test(s) ? 'programs never import each other' : null),
};

for (const [ws, rule] of Object.entries(RULES)) {
  t.test(`${ws}: imports within its bounds`, async (t) => {
    const all = specifiers(ws);
    t.ok(all.length > 0, 'sources found');
    const bad = all.map((x) => ({ ...x, why: rule(x.spec) })).filter((x) => x.why !== null);
    t.same(bad, [], 'no import crosses a boundary');
  });
}

for (const ws of ['shared', 'toolkit']) {
  t.test(`${ws}: every package it imports is declared`, async (t) => {
    const pkg = JSON.parse(readFileSync(join(ROOT, ws, 'package.json'), 'utf8')) as { dependencies?: Record<string, string> };
    const declared = new Set(Object.keys(pkg.dependencies ?? {}));
    const used = new Set(specifiers(ws).map((x) => x.spec).filter(bare).map(packageOf));
    t.same([...used].filter((p) => !declared.has(p)).sort(), [], 'imported but not declared');
    t.same([...declared].filter((p) => !used.has(p)).sort(), [], 'declared but never imported');
  });
}
