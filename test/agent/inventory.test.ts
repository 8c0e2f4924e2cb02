/** The inventory describes this very machine: compare it with what the host's own tools say. */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import t from 'tap';
import { collectInventory, parseApkLine, parseDefaultRoute, parseDpkgLine, parseOsRelease, parseRpmLine } from '@capstan/agent/inventory/collect';

t.test('os-release lines are read with their quoting', async (t) => {
  t.same(parseOsRelease('ID=debian\nVERSION_ID="12"\nPRETTY_NAME="Debian GNU/Linux 12 (bookworm)"\n# comment\nBAD LINE\n'), {
    ID: 'debian', VERSION_ID: '12', PRETTY_NAME: 'Debian GNU/Linux 12 (bookworm)',
  });
});

t.test('the default route is read from /proc/net/route', async (t) => {
  const text = 'Iface\tDestination\tGateway\tFlags\nlo\t0000007F\t00000000\t0001\neth0\t00000000\t0101A8C0\t0003\n';
  t.same(parseDefaultRoute(text), { interface: 'eth0', gateway: '192.168.1.1' });
  t.equal(parseDefaultRoute('Iface\tDestination\n'), null);
});

t.test('inventory facts match the host', async (t) => {
  const inv = (await collectInventory({ nodeId: 'n1', certPem: 'CERT', policyServer: 'relay.example' })) as Record<string, any>;
  t.equal(inv.node_id, 'n1');
  t.equal(inv.certificate, 'CERT');
  t.equal(inv.policy_server, 'relay.example');
  t.equal(inv.hostname, execFileSync('hostname', { encoding: 'utf8' }).trim());
  t.equal(inv.os.kernel, execFileSync('uname', ['-r'], { encoding: 'utf8' }).trim());
  t.equal(inv.os.arch, execFileSync('uname', ['-m'], { encoding: 'utf8' }).trim());
  t.equal(inv.cpus.count, os.cpus().length);
  t.ok(inv.memory.total > 0, 'memory total read from /proc/meminfo');
  t.ok(inv.disks.some((d: { mount: string }) => d.mount === '/'), 'the root file system is listed');
  t.ok(inv.interfaces.some((i: { name: string }) => i.name === 'lo'), 'loopback interface is listed');
  let dpkg: string | null = null;
  try {
    dpkg = execFileSync('dpkg-query', ['-W', '-f', '${db:Status-Status}\n'], { encoding: 'utf8' });
  } catch {
    /* not a dpkg system */
  }
  if (dpkg === null) t.comment('no dpkg-query here: package count not compared');
  else t.equal(inv.packages.length, dpkg.split('\n').filter((s) => s === 'installed').length, 'every installed package is listed');
  t.notOk(inv.errors, `no collector failed: ${JSON.stringify(inv.errors)}`);
});

t.test('packages carry their source package and version, and RPM epochs, for vulnerability matching', async (t) => {
  // Lines as dpkg-query and rpm print them with the agent's formats.
  t.same(parseDpkgLine('libssl3\t3.0.11-1~deb12u2\tinstalled\topenssl\t3.0.11-1~deb12u2'), { name: 'libssl3', version: '3.0.11-1~deb12u2', source: 'openssl' });
  t.same(parseDpkgLine('bsdutils\t1:2.38.1-5+deb12u3\tinstalled\tutil-linux\t2.38.1-5+deb12u3'),
    { name: 'bsdutils', version: '1:2.38.1-5+deb12u3', source: 'util-linux', source_version: '2.38.1-5+deb12u3' });
  t.same(parseDpkgLine('bash\t5.2.15-2+b8\tinstalled\tbash\t5.2.15-2'), { name: 'bash', version: '5.2.15-2+b8', source_version: '5.2.15-2' }, 'a binNMU');
  t.same(parseDpkgLine('curl\t7.88.1-10\tinstalled\tcurl\t7.88.1-10'), { name: 'curl', version: '7.88.1-10' }, 'named and versioned as its source: nothing more');
  t.equal(parseDpkgLine('old\t1.0\tconfig-files\told\t1.0'), null, 'removed, its configuration kept: not installed');
  t.same(parseRpmLine('openssl-libs\t3.0.7-27.el9\t1\topenssl-3.0.7-27.el9.src.rpm'), { name: 'openssl-libs', version: '3.0.7-27.el9', epoch: '1', source: 'openssl' });
  t.same(parseRpmLine('bash\t5.1.8-9.el9\t0\tbash-5.1.8-9.el9.src.rpm'), { name: 'bash', version: '5.1.8-9.el9', epoch: '0' });
  t.same(parseRpmLine('gpg-pubkey\tfd431d51-4ae0493b\t0\t(none)'), { name: 'gpg-pubkey', version: 'fd431d51-4ae0493b', epoch: '0' });
  t.same(parseApkLine('musl-1.2.4-r2'), { name: 'musl', version: '1.2.4-r2' });
  let lines: string[] = [];
  try {
    lines = execFileSync('dpkg-query', ['-W', '-f', '${Package}\t${Version}\t${db:Status-Status}\t${source:Package}\t${source:Version}\n'], { encoding: 'utf8' }).split('\n');
  } catch {
    /* not a dpkg system */
  }
  const parsed = lines.map(parseDpkgLine).filter((p) => p !== null);
  if (!parsed.length) t.comment('no dpkg-query here: source fields not read from the host');
  else t.ok(parsed.every((p) => p!.source === undefined || p!.source !== p!.name), `${parsed.filter((p) => p!.source).length} of ${parsed.length} installed packages name their source`);
});
