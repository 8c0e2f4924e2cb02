import t from 'tap';
import { fixturesAbsent, requiredInCi } from '../helpers/programs.js';
import { spawnSync } from 'node:child_process';
import { X509Certificate, createPrivateKey } from 'node:crypto';
import fs from 'node:fs';
import path from 'node:path';
import { certificateFingerprint, certificateNodeId, createNodeIdentity, parseCertificates } from '@capstan/shared';

const FIXTURES = path.resolve(import.meta.dirname, '../../../shared/conformance/rudder');
const KEYS = path.join(FIXTURES, 'files/keys');
const E745 = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const R37817 = '37817c4d-fbf7-4850-a985-50021f4e8f41';
const hasFixtures = fs.existsSync(KEYS);
const hasOpenssl = spawnSync('openssl', ['version']).status === 0;
const noFixtures = fixturesAbsent(KEYS);
const noOpenssl = requiredInCi(hasOpenssl ? false : 'openssl CLI not available', 'install Debian\'s openssl');

function openssl(args: string[], input?: string): { status: number | null; stdout: string; stderr: string } {
  const r = spawnSync('openssl', args, { input, encoding: 'utf8' });
  return { status: r.status, stdout: r.stdout, stderr: r.stderr };
}

// One identity for the read-only checks: RSA key generation is the slow part.
const id = createNodeIdentity('node-42.example');

t.test('the subject UID round-trips through certificateNodeId', async (t) => {
  t.equal(certificateNodeId(id.certPem), 'node-42.example');
  const uuid = createNodeIdentity('c0ffee00-1234-4bcd-8def-0123456789ab', { bits: 1024 });
  t.equal(certificateNodeId(uuid.certPem), 'c0ffee00-1234-4bcd-8def-0123456789ab');
  const unicode = createNodeIdentity('nœud-été', { bits: 1024 });
  t.equal(certificateNodeId(unicode.certPem), 'nœud-été');
});

t.test('the key is 2048-bit RSA by default, matches the certificate, and bits is honoured', async (t) => {
  const key = createPrivateKey(id.keyPem);
  t.equal(key.asymmetricKeyType, 'rsa');
  t.equal(key.asymmetricKeyDetails?.modulusLength, 2048);
  t.match(id.keyPem, /^-----BEGIN PRIVATE KEY-----\n/);
  const x509 = new X509Certificate(id.certPem);
  t.ok(x509.checkPrivateKey(key), 'certificate public key matches the private key');
  const small = createNodeIdentity('n', { bits: 1024 });
  t.equal(createPrivateKey(small.keyPem).asymmetricKeyDetails?.modulusLength, 1024);
});

t.test('the certificate is self-signed and valid from now for the requested days', async (t) => {
  const now = new Date('2030-01-02T03:04:05.678Z');
  const c = createNodeIdentity('n', { bits: 1024, days: 10, now });
  const x509 = new X509Certificate(c.certPem);
  t.ok(x509.verify(x509.publicKey), 'signature verifies with its own key');
  t.equal(x509.issuer, x509.subject, 'issuer is the subject');
  t.equal(new Date(x509.validFrom).toISOString(), '2030-01-02T03:04:05.000Z');
  t.equal(new Date(x509.validTo).toISOString(), '2030-01-12T03:04:05.000Z');
  const d = createNodeIdentity('n', { bits: 1024 });
  const days = (Date.parse(new X509Certificate(d.certPem).validTo) - Date.now()) / 86_400_000;
  t.ok(days > 3649 && days <= 3650, `default validity is 3650 days (got ${days.toFixed(1)})`);
});

t.test('two identities get different random positive serial numbers', async (t) => {
  const a = new X509Certificate(createNodeIdentity('n', { bits: 1024 }).certPem).serialNumber;
  const b = new X509Certificate(createNodeIdentity('n', { bits: 1024 }).certPem).serialNumber;
  t.not(a, b);
  t.equal(a.length, 32, '128-bit serial');
  t.ok(parseInt(a.slice(0, 2), 16) < 0x80, 'positive INTEGER');
});

t.test('openssl shows UID in the subject, sha256WithRSA and the key usages', { skip: noOpenssl }, async (t) => {
  const subject = openssl(['x509', '-noout', '-subject'], id.certPem);
  t.equal(subject.status, 0, subject.stderr);
  t.match(subject.stdout, /^subject=\s*UID\s*=\s*node-42\.example\s*$/m);
  const text = openssl(['x509', '-noout', '-text'], id.certPem).stdout;
  t.match(text, /Signature Algorithm: sha256WithRSAEncryption/);
  t.match(text, /X509v3 Key Usage: critical\s+Digital Signature, Key Encipherment/);
  t.match(text, /CA:FALSE/);
  // The same encoding as `openssl req -subj "/UID=…"`: userId as a UTF8String.
  const parsed = openssl(['asn1parse'], id.certPem).stdout;
  t.match(parsed, /OBJECT\s+:userId\s*\n.*UTF8STRING\s+:node-42\.example/);
});

