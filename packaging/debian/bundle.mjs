/**
 * What goes into a program's installed tree (/usr/lib/capstan/<program>/): the workspace package
 * (package.json + dist), and the production dependency closure copied from the repository's
 * node_modules, laid out so that Node's resolution finds the same copies it finds in the repo.
 * Used by scripts/package.mjs; no network, no npm process: the packages npm ci installed (native
 * modules already built for this machine) are what gets packaged.
 */
import {
  chmodSync, closeSync, copyFileSync, existsSync, lstatSync, mkdirSync, openSync, readdirSync, readFileSync, readSync, realpathSync,
} from 'node:fs';
import { basename, dirname, join, relative, sep } from 'node:path';

/**
 * Dependencies declared as production ones that are never loaded at run time: leaving them out
 * keeps their own trees (tar, HTTP clients, C++ headers, type declarations) out of every package.
 */
const NOT_AT_RUN_TIME = [
  [/^prebuild-install$/, 'downloads prebuilt native binaries during npm install'],
  [/^node-addon-api$/, 'C++ headers used only when a native addon is compiled'],
  [/^@types\//, 'TypeScript declarations'],
];

/** Top-level folders of an npm package that only its developers use. */
const DEV_FOLDERS = new Set([
  'test', 'tests', '__tests__', 'integration', 'bench', 'benchmark', 'benchmarks', 'docs', 'doc', 'example', 'examples',
  'scripts', 'coverage', '.github', '.vscode', '.husky',
]);
/** Files no program loads: declarations, maps, sources of compiled code, prose, tool settings. */
const DEV_FILE = /(\.d\.[mc]?ts|\.[mc]?ts|\.map|\.tsbuildinfo|\.md|\.markdown)$|^(\.npmignore|\.gitignore|\.gitattributes|\.editorconfig|\.travis\.yml|\.taprc|\.nycrc.*|\.eslintrc.*|\.prettierrc.*|tsconfig.*\.json)$/i;
/** Kept wherever they are, including inside dropped folders of native modules (deps/, src/). */
const LICENSE_FILE = /^(licen[cs]e|copying|notice|authors)([.-].*)?$/i;

/** Bound on the closure, so a cycle or a runaway tree stops with an error instead of filling the disk. */
const MAX_PACKAGES = 1000;

const readJson = (file) => JSON.parse(readFileSync(file, 'utf8'));

/**
 * @param {string} repoRoot the monorepo (root package.json with "workspaces")
 * @param {string} program workspace folder name: agent, relayd or server
 * @returns {{ name: string, version: string, license: string, source: string, target: string, workspace: boolean }[]}
 *   every package of the tree, the program itself first (target ''), targets relative to the tree
 */
export function dependencyClosure(repoRoot, program) {
  const rootPkg = readJson(join(repoRoot, 'package.json'));
  const workspaces = new Map(); // real dir -> name
  for (const ws of rootPkg.workspaces ?? []) workspaces.set(realpathSync(join(repoRoot, ws)), readJson(join(repoRoot, ws, 'package.json')).name);
  const programDir = realpathSync(join(repoRoot, program));
  if (!workspaces.has(programDir)) throw new Error(`${program} is not a workspace of ${repoRoot}`);

  // Where each folder that owns a node_modules lands in the installed tree.
  const owners = [{ dir: realpathSync(repoRoot), target: '' }];
  for (const [dir, name] of workspaces) owners.push({ dir, target: dir === programDir ? '' : join('node_modules', name) });
  const targetOf = (found) => {
    let best = null;
    for (const o of owners) if (found.startsWith(o.dir + sep) && (!best || o.dir.length > best.dir.length)) best = o;
    return join(best.target, relative(best.dir, found));
  };

  const result = [];
  const seen = new Set();
  const byTarget = new Map();
  const queue = [{ dir: programDir, requiredBy: null }];
  while (queue.length > 0) {
    const { dir, requiredBy } = queue.shift();
    if (seen.has(dir)) continue;
    seen.add(dir);
    if (seen.size > MAX_PACKAGES) throw new Error(`more than ${MAX_PACKAGES} packages in the closure of ${program}`);
    const pkg = readJson(join(dir, 'package.json'));
    const workspace = workspaces.has(dir);
    const target = dir === programDir ? '' : workspace ? join('node_modules', pkg.name) : targetOf(dir);
    const clash = byTarget.get(target);
    if (clash !== undefined) throw new Error(`${dir} and ${clash} would both be installed as ${target}`);
    byTarget.set(target, dir);
    result.push({ name: pkg.name, version: pkg.version, license: licenseOf(pkg), source: dir, target, workspace });

    const wanted = [
      ...Object.keys(pkg.dependencies ?? {}).map((n) => [n, true]),
      ...Object.keys(pkg.optionalDependencies ?? {}).map((n) => [n, false]),
      // npm installs peers; optional ones are used only if present, and production never needs them.
      ...Object.keys(pkg.peerDependencies ?? {}).filter((n) => !pkg.peerDependenciesMeta?.[n]?.optional).map((n) => [n, true]),
    ];
    for (const [name, required] of wanted) {
      if (NOT_AT_RUN_TIME.some(([re]) => re.test(name))) continue;
      const found = resolvePackage(repoRoot, name, dir);
      if (found === null) {
        if (required) throw new Error(`${name}, needed by ${pkg.name} (${requiredBy ?? 'the program'}), is not installed: run npm ci`);
        continue;
      }
      queue.push({ dir: found, requiredBy: pkg.name });
    }
  }
  return result;
}

/**
 * Node's lookup: <dir>/node_modules/<name>, then each ancestor's (folders named node_modules are
 * skipped), never above the repository. Workspace links resolve to the workspace folder.
 */
function resolvePackage(repoRoot, name, fromDir) {
  const top = realpathSync(repoRoot);
  for (let dir = fromDir; ; dir = dirname(dir)) {
    if (basename(dir) !== 'node_modules') {
      const candidate = join(dir, 'node_modules', name);
      if (existsSync(join(candidate, 'package.json'))) {
        const real = realpathSync(candidate);
        if (real !== candidate && !lstatSync(join(real, 'package.json')).isFile()) throw new Error(`${candidate}: unexpected link`);
        return real;
      }
    }
    if (dir === top || dir === dirname(dir)) return null;
  }
}

function licenseOf(pkg) {
  if (typeof pkg.license === 'string') return pkg.license;
  if (Array.isArray(pkg.licenses)) return pkg.licenses.map((l) => l.type ?? l).join(' OR ');
  return 'UNKNOWN';
}

/**
 * Copies one package of the closure into <treeDir>/<target>, leaving out what no program loads.
 * Files are written 0644 (0755 for scripts with a #! line) and folders 0755, whatever the
 * source had. A native module (binding.gyp) keeps only its compiled build/Release/*.node, its
 * JavaScript and its licence files: the C/C++ sources and object files stay behind.
 * @returns {{ files: number, nativeFiles: string[] }} nativeFiles: absolute paths of the copied .node files
 */
export function copyPackage(entry, treeDir) {
  const dest = join(treeDir, entry.target);
  const stats = { files: 0, nativeFiles: [] };
  if (entry.workspace) {
    copyFile(join(entry.source, 'package.json'), join(dest, 'package.json'), stats);
    // Compiled output of the sources that exist: tsc -b never deletes the output of a removed
    // source, and declarations, maps and build info describe src/, which is not shipped.
    copyTree(join(entry.source, 'dist'), join(dest, 'dist'), (rel, isDir) => isDir || hasSource(entry.source, rel) || isBundled(rel), stats);
    return stats;
  }
  const native = existsSync(join(entry.source, 'binding.gyp'));
  copyTree(entry.source, dest, (rel, isDir) => {
    const parts = rel.split(sep);
    const name = parts[parts.length - 1];
    if (parts.includes('node_modules')) return false; // nested dependencies come from the closure
    if (native && ['build', 'deps', 'src'].includes(parts[0])) {
      if (isDir) return true;
      // node-gyp's output; test_*.node are an addon's own test fixtures (better-sqlite3's test_extension).
      if (parts[0] === 'build') return parts.length === 3 && parts[1] === 'Release' && name.endsWith('.node') && !name.startsWith('test_');
      return LICENSE_FILE.test(name);
    }
    if (isDir) return !(parts.length === 1 && DEV_FOLDERS.has(name));
    // An HTML page at the top of a package is its documentation site (it loads scripts from CDNs).
    if (parts.length === 1 && /\.html?$/i.test(name)) return false;
    return LICENSE_FILE.test(name) || !DEV_FILE.test(name);
  }, stats);
  for (const rel of entryPoints(readJson(join(entry.source, 'package.json')))) {
    if (existsSync(join(entry.source, rel)) && !existsSync(join(dest, rel))) throw new Error(`${entry.name}: leaving out development files removed its entry point ${rel}`);
  }
  return stats;
}

/**
 * Folders of dist/ that a bundler writes, not tsc, shipped whole: the server's web console
 * (dist/web/: index.html and the hashed script, stylesheet and icon scripts/build-console.mjs makes).
 */
const BUNDLED_DIRS = ['web'];
function isBundled(distRel) {
  return BUNDLED_DIRS.includes(distRel.split(sep)[0]) && !/(\.map|\.LEGAL\.txt)$/.test(distRel);
}

/** dist/<p>.js comes from src/<p>.ts (or .js); any other file of dist/ from the same path in src/. */
function hasSource(workspaceDir, distRel) {
  if (/(\.d\.[mc]?ts|\.map|\.tsbuildinfo)$/.test(distRel)) return false;
  const m = /^(.*)\.([mc]?)js$/.exec(distRel);
  const candidates = m ? [`${m[1]}.${m[2]}ts`, `${m[1]}.tsx`, distRel] : [distRel];
  return candidates.some((c) => existsSync(join(workspaceDir, 'src', c)));
}

/** main and every plain path of exports: what a require or import of the package may open. */
function entryPoints(pkg) {
  const out = [];
  const walk = (v) => {
    if (typeof v === 'string') {
      // Declarations (the "types" condition) are for the compiler, not for a program.
      // Documents a package exports for reading (bowser: ./README.md) are not loaded either.
      if (!v.includes('*') && !/\.d\.[mc]?ts$/.test(v) && !/\.(md|markdown|txt)$/i.test(v)) out.push(v);
    } else if (v && typeof v === 'object') for (const x of Object.values(v)) walk(x);
  };
  if (typeof pkg.main === 'string') out.push(pkg.main);
  walk(pkg.exports);
  return out;
}

function copyTree(src, dest, keep, stats, rel = '') {
  const here = join(src, rel);
  for (const entry of readdirSync(here, { withFileTypes: true })) {
    const childRel = rel === '' ? entry.name : join(rel, entry.name);
    if (entry.isSymbolicLink()) throw new Error(`${join(here, entry.name)}: symbolic links inside packages are not supported`);
    if (entry.isDirectory()) {
      if (keep(childRel, true)) copyTree(src, dest, keep, stats, childRel);
    } else if (entry.isFile() && keep(childRel, false)) {
      copyFile(join(src, childRel), join(dest, childRel), stats);
      if (childRel.endsWith('.node')) stats.nativeFiles.push(join(dest, childRel));
    }
  }
}

function copyFile(from, to, stats) {
  mkdirSync(dirname(to), { recursive: true, mode: 0o755 });
  copyFileSync(from, to);
  // Scripts (a #! line: command-line entry points) stay runnable, as npm leaves them.
  chmodSync(to, startsWithShebang(to) ? 0o755 : 0o644);
  stats.files += 1;
}

function startsWithShebang(file) {
  const fd = openSync(file, 'r');
  try {
    const head = Buffer.alloc(2);
    return readSync(fd, head, 0, 2, 0) === 2 && head.toString('latin1') === '#!';
  } finally {
    closeSync(fd);
  }
}
