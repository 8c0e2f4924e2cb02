/**
 * RUDDER agents' OCS inventories at the server, without the programs: the XML built here mapped
 * onto Capstan's inventory document, its `.sign` (made with the OpenSSL command line as RUDDER's
 * signing script does) checked, hostile XML refused with codes, and the pairing of the two
 * uploads in a spool directory.
 */
import { mkdtemp, rm, utimes, writeFile } from 'node:fs/promises';
import { tmpdir } from 'node:os';
import { join } from 'node:path';
import t from 'tap';
import { ocsPairNames, silentLogger } from '@capstan/shared';
import { candidateName, ocsPairReady, Spool, SpoolProcessor, watchCandidates, withCandidates } from '@capstan/toolkit';
import { programDir } from '../helpers/programs.js';
import { DEFAULT_OCS_LIMITS, readOcsInventory } from '@capstan/server/ingest/ocs';
import { certificateKey, parseSignFile, sameKey, verifyOcsSignature } from '@capstan/server/ingest/ocs-signature';
import { ocsXml, rudderNode, signOcs } from '../helpers/ocs.js';
import { thrownCode } from '../helpers/thrown.js';

const ID = '0f3e8c7a-5b1d-4c2e-9a6f-2d4b8e1c7a90';
const node = rudderNode(ID);
const other = rudderNode(ID);

t.test('an OCS inventory maps onto Capstan\'s inventory fields', async (t) => {
  const { doc, publicKey } = readOcsInventory(ocsXml(node, { policyServer: 'relay-1' }));
  t.match(doc, {
    node_id: ID,
    hostname: 'web1',
    fqdn: 'web1.example.test',
    policy_server: 'relay-1',
    agent_version: '8.3.4-debian12',
    os: { name: 'debian', version: '12', kernel: '6.1.0-13-amd64', arch: 'x86_64', pretty_name: 'Debian GNU/Linux 12 (bookworm)' },
    cpus: { count: 4, model: 'AMD EPYC 7B13' },
    memory: { total: 3942 * 1024 * 1024, swap_total: 1023 * 1024 * 1024 },
    inventory_format: 'ocs',
    rudder: { agent_name: 'cfengine-community', policy_server_hostname: 'server.example.test', capabilities: ['cfengine', 'http_reporting'], server_roles: [], vm_system: 'KVM' },
  });
  t.equal(doc.certificate, node.certPem.replace(/\r/g, ''), 'the certificate, as a PEM block');
  t.same(doc.disks, [
    { device: '/dev/sda1', mount: '/', fstype: 'ext4', size: 19985 * 1024 * 1024, free: 17527 * 1024 * 1024 },
    { device: '/dev/sdb1', mount: '/srv', fstype: 'xfs', size: 2000 * 1024 * 1024, free: 1000 * 1024 * 1024 },
  ]);
  t.same(doc.interfaces, [
    { name: 'lo', mac: '00:00:00:00:00:00', addresses: [{ family: 'IPv4', address: '127.0.0.1', cidr: '127.0.0.1/8' }] },
    { name: 'eth0', mac: '52:54:00:12:34:56', addresses: [
      { family: 'IPv4', address: '192.0.2.10', cidr: '192.0.2.10/24' },
      { family: 'IPv6', address: '2001:db8::10', cidr: '2001:db8::10/64' },
    ] },
  ]);
  t.same(doc.packages, [
    { name: 'openssl', version: '3.0.11-1~deb12u2', arch: 'amd64' },
    { name: 'rudder-agent', version: '8.3.4-debian12', arch: 'amd64' },
    { name: 'libc6', version: '2.36-9+deb12u4', arch: 'amd64' },
  ]);
  t.ok(publicKey && sameKey(publicKey, certificateKey(doc.certificate)), 'CFENGINE_KEY is the certificate\'s key');
  t.notOk(sameKey(other.publicPem, certificateKey(doc.certificate)), 'another key is told apart');
});

t.test('one package or one CPU is still a list; escaped text is read back', async (t) => {
  const { doc } = readOcsInventory(ocsXml(node, { packages: [{ name: 'a&b', version: '1<2' }] }));
  t.same(doc.packages, [{ name: 'a&b', version: '1<2' }]);
});

