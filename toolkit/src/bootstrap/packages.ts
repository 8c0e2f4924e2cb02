/**
 * The agent package a bootstrap copies to a node: from a folder of .deb files as `npm run
 * package` names them (`capstan-agent_<version>_<arch>.deb`), or downloaded once from a configured
 * URL and checked against its sha256 before any node receives it.
 */
import { createHash } from 'node:crypto';
import { createWriteStream } from 'node:fs';
import { readdir, readFile, rename, stat, unlink } from 'node:fs/promises';
import { basename, join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { makeDir } from '@capstan/shared/dir';
import type { AgentPackage } from './ssh.js';

const DEB = /^capstan-agent_([^_/]+)_([a-z0-9-]+)\.deb$/;

export interface PackageOptions {
  /** Folder of .deb files. */
  dir: string;
  /** Or a URL with its sha256 ('' when not used). */
  url: string;
  sha256: string;
  maxBytes: number;
  /** Where a downloaded package is kept. */
  cacheDir: string;
}

/** Compare Debian-ish versions well enough for our own `X.Y.Z` releases (numeric parts first). */
function newer(a: string, b: string): boolean {
  const pa = a.split(/[.~+-]/).map((x) => Number.parseInt(x, 10) || 0);
  const pb = b.split(/[.~+-]/).map((x) => Number.parseInt(x, 10) || 0);
  for (let i = 0; i < Math.max(pa.length, pb.length); i++) if ((pa[i] ?? 0) !== (pb[i] ?? 0)) return (pa[i] ?? 0) > (pb[i] ?? 0);
  return false;
}

export class AgentPackages {
  private download: Promise<string> | null = null;

  constructor(private readonly o: PackageOptions) {}

  async packageFor(arch: string): Promise<AgentPackage | null> {
    return this.o.url ? this.fromUrl(arch) : this.fromDir(arch);
  }

  private async fromDir(arch: string): Promise<AgentPackage | null> {
    let names: string[];
    try {
      names = await readdir(this.o.dir);
    } catch (err) {
      throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `cannot read the package folder ${this.o.dir} (bootstrap.package_dir): ${(err as Error).message}`);
    }
    let best: { path: string; arch: string; version: string } | null = null;
    for (const name of names) {
      const m = DEB.exec(name);
      if (!m || (m[2] !== arch && m[2] !== 'all')) continue;
      if (!best || newer(m[1]!, best.version)) best = { path: join(this.o.dir, name), arch: m[2]!, version: m[1]! };
    }
    if (!best && !names.some((n) => DEB.test(n))) {
      throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `no capstan-agent_<version>_<arch>.deb in ${this.o.dir} (npm run package, then copy it there)`);
    }
    return best && { path: best.path, arch: best.arch };
  }

  private async fromUrl(arch: string): Promise<AgentPackage | null> {
    const m = DEB.exec(basename(new URL(this.o.url).pathname));
    if (!m) throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', 'bootstrap.package_url must end in capstan-agent_<version>_<arch>.deb');
    if (m[2] !== arch && m[2] !== 'all') return null;
    // One download for every node of every job (a failed one is tried again by the next node).
    this.download ??= this.fetchVerified().catch((err: unknown) => {
      this.download = null;
      throw err;
    });
    return { path: await this.download, arch: m[2]! };
  }

  private async fetchVerified(): Promise<string> {
    const want = this.o.sha256.toLowerCase();
    const path = join(this.o.cacheDir, `capstan-agent-${want}.deb`);
    const sum = async (p: string) => createHash('sha256').update(await readFile(p)).digest('hex');
    if (await stat(path).then(() => true, () => false)) {
      if ((await sum(path)) === want) return path;
      await unlink(path).catch(() => undefined);
    }
    await makeDir(this.o.cacheDir, 0o750);
    const tmp = `${path}.${process.pid}.tmp`;
    let res: Response;
    try {
      res = await fetch(this.o.url, { signal: AbortSignal.timeout(10 * 60_000) });
    } catch (err) {
      throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `cannot download ${this.o.url}: ${(err as Error).message}`);
    }
    if (!res.ok || !res.body) throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `${this.o.url} answered ${res.status}`);
    const hash = createHash('sha256');
    const out = createWriteStream(tmp, { mode: 0o640 });
    let bytes = 0;
    try {
      for await (const chunk of res.body as unknown as AsyncIterable<Uint8Array>) {
        bytes += chunk.length;
        if (bytes > this.o.maxBytes) throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `${this.o.url} is larger than bootstrap.max_package_size`);
        hash.update(chunk);
        if (!out.write(chunk)) await new Promise<void>((r) => out.once('drain', () => r()));
      }
      await new Promise<void>((resolve, reject) => out.end((err?: Error | null) => (err ? reject(err) : resolve())));
      const got = hash.digest('hex');
      if (got !== want) throw capstanError('ERR_BOOTSTRAP_NO_PACKAGE', `${this.o.url} has sha256 ${got}, not bootstrap.package_sha256`);
      await rename(tmp, path);
      return path;
    } catch (err) {
      out.destroy();
      await unlink(tmp).catch(() => undefined);
      throw err;
    }
  }
}
