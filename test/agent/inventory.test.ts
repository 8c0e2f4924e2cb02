/** The inventory describes this very machine: compare it with what the host's own tools say. */
import { execFileSync } from 'node:child_process';
import os from 'node:os';
import t from 'tap';
import { collectInventory, parseDefaultRoute, parseOsRelease } from '@capstan/agent/inventory/collect';

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
