/**
 * The server's layers, checked on its sources (README "Architecture"):
 * - routes, the console's routes and the command lines read through `reads.ts` and change
 *   through the domain: no file under api/, console/, cli/ or admin-cli/ imports the store;
 * - the store is persistence only: it imports nothing above it (the domain's rules reach it as
 *   StoreRules, registry/open.ts);
 * - node changes go through the node registry: outside store/ and registry/, no code calls a
 *   store's node mutators;
 * - composition roots only compose (no function over 80 lines), and no source file of any
 *   workspace is over 450 lines.
 * A file that used to reach into store internals from a route made this fail (boundaries kept by
 * comments alone had drifted before).
 */
import t from 'tap';
import { readdirSync, readFileSync, statSync } from 'node:fs';
import { dirname, join, relative, resolve } from 'node:path';

const ROOT = join(import.meta.dirname, '..', '..');
const SERVER = join(ROOT, 'server', 'src');

function sources(dir: string, out: string[] = []): string[] {
  for (const e of readdirSync(dir)) {
    const p = join(dir, e);
    if (statSync(p).isDirectory()) sources(p, out);
    else if (/\.tsx?$/.test(e) && !e.endsWith('.d.ts')) out.push(p);
  }
  return out;
}

/** Relative imports of a file (static, dynamic, type, re-exports), resolved to paths under the repo. */
function imports(file: string): string[] {
  const text = readFileSync(file, 'utf8');
  const out: string[] = [];
  for (const m of text.matchAll(/(?:^|\s)(?:import|export)\b[^'"]*?\bfrom\s*'(\.[^']+)'|\bimport\(\s*'(\.[^']+)'\s*\)/gm)) {
    out.push(resolve(dirname(file), (m[1] ?? m[2])!));
  }
  return out;
}

const rel = (p: string) => relative(ROOT, p);
const under = (p: string, dir: string) => p.startsWith(join(SERVER, dir) + '/');

t.test('routes, the console and the command lines never import the store', async (t) => {
  const offenders: string[] = [];
  for (const dir of ['api', 'console', 'cli', 'admin-cli']) {
    for (const file of sources(join(SERVER, dir))) {
      for (const target of imports(file)) if (under(target, 'store')) offenders.push(`${rel(file)} → ${rel(target)}`);
    }
  }
  t.same(offenders, [], 'they read through server/src/reads.ts and change through the domain');
});

t.test('the store imports nothing above it', async (t) => {
  const offenders: string[] = [];
  for (const file of sources(join(SERVER, 'store'))) {
    for (const target of imports(file)) {
      if (target.startsWith(SERVER + '/') && !under(target, 'store')) offenders.push(`${rel(file)} → ${rel(target)}`);
    }
  }
  t.same(offenders, []);
});

t.test('node changes go through the registry: no store node mutator is called beside it', async (t) => {
  const MUTATOR = /\b(?:store|this\.store|deps\.store|this\.deps\.store|this\.o\.store)\.(?:managers\.)?(createNode|changeNode|deleteNode|setProperties|upsertFromInventory|recordClockSkew|applyDiscovery|adoptDiscovered|markUnreachable|markMissing|purgeNodes)\(/;
  const offenders: string[] = [];
  for (const file of sources(SERVER)) {
    if (under(file, 'store') || under(file, 'registry')) continue;
    readFileSync(file, 'utf8').split('\n').forEach((line, i) => {
      if (MUTATOR.test(line)) offenders.push(`${rel(file)}:${i + 1}`);
    });
  }
  t.same(offenders, []);
});

/** Top-level functions and methods of a file with their length in lines (from header to closing brace). */
function functionLengths(file: string): Array<{ name: string; lines: number }> {
  const lines = readFileSync(file, 'utf8').split('\n');
  const out: Array<{ name: string; lines: number }> = [];
  lines.forEach((line, i) => {
    const m = /^(\s*)(?:export\s+)?(?:async\s+)?(?:function\s+(\w+)|(?:private\s+|protected\s+|static\s+)*(\w+)\s*\([^)]*\)[^=]*\{$)/.exec(line);
    if (!m || /^\s*(if|for|while|switch|catch)\b/.test(line)) return;
    const indent = m[1]!;
    const end = lines.findIndex((l, j) => j > i && l.startsWith(`${indent}}`));
    if (end > i) out.push({ name: (m[2] ?? m[3])!, lines: end - i + 1 });
  });
  return out;
}

t.test('composition roots only compose: no function over 80 lines', async (t) => {
  const roots = ['server/src/server.ts', 'server/src/api/app.ts', 'server/src/domain.ts', 'server/src/cli.ts', 'relayd/src/daemon.ts'];
  const long: string[] = [];
  for (const r of roots) {
    for (const f of functionLengths(join(ROOT, r))) if (f.lines > 80) long.push(`${r} ${f.name}: ${f.lines} lines`);
  }
  t.same(long, []);
});

t.test('no source file of any workspace is over 450 lines', async (t) => {
  const long: string[] = [];
  for (const ws of ['shared', 'toolkit', 'agent', 'relayd', 'server']) {
    for (const file of sources(join(ROOT, ws, ws === 'server' ? 'src' : 'src'))) {
      const n = readFileSync(file, 'utf8').split('\n').length;
      if (n > 450) long.push(`${rel(file)}: ${n} lines`);
    }
  }
  t.same(long, []);
});