t.test('the fingerprint is the sha256 of the DER, as openssl x509 -fingerprint -sha256 prints it', { skip: noOpenssl }, async (t) => {
  const out = openssl(['x509', '-noout', '-fingerprint', '-sha256'], id.certPem);
  t.equal(out.status, 0, out.stderr);
  const expected = out.stdout.trim().split('=')[1]!.replace(/:/g, '').toLowerCase();
  t.equal(certificateFingerprint(id.certPem), expected);
  t.match(certificateFingerprint(id.certPem), /^[0-9a-f]{64}$/);
});

t.test('RUDDER node certificates yield their node ids and openssl fingerprints', { skip: noFixtures }, async (t) => {
  const e745 = fs.readFileSync(path.join(KEYS, `${E745}.cert`), 'utf8');
  t.equal(certificateNodeId(e745), E745);
  t.equal(certificateNodeId(fs.readFileSync(path.join(KEYS, `${R37817}.cert`), 'utf8')), R37817);
  t.equal(certificateNodeId(fs.readFileSync(path.join(KEYS, `${E745}-other.cert`), 'utf8')), E745);
  if (hasOpenssl) {
    const fp = openssl(['x509', '-noout', '-fingerprint', '-sha256'], e745).stdout.trim().split('=')[1]!;
    t.equal(certificateFingerprint(e745), fp.replace(/:/g, '').toLowerCase());
  }
});

t.test('parseCertificates splits nodescerts.pem into its three certificates', { skip: noFixtures }, async (t) => {
  const bundle = fs.readFileSync(path.join(KEYS, 'nodescerts.pem'), 'utf8');
  const certs = parseCertificates(bundle);
  t.equal(certs.length, 3);
  t.same(certs.map(certificateNodeId), [E745, R37817, E745]);
  for (const c of certs) t.match(c, /^-----BEGIN CERTIFICATE-----\n[\s\S]+\n-----END CERTIFICATE-----\n$/);
});

t.test('parseCertificates ignores surrounding text and tolerates CRLF', async (t) => {
  const other = createNodeIdentity('other', { bits: 1024 });
  const bundle = `# comment\r\n${id.certPem.replace(/\n/g, '\r\n')}junk between\n${other.certPem}trailing`;
  const certs = parseCertificates(bundle);
  t.same(certs, [id.certPem, other.certPem]);
  t.same(parseCertificates(''), []);
  t.same(parseCertificates('no certificates here'), []);
});

t.test('a certificate without a UID attribute has no node id', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir();
  const r = openssl(['req', '-x509', '-newkey', 'rsa:1024', '-nodes', '-subj', '/CN=no-uid', '-days', '1',
    '-keyout', path.join(dir, 'k.pem'), '-out', path.join(dir, 'c.pem')]);
  t.equal(r.status, 0, r.stderr);
  t.equal(certificateNodeId(fs.readFileSync(path.join(dir, 'c.pem'), 'utf8')), null);
});

t.test('an openssl req -subj "/UID=…" certificate yields its node id', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir();
  const r = openssl(['req', '-x509', '-sha256', '-newkey', 'rsa:1024', '-nodes', '-subj', '/UID=abc-123', '-days', '1',
    '-keyout', path.join(dir, 'k.pem'), '-out', path.join(dir, 'c.pem')]);
  t.equal(r.status, 0, r.stderr);
  t.equal(certificateNodeId(fs.readFileSync(path.join(dir, 'c.pem'), 'utf8')), 'abc-123');
});

t.test('unreadable certificates are refused with ERR_CERTIFICATE', async (t) => {
  const broken = id.certPem.replace(/[A-Za-z]{8}\n/, 'AAAAAAAA\n');
  for (const bad of ['', 'garbage', '-----BEGIN CERTIFICATE-----\nAAAA\n-----END CERTIFICATE-----\n', broken]) {
    t.throws(() => certificateNodeId(bad), { code: 'ERR_CERTIFICATE' });
    t.throws(() => certificateFingerprint(bad), { code: 'ERR_CERTIFICATE' });
  }
});

t.test('a certificate checked again is answered from the last ones checked; a bad one is refused every time', async (t) => {
  const { checkCertificate } = await import('@capstan/shared/smime/certificate');
  const first = checkCertificate(id.certPem);
  t.equal(checkCertificate(id.certPem), first, 'the same answer, not parsed again');
  t.equal(certificateFingerprint(id.certPem), new X509Certificate(id.certPem).fingerprint256.replace(/:/g, '').toLowerCase());
  const broken = id.certPem.replace(/[A-Za-z]{8}\n/, 'AAAAAAAA\n');
  for (let i = 0; i < 2; i++) t.throws(() => checkCertificate(broken), { code: 'ERR_CERTIFICATE' });
  // Past the ones kept, a certificate is parsed again, with the same answer.
  for (let i = 0; i < 40; i++) checkCertificate(createNodeIdentity(`n${i}`, { bits: 1024 }).certPem);
  const again = checkCertificate(id.certPem);
  t.not(again, first);
  t.same(again.der, first.der);
});

t.test('invalid identity options are programming errors', async (t) => {
  t.throws(() => createNodeIdentity(''), TypeError);
  t.throws(() => createNodeIdentity('n', { bits: 512 }), RangeError);
  t.throws(() => createNodeIdentity('n', { days: 0 }), RangeError);
});
