/**
 * What throwaway roots (root.ts) are made of beyond their mounts: the systemd units a booted root
 * starts with, the RPM family's preparation, and local package repositories built inside a root
 * (tiny packages, two versions each, so package tests need no network and take seconds).
 */
import type { Root } from './root.js';

const q = (s: string) => `'${s.replace(/'/g, `'\\''`)}'`;

/**
 * Shell lines (run before systemd starts) writing its default unit into the overlay: a target with
 * no dependencies, so systemd starts nothing of the host's own services (their databases, brokers,
 * gettys) and none of sysinit; dbus (for hostnamectl) loses its default dependencies too.
 */
export function systemdUnits(merged: string): string[] {
  const dir = `${merged}/etc/systemd/system`;
  const target = '[Unit]\nDescription=Throwaway root\nDefaultDependencies=no\nWants=dbus.socket\n';
  const dropIn = '[Unit]\nDefaultDependencies=no\n';
  return [
    `mkdir -p ${q(dir)}`,
    `printf %s ${q(target)} > ${q(`${dir}/capstan-root.target`)}`,
    ...['dbus.socket', 'dbus.service', 'systemd-hostnamed.service'].flatMap((u) => [
      `mkdir -p ${q(`${dir}/${u}.d`)}`, `printf %s ${q(dropIn)} > ${q(`${dir}/${u}.d/capstan-root.conf`)}`,
    ]),
  ];
}

/** A noarch RPM spec: a file holding its version under /usr/share/<name>, or (no files) a release package. */
function rpmSpec(name: string, version: string, release: string, extra: string): string {
  return [
    `Name: ${name}`, `Version: ${version}`, `Release: ${release}`, 'Summary: a package the tests install', 'License: MIT',
    'BuildArch: noarch', 'AutoReqProv: no', extra, '%description', 'Made by the Capstan tests.',
  ].join('\n');
}

/**
 * rpmbuild with nothing to post-process (no brp-* scripts, no build-id links, no compression):
 * the packages hold one text file each, and the scripts cost most of a build's time.
 */
const rpmbuild = (specs: string) =>
  `rpmbuild -bb --quiet --define '_topdir /srv/rpmbuild' --define '_tmppath /tmp' --define '__os_install_post %{nil}' --define '_build_id_links none' --define '_binary_payload w0.ufdio' ${specs}`;

/**
 * An RPM-family root: dpkg's and apt's front ends gone (the agent looks for dpkg-query first), an
 * rpm database where RPM distributions keep it (Debian's rpm defaults to ~/.rpmdb), and a release
 * package providing system-release(releasever), from which dnf takes $releasever.
 */
export function familyScript(family: 'rpm'): string {
  if (family !== 'rpm') return 'true';
  const release = `${rpmSpec('capstan-root-release', '1', '1', 'Provides: system-release\nProvides: system-release(releasever) = 1')}\n%files\n`;
  return [
    'rm -f /usr/bin/dpkg /usr/bin/dpkg-query /usr/bin/dpkg-deb /usr/bin/apt /usr/bin/apt-get /usr/bin/apt-cache',
    'mkdir -p /etc/rpm /srv/rpmbuild /etc/yum.repos.d',
    "echo '%_dbpath /var/lib/rpm' > /etc/rpm/macros.capstan-root",
    'rpm --initdb',
    `printf '%s\\n' ${q(release)} > /srv/rpmbuild/release.spec`,
    rpmbuild('/srv/rpmbuild/release.spec'),
    'rpm -i /srv/rpmbuild/RPMS/noarch/capstan-root-release-1-1.noarch.rpm',
    'rm -rf /srv/rpmbuild',
  ].join('\n');
}

/**
 * A local apt repository of `name` at each of `versions` (Debian versions such as 1.0-1), each
 * holding /usr/share/<name>/VERSION and a conffile /etc/<name>.conf; the root's apt sources are
 * replaced by it alone (trusted, a flat file: repository), and its lists fetched.
 */
export async function debRepo(root: Root, name: string, versions: string[]): Promise<void> {
  // The root's dpkg database is the host's as it was when the root was made: one caught in the
  // middle of an install (another apt-get on this machine) fails every package step after.
  const audit = await root.exec('dpkg', ['--audit']);
  if (audit.stdout.trim() !== '') throw new Error(`the host's dpkg database was mid-change when this root was made (is apt-get running on the host?):\n${audit.stdout}`);
  const script = [
    'export DEBIAN_FRONTEND=noninteractive',
    'mkdir -p /srv/debrepo /srv/debbuild',
    ...versions.flatMap((v) => {
      const d = `/srv/debbuild/${name}_${v}`;
      const control = `Package: ${name}\nVersion: ${v}\nArchitecture: all\nMaintainer: Capstan tests <tests@capstan.invalid>\nDescription: a package the tests install\n`;
      return [
        `mkdir -p ${d}/DEBIAN ${d}/usr/share/${name} ${d}/etc`,
        `echo ${v} > ${d}/usr/share/${name}/VERSION`, `echo 'setting=${v}' > ${d}/etc/${name}.conf`,
        `echo /etc/${name}.conf > ${d}/DEBIAN/conffiles`, `printf %s ${q(control)} > ${d}/DEBIAN/control`,
        `dpkg-deb -Zgzip -b ${d} /srv/debrepo/${name}_${v}_all.deb >/dev/null`,
      ];
    }),
    // The index apt reads: each package's control fields, then where it is, its size and hash.
    'cd /srv/debrepo && for f in *.deb; do dpkg-deb -f "$f"; echo "Filename: ./$f"; echo "Size: $(stat -c %s "$f")"; echo "SHA256: $(sha256sum "$f" | cut -d" " -f1)"; echo; done > Packages',
    'rm -rf /etc/apt/sources.list /etc/apt/sources.list.d && mkdir /etc/apt/sources.list.d',
    'echo "deb [trusted=yes] file:/srv/debrepo ./" > /etc/apt/sources.list.d/capstan-test.list',
    'apt-get update -qq',
  ].join('\n');
  const r = await root.sh(script);
  if (r.code !== 0) throw new Error(`deb repository: ${r.stderr}`);
}