t.test('missing fields are refused with ERR_OCS_INVALID', async (t) => {
  for (const omit of ['UUID', 'AGENT_CERT', 'POLICY_SERVER_UUID', 'OPERATINGSYSTEM']) {
    const xml = omit === 'OPERATINGSYSTEM'
      // No OS name anywhere: OPERATINGSYSTEM gone and HARDWARE/OSNAME removed.
      ? Buffer.from(ocsXml(node, { omit: [omit] }).toString().replace(/<OSNAME>.*?<\/OSNAME>/, ''))
      : ocsXml(node, { omit: [omit] });
    t.equal(thrownCode(() => readOcsInventory(xml)), 'ERR_OCS_INVALID', omit);
  }
  t.equal(thrownCode(() => readOcsInventory(Buffer.from('<REQUEST><CONTENT></CONTENT></REQUEST>'))), 'ERR_OCS_INVALID', 'no RUDDER section');
  t.equal(thrownCode(() => readOcsInventory(Buffer.from('<NOTREQUEST/>'))), 'ERR_OCS_INVALID', 'no REQUEST');
});

t.test('malformed XML is refused with ERR_OCS_INVALID', async (t) => {
  for (const xml of ['', 'not xml at all', '<REQUEST><CONTENT></REQUEST>', '<REQUEST><A></B></REQUEST>', '<REQUEST>']) {
    t.equal(thrownCode(() => readOcsInventory(Buffer.from(xml))), 'ERR_OCS_INVALID', JSON.stringify(xml));
  }
  const cut = ocsXml(node);
  t.equal(thrownCode(() => readOcsInventory(cut.subarray(0, cut.length / 2))), 'ERR_OCS_INVALID', 'a truncated inventory');
});

t.test('a DOCTYPE (XXE, entity expansion) is refused before parsing', async (t) => {
  const xxe = `<?xml version="1.0"?><!DOCTYPE r [<!ENTITY x SYSTEM "file:///etc/passwd">]><REQUEST><CONTENT><RUDDER><UUID>&x;</UUID></RUDDER></CONTENT></REQUEST>`;
  t.equal(thrownCode(() => readOcsInventory(Buffer.from(xxe))), 'ERR_OCS_DOCTYPE', 'external entity');
  const lol = `<!DOCTYPE l [<!ENTITY a "aaaaaaaaaa"><!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;">]><REQUEST>&b;</REQUEST>`;
  t.equal(thrownCode(() => readOcsInventory(Buffer.from(lol))), 'ERR_OCS_DOCTYPE', 'billion laughs');
  // Without a DOCTYPE an undeclared entity is left as text, never looked up.
  const { doc } = readOcsInventory(Buffer.from(ocsXml(node).toString().replace('<NAME>web1</NAME>', '<NAME>&x;web1</NAME>')));
  t.equal(doc.hostname, '&x;web1');
});

t.test('depth, size and element count are bounded and configurable', async (t) => {
  const deep = (n: number) => Buffer.from(`<REQUEST>${'<A>'.repeat(n)}${'</A>'.repeat(n)}</REQUEST>`);
  t.equal(thrownCode(() => readOcsInventory(deep(100_000))), 'ERR_OCS_TOO_DEEP', 'a depth bomb');
  t.equal(thrownCode(() => readOcsInventory(deep(20), { ...DEFAULT_OCS_LIMITS, maxDepth: 16 })), 'ERR_OCS_TOO_DEEP');
  // A real inventory (5 deep) passes the default; a small limit refuses it.
  t.equal(thrownCode(() => readOcsInventory(ocsXml(node))), undefined);
  t.equal(thrownCode(() => readOcsInventory(ocsXml(node), { ...DEFAULT_OCS_LIMITS, maxDepth: 3 })), 'ERR_OCS_TOO_DEEP');
  t.equal(thrownCode(() => readOcsInventory(ocsXml(node), { ...DEFAULT_OCS_LIMITS, maxBytes: 1000 })), 'ERR_OCS_TOO_LARGE', 'size');
  t.equal(thrownCode(() => readOcsInventory(ocsXml(node), { ...DEFAULT_OCS_LIMITS, maxElements: 40 })), 'ERR_OCS_TOO_LARGE', 'elements');
  // ocs_max_depth = 16 admitted 17 levels (the parser's own bound is one off): the limit is the
  // number of elements open at once, the REQUEST and a self-closing innermost one included.
  for (const limit of [1, 2, 5, 16, 40]) {
    const levels = (n: number, last: string) => Buffer.from(`${'<A x="a>b">'.repeat(n - 1)}${last}${'<!-- <A> --></A>'.repeat(n - 1)}`);
    const lim = { ...DEFAULT_OCS_LIMITS, maxDepth: limit };
    t.not(thrownCode(() => readOcsInventory(levels(limit, '<B>t</B>'), lim)), 'ERR_OCS_TOO_DEEP', `${limit} levels pass a limit of ${limit}`);
    t.not(thrownCode(() => readOcsInventory(levels(limit, '<B/>'), lim)), 'ERR_OCS_TOO_DEEP', `${limit} levels (self-closing) pass`);
    t.equal(thrownCode(() => readOcsInventory(levels(limit + 1, '<B>t</B>'), lim)), 'ERR_OCS_TOO_DEEP', `${limit + 1} levels are refused`);
    t.equal(thrownCode(() => readOcsInventory(levels(limit + 1, '<B/>'), lim)), 'ERR_OCS_TOO_DEEP', `${limit + 1} levels (self-closing) are refused`);
  }
  const wide = Buffer.from(`<REQUEST>${'<A/>'.repeat(2000)}</REQUEST>`);
  t.equal(thrownCode(() => readOcsInventory(wide, { ...DEFAULT_OCS_LIMITS, maxElements: 1000 })), 'ERR_OCS_TOO_LARGE');
});

