/**
 * The distributions whose OSV feeds Capstan reads, how a feed names them (`Debian:12`,
 * `Ubuntu:22.04:LTS`, `AlmaLinux:9`, `Rocky Linux:9`, `Alpine:v3.19`), how a node's os.name and
 * os.version lead to the same key, which version order each uses, and which package name its
 * entries give (docs/vulnerabilities.md, *Ecosystems*).
 *
 * Alpine has no version order here: apk's (with its `_rc`, `_p`, `-r` suffixes) differs from
 * dpkg's and RPM's, and no implementation of it could be checked on Debian (apk-tools is not
 * packaged there), so Alpine entries match only through their `versions` lists, exactly.
 */
import { compareVersions } from '@capstan/shared/filter/version';
import { compareRpmVersions } from '@capstan/shared/filter/rpm-version';

export type Family = 'deb' | 'rpm' | 'apk';

export interface Ecosystem {
  /** The distribution as OSV names it. */
  name: 'Debian' | 'Ubuntu' | 'AlmaLinux' | 'Rocky Linux' | 'Alpine';
  /** `12`, `22.04`, `9`, `3.19`; '' for an entry that names no release (every release). */
  release: string;
  /** Ubuntu Pro (ESM) entries: fixes a node gets only with a Pro subscription. */
  pro: boolean;
  family: Family;
  /** The index key: name, Pro marker and release (`Ubuntu:Pro:18.04`, `Debian:*`). */
  key: string;
}

const FAMILY: Record<Ecosystem['name'], Family> = { Debian: 'deb', Ubuntu: 'deb', AlmaLinux: 'rpm', 'Rocky Linux': 'rpm', Alpine: 'apk' };

const keyOf = (name: string, pro: boolean, release: string) => `${name}${pro ? ':Pro' : ''}:${release || '*'}`;

/**
 * An OSV ecosystem string, or null for one Capstan does not match (npm, PyPI, another
 * distribution): such entries are kept out of the index, never an error.
 */
export function parseEcosystem(s: string): Ecosystem | null {
  const parts = s.split(':');
  const name = parts[0] as Ecosystem['name'];
  if (!Object.hasOwn(FAMILY, name)) return null;
  let rest = parts.slice(1);
  let pro = false;
  if (name === 'Ubuntu') {
    if (rest[0] === 'Pro') {
      pro = true;
      rest = rest.slice(1);
    }
    // `:LTS` (and any later qualifier) says what the release is, not which one.
    rest = rest.slice(0, 1);
  }
  if (rest.length > 1) return null;
  let release = rest[0] ?? '';
  if (name === 'Alpine') {
    if (release && !release.startsWith('v')) return null;
    release = release.slice(1);
  }
  if (release && !/^[0-9A-Za-z.]{1,32}$/.test(release)) return null;
  return { name, release, pro, family: FAMILY[name], key: keyOf(name, pro, release) };
}

/** os-release IDs (and RUDDER's OCS names, lower-cased) of the distributions above. */
const OS_NAMES: Record<string, Ecosystem['name']> = {
  debian: 'Debian', ubuntu: 'Ubuntu', almalinux: 'AlmaLinux', alma: 'AlmaLinux', rocky: 'Rocky Linux', 'rocky linux': 'Rocky Linux', alpine: 'Alpine',
};

/**
 * The ecosystem a node's packages belong to, from its inventory's os.name and os.version:
 * Debian, AlmaLinux and Rocky by major release (`12.5` → `12`), Ubuntu by `YY.MM`, Alpine by
 * branch (`3.19.1` → `3.19`). Null when the distribution is not one of these or the version
 * does not say the release.
 */
export function nodeEcosystem(osName: string, osVersion: string, opts: { ubuntuPro?: boolean } = {}): Ecosystem | null {
  const name = OS_NAMES[osName.trim().toLowerCase()];
  if (!name) return null;
  const v = osVersion.trim();
  const m = name === 'Ubuntu' ? /^(\d{2}\.\d{2})(\b|$)/.exec(v) : name === 'Alpine' ? /^v?(\d+\.\d+)(\.|$)/.exec(v) : /^(\d+)(\.|$)/.exec(v);
  if (!m) return null;
  const pro = name === 'Ubuntu' && opts.ubuntuPro === true;
  return { name, release: m[1]!, pro, family: FAMILY[name], key: keyOf(name, pro, m[1]!) };
}

/** The keys a node's packages are looked up under: its release's, and entries for every release. */
export function lookupKeys(e: Ecosystem): string[] {
  const keys = [e.key, keyOf(e.name, e.pro, '')];
  // A Pro node gets the standard entries of its release too: Pro adds fixes, it removes none.
  if (e.pro) keys.push(keyOf(e.name, false, e.release), keyOf(e.name, false, ''));
  return keys;
}

/** The version order of a family; null for Alpine (see above). */
export function versionOrder(f: Family): ((a: string, b: string) => number) | null {
  return f === 'deb' ? compareVersions : f === 'rpm' ? compareRpmVersions : null;
}