/**
 * A local dnf repository of `name` at each of `versions` (version-release such as 1.0-1), each
 * holding /usr/share/<name>/VERSION; the root's only repository.
 */
export async function rpmRepo(root: Root, name: string, versions: string[]): Promise<void> {
  const script = [
    'mkdir -p /srv/rpmbuild',
    ...versions.map((vr) => {
      const [v, rel] = vr.split('-') as [string, string];
      const files = `%install\nmkdir -p %{buildroot}/usr/share/${name}\necho ${vr} > %{buildroot}/usr/share/${name}/VERSION\n%files\n/usr/share/${name}/VERSION\n`;
      return `printf '%s\\n' ${q(`${rpmSpec(name, v, rel, '')}\n${files}`)} > /srv/rpmbuild/${name}-${vr}.spec`;
    }),
    rpmbuild(versions.map((vr) => `/srv/rpmbuild/${name}-${vr}.spec`).join(' ')),
    'mkdir -p /srv/rpmrepo && cp /srv/rpmbuild/RPMS/noarch/*.rpm /srv/rpmrepo/ && createrepo_c -q /srv/rpmrepo',
    'rm -f /etc/yum.repos.d/*',
    "printf '[capstan-test]\\nname=Capstan tests\\nbaseurl=file:///srv/rpmrepo\\ngpgcheck=0\\nenabled=1\\nmetadata_expire=0\\n' > /etc/yum.repos.d/capstan-test.repo",
  ].join('\n');
  const r = await root.sh(script);
  if (r.code !== 0) throw new Error(`rpm repository: ${r.stderr}`);
}