t.test('the .sign verifies as RUDDER checks it: SHA-512 RSA over the uncompressed XML', async (t) => {
  const xml = ocsXml(node);
  const sign = signOcs(xml, node, { hashValue: true });
  t.equal(thrownCode(() => verifyOcsSignature(xml, parseSignFile(sign), node.certPem)), undefined, 'good signature');
  t.equal(thrownCode(() => verifyOcsSignature(xml, parseSignFile(signOcs(xml, node)), node.certPem)), undefined, 'without hash_value');
  t.equal(thrownCode(() => verifyOcsSignature(xml, parseSignFile(sign), other.certPem)), 'ERR_OCS_SIGNATURE', 'another key');
  const altered = Buffer.from(xml.toString().replace('web1', 'web2'));
  t.equal(thrownCode(() => verifyOcsSignature(altered, parseSignFile(signOcs(xml, node)), node.certPem)), 'ERR_OCS_SIGNATURE', 'altered XML');
  const err = (() => {
    try {
      verifyOcsSignature(altered, parseSignFile(sign), node.certPem);
    } catch (e) {
      return e as Error & { code: string };
    }
  })();
  t.match(err, { code: 'ERR_OCS_SIGNATURE', message: /another file/ }, 'a .sign made for another file says so');
});

t.test('malformed .sign files are refused with ERR_OCS_SIGNATURE', async (t) => {
  const good = signOcs(ocsXml(node), node).toString();
  const cases = [
    '', 'garbage', good.replace('rudder-signature-v1', 'rudder-signature-v2'), good.replace('algorithm=sha512', 'algorithm=sha1'),
    good.replace(/digest=.*/, 'digest=zz'), good.replace(/digest=.*/, 'digest='), good.replace(/digest=.*\n/, ''),
    `${good}hash_value=abc\n`, 'x'.repeat(70_000),
  ];
  for (const c of cases) t.equal(thrownCode(() => parseSignFile(Buffer.from(c))), 'ERR_OCS_SIGNATURE', JSON.stringify(c.slice(0, 40)));
});

t.test('in a directory a processor watches, candidates are found without listing it', async (t) => {
  const spool = new Spool({ root: programDir(t), maxFileBytes: 1 << 20 });
  await spool.init();
  const dir = spool.incomingDir('inventories');
  const base = `${ID}_2026-11-25T10:00:00+00:00.ocs`;
  const offered: string[] = [];
  let offeredNow: (() => void) | null = null;
  const p = new SpoolProcessor({
    kind: 'inventories', spool, log: silentLogger, catchupIntervalMs: 3_600_000,
    handle: async (_path, name) => {
      offered.push(name);
      offeredNow?.();
      throw Object.assign(new Error('kept for the test'), { code: 'ENOENT' });
    },
  });
  const offeredUntil = (name: string) => new Promise<void>((res, rej) => {
    const bound = setTimeout(() => rej(new Error(`${name} never offered`)), 10_000);
    const check = () => { if (offered.includes(name)) { clearTimeout(bound); offeredNow = null; res(); } };
    offeredNow = check;
    check();
  });
  await writeFile(join(dir, `${base}.gz`), 'inventory');
  await p.start();
  t.teardown(() => p.stop());
  await offeredUntil(`${base}.gz`);
  t.same(await withCandidates(dir, `${base}.gz`), [`${base}.gz`], 'the upload alone: one stat');

  // A different half under a taken name is placed beside it as a candidate, and found at once.
  const cand = await candidateName('inventories', dir, `${base}.gz`, 'ab'.repeat(32));
  t.equal(cand, join(dir, `${base}.gz~abababab`));
  await writeFile(cand!, 'junk');
  t.same(await withCandidates(dir, `${base}.gz`), [`${base}.gz`, `${base}.gz~abababab`]);

  // Written by another process: its processor is offered it, and from then on it is found.
  await writeFile(join(dir, `${base}.sign~01234567`), 'sign from elsewhere');
  await offeredUntil(`${base}.sign~01234567`);
  await writeFile(join(dir, `${base}.sign`), 'sign');
  t.same(await ocsPairReady(dir, `${base}.gz`, 60_000), { data: `${base}.gz`, signs: [`${base}.sign`, `${base}.sign~01234567`], otherData: true });

  // The index answers, not a listing: a candidate nobody told it of (the processor stopped, the
  // index still held) is not seen until it is.
  const held = watchCandidates(dir);
  t.teardown(() => held.release());
  await p.stop();
  await writeFile(join(dir, `${base}.sign~89abcdef`), 'unannounced');
  t.same(await withCandidates(dir, `${base}.sign`), [`${base}.sign`, `${base}.sign~01234567`], 'not listed');
  held.note(`${base}.sign~89abcdef`);
  t.same(await withCandidates(dir, `${base}.sign`), [`${base}.sign`, `${base}.sign~01234567`, `${base}.sign~89abcdef`]);

  // A candidate taken away is dropped; past MAX_OCS_CANDIDATES a name takes no more.
  await rm(join(dir, `${base}.sign~01234567`));
  t.same(await withCandidates(dir, `${base}.sign`), [`${base}.sign`, `${base}.sign~89abcdef`]);
  for (const h of ['00000001', '00000002', '00000003']) {
    const c = await candidateName('inventories', dir, `${base}.gz`, h.repeat(8));
    t.ok(c, `candidate ${h}`);
    await writeFile(c!, h);
  }
  t.equal(await candidateName('inventories', dir, `${base}.gz`, 'cd'.repeat(32)), undefined, 'a fifth candidate is a conflict');
  t.equal(await candidateName('inventories', dir, `${base}.gz`, '00000002'.repeat(8)), join(dir, `${base}.gz~00000002`), 'the same bytes again: the same candidate');

  // Once nobody holds the index, the directory is listed again.
  held.release();
  t.same(await withCandidates(dir, `${base}.gz`), [`${base}.gz`, `${base}.gz~00000001`, `${base}.gz~00000002`, `${base}.gz~00000003`, `${base}.gz~abababab`]);
});

