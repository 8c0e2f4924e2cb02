#!/usr/bin/env node
/**
 * `npm run package`: capstan-agent, capstan-relayd and capstan-server .deb files in dist-deb/,
 * assembled from what `npm ci` and `tsc -b` left in the tree and built with Debian's dpkg-deb.
 * Nothing is downloaded. Layout, maintainer scripts and the admin's commands: packaging/README.md.
 *
 *   node scripts/package.mjs [--out <dir>] [--compression xz|zstd|gzip|none] [agent|relayd|server ...]
 *
 * --compression: how dpkg-deb compresses the files (default xz, the smallest packages; zstd
 * builds in a twentieth of the time, and every dpkg since Debian 12 and Ubuntu 21.10 reads it).
 *
 * Exit codes: 0 built, 1 the tree could not be packaged (the message says why), 2 bad arguments or
 * dpkg-deb missing.
 */
import { execFileSync, spawnSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import {
  chmodSync, copyFileSync, existsSync, lstatSync, lutimesSync, mkdirSync, mkdtempSync, readdirSync,
  readFileSync, rmSync, symlinkSync, writeFileSync,
} from 'node:fs';
import { tmpdir } from 'node:os';
import { dirname, join, relative, resolve } from 'node:path';
import { gzipSync } from 'node:zlib';
import { copyPackage, dependencyClosure } from '../packaging/debian/bundle.mjs';

const REPO = resolve(import.meta.dirname, '..');
const PROGRAMS = ['agent', 'relayd', 'server'];
/** dpkg-deb's -Z types. */
const COMPRESSIONS = ['xz', 'zstd', 'gzip', 'none'];
/** Used only when dpkg-shlibdeps (dpkg-dev) is absent: the C/C++ runtime a node-gyp addon links. */
const SHLIBS_FALLBACK = 'libc6, libgcc-s1, libstdc++6';

class UsageError extends Error {}

function main(argv) {
  let out = join(REPO, 'dist-deb');
  let compression = 'xz';
  const programs = [];
  const usage = `usage: package.mjs [--out <dir>] [--compression ${COMPRESSIONS.join('|')}] [${PROGRAMS.join('|')} ...]`;
  for (let i = 0; i < argv.length; i++) {
    if (argv[i] === '--out' && i + 1 < argv.length) out = resolve(argv[++i]);
    else if (argv[i] === '--compression' && i + 1 < argv.length) {
      compression = argv[++i];
      if (!COMPRESSIONS.includes(compression)) throw new UsageError(`--compression must be one of ${COMPRESSIONS.join(', ')} (${usage})`);
    } else if (PROGRAMS.includes(argv[i])) programs.push(argv[i]);
    else throw new UsageError(`unknown argument ${argv[i]} (${usage})`);
  }
  if (!which('dpkg-deb')) throw new UsageError("dpkg-deb not found: install Debian's dpkg");

  const ctx = context();
  mkdirSync(out, { recursive: true });
  for (const program of programs.length > 0 ? programs : PROGRAMS) {
    const started = Date.now();
    const deb = buildDeb(program, { ...ctx, compression }, out);
    process.stdout.write(`${relative(process.cwd(), deb)}  ${Math.round(lstatSync(deb).size / 1024)} KiB  ${Date.now() - started} ms\n`);
  }
}

/** What every package shares: version, Node.js floor, maintainer, timestamp. */
function context() {
  const rootPkg = readJson(join(REPO, 'package.json'));
  const versions = new Set(['shared', 'toolkit', ...PROGRAMS].map((ws) => readJson(join(REPO, ws, 'package.json')).version));
  // Every program answers --version with shared's version: one version or the packages would lie.
  if (versions.size !== 1) throw new Error(`workspace versions differ (${[...versions].join(', ')}): bump them together`);
  const floor = /^>=\s*(\d+(?:\.\d+){0,2})$/.exec(rootPkg.engines?.node ?? '');
  if (!floor) throw new Error(`engines.node in package.json must read ">=X.Y.Z", not ${JSON.stringify(rootPkg.engines?.node)}`);
  if (compareVersions(process.versions.node, floor[1]) < 0) throw new Error(`node ${process.versions.node} is older than engines.node ${floor[1]}`);
  const epoch = Number(process.env.SOURCE_DATE_EPOCH ?? gitCommitTime() ?? Math.floor(Date.now() / 1000));
  const name = process.env.DEBFULLNAME ?? 'Capstan maintainers';
  const email = process.env.DEBEMAIL ?? 'capstan@example.org';
  return { version: [...versions][0], nodeFloor: floor[1], epoch, maintainer: `${name} <${email}>`, license: rootPkg.license };
}

/** Commands a package ships beside its own: the server's carries `capstan`, the remote admin CLI. */
const EXTRA_BINS = { server: { capstan: 'dist/admin-cli/cli.js' } };

function buildDeb(program, ctx, out) {
  const pkgName = `capstan-${program}`;
  const tmpl = join(REPO, 'packaging', 'debian', program);
  // Staged outside the repo: the --help run below then proves the tree needs nothing from the repo.
  const root = mkdtempSync(join(tmpdir(), `${pkgName}-`));
  try {
    const tree = join(root, 'usr', 'lib', 'capstan', program);
    const cli = join(tree, 'dist', 'cli.js');
    const closure = dependencyClosure(REPO, program);
    const nativeFiles = [];
    for (const entry of closure) nativeFiles.push(...copyPackage(entry, tree).nativeFiles);
    if (!existsSync(cli)) throw new Error(`${program}/dist/cli.js is missing: run tsc -b first`);
    chmodSync(cli, 0o755);
    for (const file of nativeFiles) strip(file);

    place(root, `usr/bin/${pkgName}`, { symlink: `../lib/capstan/${program}/dist/cli.js` });
    for (const [name, file] of Object.entries(EXTRA_BINS[program] ?? {})) {
      if (!existsSync(join(tree, file))) throw new Error(`${program}/${file} is missing: run tsc -b first`);
      chmodSync(join(tree, file), 0o755);
      place(root, `usr/bin/${name}`, { symlink: `../lib/capstan/${program}/${file}` });
    }
    place(root, `etc/capstan/${program}.toml`, { from: join(REPO, 'packaging', 'etc', 'capstan', `${program}.toml`) });
    for (const unit of readdirSync(join(REPO, 'packaging', 'systemd')).filter((f) => f.startsWith(`${pkgName}.`) || f.startsWith(`${pkgName}-`))) {
      place(root, `lib/systemd/system/${unit}`, { from: join(REPO, 'packaging', 'systemd', unit) });
    }
    if (existsSync(join(tmpl, 'sysusers.conf'))) place(root, `usr/lib/sysusers.d/${pkgName}.conf`, { from: join(tmpl, 'sysusers.conf') });
    const date = new Date(ctx.epoch * 1000);
    const man = fill(readFileSync(join(tmpl, `${pkgName}.8.in`), 'utf8'), {
      DATE: date.toISOString().slice(0, 10), VERSION: ctx.version, HELP: helpAsTroff(cli, root),
    });
    place(root, `usr/share/man/man8/${pkgName}.8.gz`, { data: gzipSync(man, { level: 9 }) });
    place(root, `usr/share/doc/${pkgName}/copyright`, { data: copyright(ctx, closure, program) });
    place(root, `usr/share/doc/${pkgName}/changelog.gz`, { data: gzipSync(changelog(ctx, date), { level: 9 }) });

    const arch = nativeFiles.length > 0 ? execFileSync('dpkg', ['--print-architecture'], { encoding: 'utf8' }).trim() : 'all';
    // One range for the three packages: from engines.node to the major this release was built
    // and tested on. better-sqlite3 (the server's) is built against V8's ABI and loads only in
    // that major; the agent's and relay's N-API addons would load later, but one range keeps a
    // host running two of the programs on one Node.js, and what runs is what was tested.
    const major = Number(process.versions.node.split('.')[0]);
    const nodejs = `nodejs (>= ${ctx.nodeFloor}), nodejs (<< ${major + 1})`;
    const control = fill(readFileSync(join(tmpl, 'control'), 'utf8'), {
      VERSION: ctx.version, ARCH: arch, MAINTAINER: ctx.maintainer, INSTALLED_SIZE: String(installedSize(root)),
      NODEJS: nodejs, SHLIBS: nativeFiles.length > 0 ? shlibsDepends(nativeFiles) : '',
    }).replace(/^(Depends: .*)$/m, (line) => line.split(/,\s*/).filter((d) => !/^(Depends: )?$/.test(d.trim())).join(', '));

    const debian = join(root, 'DEBIAN');
    mkdirSync(debian, { mode: 0o755 });
    writeFileSync(join(debian, 'control'), control);
    writeFileSync(join(debian, 'conffiles'), `/etc/capstan/${program}.toml\n`);
    for (const script of ['preinst', 'postinst', 'prerm', 'postrm']) {
      if (!existsSync(join(tmpl, script))) continue;
      copyFileSync(join(tmpl, script), join(debian, script));
      chmodSync(join(debian, script), 0o755);
    }
    writeFileSync(join(debian, 'md5sums'), md5sums(root));
    normalize(root, ctx.epoch);

    const deb = join(out, `${pkgName}_${ctx.version}_${arch}.deb`);
    const r = spawnSync('dpkg-deb', ['--root-owner-group', `-Z${ctx.compression}`, '--build', root, deb], {
      encoding: 'utf8', env: { ...process.env, SOURCE_DATE_EPOCH: String(ctx.epoch) },
    });
    if (r.status !== 0) throw new Error(`dpkg-deb failed for ${pkgName}: ${r.stderr || r.error}`);
    return deb;
  } finally {
    rmSync(root, { recursive: true, force: true });
  }
}

/** Writes one file (0644) or symlink of the package, making its folders. */
function place(root, rel, { from, data, symlink }) {
  const to = join(root, rel);
  mkdirSync(dirname(to), { recursive: true });
  if (symlink !== undefined) return symlinkSync(symlink, to);
  if (from !== undefined) copyFileSync(from, to);
  else writeFileSync(to, data);
  chmodSync(to, 0o644);
}

function fill(template, values) {
  return template.replace(/@([A-Z_]+)@/g, (m, key) => {
    if (!(key in values)) throw new Error(`unknown placeholder ${m} in a packaging template`);
    return values[key];
  });
}

/** The program's --help and each command's, as a literal troff block, from the staged tree. */
function helpAsTroff(cli, cwd) {
  const help = (args) => {
    const r = spawnSync(process.execPath, [cli, ...args], { cwd, encoding: 'utf8', env: withoutNodePath() });
    if (r.status !== 0) throw new Error(`the packaged ${cli} ${args.join(' ')} failed (a dependency missing from the bundle?): ${r.stderr}`);
    return r.stdout.trimEnd();
  };
  const top = help(['--help']);
  const sections = [top];
  const commands = top.split('\n\nCommands:\n')[1];
  for (const line of commands ? commands.split('\n') : []) {
    const name = /^ {2}(\S+)/.exec(line)?.[1];
    if (name && name !== 'help') sections.push(help([name, '--help']));
  }
  const literal = (text) => text.split('\n').map((l) => `\\&${l.replaceAll('\\', '\\e').replaceAll('-', '\\-')}`).join('\n');
  return sections.map((s) => `.PP\n.nf\n${literal(s)}\n.fi`).join('\n');
}

function withoutNodePath() {
  const env = { ...process.env };
  delete env.NODE_PATH;
  delete env.NODE_OPTIONS;
  return env;
}

/** DEP-5 copyright: Capstan, then each bundled npm package with its licence as its package.json states it. */
function copyright(ctx, closure, program) {
  const dep5 = (spdx) => spdx.replace(/[()]/g, '').replace(/ OR /g, ' or ').replace(/ AND /g, ' and ').replace(/^GPL-3\.0-or-later$/, 'GPL-3+');
  const paras = [
    ['Format: https://www.debian.org/doc/packaging-manuals/copyright-format/1.0/', 'Upstream-Name: capstan'],
    ['Files: *', `Copyright: ${new Date(ctx.epoch * 1000).getUTCFullYear()} the Capstan authors`, `License: ${dep5(ctx.license)}`],
  ];
  for (const e of closure.filter((x) => !x.workspace)) {
    const dir = `usr/lib/capstan/${program}/${e.target}`;
    const licenseFile = readdirSync(e.source).find((f) => /^(licen[cs]e|copying)/i.test(f));
    // The licence's own notice ("Copyright (c) 2016-2024 Matteo Collina ..."), else a pointer.
    const notice = licenseFile ? /^\s*copyright\s+(?:\(c\)\s*|©\s*)?((?:\d{4}|(?<=\(c\)\s*|©\s*)\S).*\S)\s*$/im.exec(readFileSync(join(e.source, licenseFile), 'utf8'))?.[1] : undefined;
    paras.push([
      `Files: ${dir}/*`,
      `Copyright: ${notice ?? `the authors of ${e.name} ${e.version}`}`,
      `License: ${dep5(e.license)}`,
      licenseFile ? ` The full text is in /${dir}/${licenseFile}.` : ` ${e.name} ships no licence file; its package.json declares ${e.license}.`,
    ]);
  }
  paras.push([
    'License: GPL-3+',
    ' This program is free software: you can redistribute it and/or modify it under the terms of',
    ' the GNU General Public License as published by the Free Software Foundation, either version 3',
    ' of the License, or (at your option) any later version.',
    ' .',
    ' On Debian systems, the complete text of the GNU General Public License version 3 can be found',
    ' in /usr/share/common-licenses/GPL-3.',
  ]);
  return paras.map((p) => p.join('\n')).join('\n\n') + '\n';
}

function changelog(ctx, date) {
  const when = date.toUTCString().replace('GMT', '+0000');
  return `capstan (${ctx.version}) unstable; urgency=medium\n\n  * Capstan ${ctx.version}, packaged by npm run package.\n\n -- ${ctx.maintainer}  ${when}\n`;
}

/** dpkg's Installed-Size: KiB, each file rounded up, each folder and link one. */
function installedSize(root) {
  let kib = 0;
  walk(root, (path, st) => {
    kib += st.isFile() ? Math.ceil(st.size / 1024) : 1;
  });
  return kib;
}

function md5sums(root) {
  const lines = [];
  walk(root, (path, st) => {
    const rel = relative(root, path);
    if (st.isFile() && !rel.startsWith('DEBIAN/')) lines.push(`${createHash('md5').update(readFileSync(path)).digest('hex')}  ${rel}`);
  });
  return lines.sort((a, b) => (a.slice(34) < b.slice(34) ? -1 : 1)).join('\n') + '\n';
}

/** Folders 0755 whatever the umask; every time set to the commit's, so a rebuild gives the same files. */
function normalize(root, epoch) {
  chmodSync(root, 0o755); // the package's ./ (mkdtemp made it 0700)
  lutimesSync(root, epoch, epoch);
  walk(root, (path, st) => {
    if (st.isDirectory()) chmodSync(path, 0o755);
    lutimesSync(path, epoch, epoch);
  });
}

function walk(dir, visit) {
  for (const entry of readdirSync(dir, { withFileTypes: true })) {
    const path = join(dir, entry.name);
    const st = lstatSync(path);
    if (st.isDirectory()) walk(path, visit);
    visit(path, st);
  }
}

/** Debug symbols and build notes out of the addons, as dh_strip does; skipped without binutils. */
function strip(file) {
  if (!which('strip')) return;
  execFileSync('strip', ['--strip-unneeded', '--remove-section=.comment', '--remove-section=.note', file]);
}

/** Library packages the addons link, with versions, from dpkg-shlibdeps when dpkg-dev is installed. */
function shlibsDepends(files) {
  if (!which('dpkg-shlibdeps')) return SHLIBS_FALLBACK;
  const cwd = mkdtempSync(join(tmpdir(), 'capstan-shlibs-'));
  try {
    mkdirSync(join(cwd, 'debian'));
    writeFileSync(join(cwd, 'debian', 'control'), '');
    // Warnings about node's own symbols (found in no library: node exports them) are expected.
    const r = spawnSync('dpkg-shlibdeps', ['-O', '--warnings=0', ...files.map((f) => `-e${f}`)], { cwd, encoding: 'utf8' });
    const deps = /^shlibs:Depends=(.*)$/m.exec(r.stdout ?? '')?.[1];
    if (r.status !== 0 || !deps) throw new Error(`dpkg-shlibdeps failed: ${r.stderr}`);
    return deps;
  } finally {
    rmSync(cwd, { recursive: true, force: true });
  }
}

function gitCommitTime() {
  const r = spawnSync('git', ['log', '-1', '--format=%ct'], { cwd: REPO, encoding: 'utf8' });
  return r.status === 0 && /^\d+$/.test(r.stdout.trim()) ? r.stdout.trim() : null;
}

function which(cmd) {
  return (process.env.PATH ?? '').split(':').some((d) => d !== '' && existsSync(join(d, cmd)));
}

function compareVersions(a, b) {
  const pa = a.split('.').map(Number);
  const pb = b.split('.').map(Number);
  for (let i = 0; i < 3; i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) - (pb[i] ?? 0);
  return 0;
}

function readJson(file) {
  return JSON.parse(readFileSync(file, 'utf8'));
}

try {
  main(process.argv.slice(2));
} catch (err) {
  process.stderr.write(`package: ${err.message}\n`);
  process.exit(err instanceof UsageError ? 2 : 1);
}