t.test('the two uploads are paired: the inventory takes its .sign, a lone half waits then fails', async (t) => {
  const dir = await mkdtemp(join(tmpdir(), 'capstan-ocs-pair-'));
  t.teardown(() => import('node:fs/promises').then((fs) => fs.rm(dir, { recursive: true, force: true })));
  const base = `${ID}_2026-11-25T10:00:00+00:00.ocs`;
  t.same(ocsPairNames(`${base}.gz`), { sign: `${base}.sign`, data: [`${base}.gz`, base], isSign: false });
  t.equal(ocsPairNames(`${ID}_2026-11-25T10:00:00+00:00.json`), null);
  t.equal(await ocsPairReady(dir, `${ID}_2026-11-25T10:00:00+00:00.json.zst`, 1000), null, 'not an OCS name');

  await writeFile(join(dir, `${base}.gz`), 'x');
  const codeAsync = async (p: Promise<unknown>) => p.then(() => undefined, (e: { code?: string; details?: { waiting?: boolean } }) => `${e.code}${e.details?.waiting ? ' waiting' : ''}`);
  t.equal(await codeAsync(ocsPairReady(dir, `${base}.gz`, 60_000)), 'ERR_OCS_UNPAIRED waiting', 'the inventory waits for its .sign');
  const old = new Date(Date.now() - 120_000);
  await utimes(join(dir, `${base}.gz`), old, old);
  t.equal(await codeAsync(ocsPairReady(dir, `${base}.gz`, 60_000)), 'ERR_OCS_UNPAIRED', 'past the wait: refused for good');

  await writeFile(join(dir, `${base}.sign`), 'y');
  const prompted: string[] = [];
  t.equal(await codeAsync(ocsPairReady(dir, `${base}.sign`, 60_000, (n) => prompted.push(n))), 'ERR_OCS_UNPAIRED waiting', 'the .sign goes with its inventory');
  t.same(prompted, [`${base}.gz`], 'and hurries the inventory\'s handler');
  t.same(await ocsPairReady(dir, `${base}.gz`, 60_000), { data: `${base}.gz`, signs: [`${base}.sign`], otherData: false });

  const lone = `${ID}_2026-11-25T11:00:00+00:00.ocs.sign`;
  await writeFile(join(dir, lone), 'z');
  t.equal(await codeAsync(ocsPairReady(dir, lone, 60_000)), 'ERR_OCS_UNPAIRED waiting');
  await utimes(join(dir, lone), old, old);
  t.equal(await codeAsync(ocsPairReady(dir, lone, 60_000)), 'ERR_OCS_UNPAIRED', 'a lone .sign is refused past the wait');
  t.equal(await codeAsync(ocsPairReady(dir, `${ID}_2026-11-25T12:00:00+00:00.ocs.gz`, 60_000)), 'ENOENT', 'a half already taken: nothing to do');
});
