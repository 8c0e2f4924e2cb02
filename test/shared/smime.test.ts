import t from 'tap';
import { fixturesAbsent, requiredInCi } from '../helpers/programs.js';
import { spawnSync } from 'node:child_process';
import fs from 'node:fs';
import path from 'node:path';
import fc from 'fast-check';
import { CapstanError, certificateFingerprint, certificateNodeId, createNodeIdentity, parseCertificates, readSignedContentUnverified, signSmime, verifySmime } from '@capstan/shared';

const FIXTURES = path.resolve(import.meta.dirname, '../../../shared/conformance/rudder');
const FILES = path.join(FIXTURES, 'files');
const E745 = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const hasFixtures = fs.existsSync(path.join(FILES, 'smime'));
const hasOpenssl = spawnSync('openssl', ['version']).status === 0;
const noFixtures = fixturesAbsent(path.join(FILES, 'smime'));
const noOpenssl = requiredInCi(hasOpenssl ? false : 'openssl CLI not available', 'install Debian\'s openssl');

const fixture = (rel: string): Buffer => fs.readFileSync(path.join(FILES, rel));
const fixtureText = (rel: string): string => fs.readFileSync(path.join(FILES, rel), 'utf8');
const crlf = (b: Buffer): Buffer => Buffer.from(b.toString('latin1').replace(/\r?\n/g, '\r\n'), 'latin1');

function openssl(args: string[]): { status: number | null; stderr: string } {
  const r = spawnSync('openssl', args, { encoding: 'utf8' });
  return { status: r.status, stderr: r.stderr };
}

/** The error code verifySmime ends with, or 'ok'; anything but a CapstanError fails the test. */
function outcome(signed: Buffer, certs: string[], expected?: Buffer): string {
  try {
    const r = verifySmime(signed, certs);
    if (expected && !r.content.equals(expected)) throw new Error('verified, but with other content');
    return 'ok';
  } catch (err) {
    if (err instanceof CapstanError) return err.code;
    throw err;
  }
}

/** Rewrite the base64 PKCS#7 signature of a message made by signSmime. */
function withSignature(msg: Buffer, mutate: (der: Buffer) => Buffer): Buffer {
  const text = msg.toString('latin1');
  const m = /(filename="smime\.p7s"\n\n)([A-Za-z0-9+/=\n]+?)(\n\n--)/.exec(text);
  if (!m) throw new Error('no signature block');
  const der = mutate(Buffer.from(m[2]!, 'base64'));
  const b64 = der.toString('base64').replace(/.{64}/g, '$&\n').replace(/\n$/, '');
  return Buffer.from(text.slice(0, m.index) + m[1] + b64 + m[3] + text.slice(m.index + m[0].length), 'latin1');
}

const id = createNodeIdentity('node-1');
const other = createNodeIdentity('node-2');
const runlog = Buffer.from(
  '2024-01-01T00:00:00+00:00 R: @@Common@@control@@rudder@@run@@0@@start@@cfg@@2024-01-01 00:00:00+00:00##node-1@#Start execution\n' +
    '2024-01-01T00:00:01+00:00 R: @@Common@@result_success@@r@@d@@0@@c@@None@@2024-01-01 00:00:00+00:00##node-1@#ok\n' +
    '  a continuation line\n' +
    '2024-01-01T00:00:02+00:00 R: @@Common@@control@@rudder@@run@@0@@end@@cfg@@2024-01-01 00:00:00+00:00##node-1@#End execution\n',
);

// --- RUDDER fixtures -----------------------------------------------------------------------------

t.test('RUDDER normal.signed verifies with its node certificate and yields normal.log byte for byte', { skip: noFixtures }, async (t) => {
  const cert = fixtureText(`keys/${E745}.cert`);
  const r = verifySmime(fixture('smime/normal.signed'), [cert]);
  t.ok(r.content.equals(fixture('smime/normal.log')));
  t.equal(r.signerCertPem, cert);
  t.equal(r.signingTime?.toISOString(), '2019-05-25T17:31:57.000Z');
});

t.test('RUDDER normal-diff.signed (altered text) fails with ERR_SMIME_DIGEST', { skip: noFixtures }, async (t) => {
  t.throws(() => verifySmime(fixture('smime/normal-diff.signed'), [fixtureText(`keys/${E745}.cert`)]), { code: 'ERR_SMIME_DIGEST' });
});

t.test('a certificate with the same key but another serial is not the signer', { skip: noFixtures }, async (t) => {
  // relayd's it_detects_wrong_certificates: the signer is matched by issuer + serial, not by key.
  t.throws(() => verifySmime(fixture('smime/normal.signed'), [fixtureText(`keys/${E745}-other.cert`)]), {
    code: 'ERR_SMIME_SIGNER_NOT_FOUND',
  });
  t.throws(() => verifySmime(fixture('smime/normal.signed'), []), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
  t.throws(() => verifySmime(fixture('smime/normal.signed'), [fixtureText('keys/37817c4d-fbf7-4850-a985-50021f4e8f41.cert')]), {
    code: 'ERR_SMIME_SIGNER_NOT_FOUND',
  });
});

t.test('the signer is found among several certificates, given one by one or as a bundle', { skip: noFixtures }, async (t) => {
  const bundle = fixtureText('keys/nodescerts.pem');
  const one = verifySmime(fixture('smime/normal.signed'), parseCertificates(bundle));
  t.equal(one.signerCertPem, parseCertificates(bundle)[0]);
  t.ok(verifySmime(fixture('smime/normal.signed'), [bundle]).content.equals(fixture('smime/normal.log')));
});

t.test('RUDDER signed run logs verify and yield their .log with CRLF line ends', { skip: noFixtures }, async (t) => {
  const cert = fixtureText(`keys/${E745}.cert`);
  const signed = fs.readdirSync(path.join(FILES, 'runlogs')).filter((f) => f.endsWith('.signed'));
  t.equal(signed.length, 2);
  for (const f of signed) {
    const r = verifySmime(fixture(`runlogs/${f}`), [cert]);
    t.ok(r.content.equals(crlf(fixture(`runlogs/${f.replace(/\.signed$/, '.log')}`))), f);
  }
});

t.test('a signed fixture still verifies after its line ends were rewritten in transit', { skip: noFixtures }, async (t) => {
  // OpenSSL canonicalises each line to CRLF before hashing; so do we, and the content stays CRLF.
  const cert = fixtureText(`keys/${E745}.cert`);
  const original = fixture('smime/normal.signed').toString('latin1');
  const lf = Buffer.from(original.replace(/\r\n/g, '\n'), 'latin1');
  const allCrlf = Buffer.from(original.replace(/\r?\n/g, '\r\n'), 'latin1');
  t.ok(verifySmime(lf, [cert]).content.equals(fixture('smime/normal.log')));
  t.ok(verifySmime(allCrlf, [cert]).content.equals(fixture('smime/normal.log')));
});

// --- interoperability with the openssl CLI -------------------------------------------------------

t.test('openssl smime -verify accepts what signSmime makes and returns the content', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir();
  const content = hasFixtures ? fixture(`runlogs/2018-08-24T15_55_01+00_00@${E745}.log`) : runlog;
  fs.writeFileSync(path.join(dir, 'signed'), signSmime(content, id));
  fs.writeFileSync(path.join(dir, 'cert.pem'), id.certPem);
  fs.writeFileSync(path.join(dir, 'other.pem'), other.certPem);
  // -nointern: only -certfile may hold the signer; -noverify: no chain, like relayd.
  const args = ['smime', '-verify', '-noverify', '-nointern', '-text', '-in', path.join(dir, 'signed')];
  const ok = openssl([...args, '-certfile', path.join(dir, 'cert.pem'), '-out', path.join(dir, 'out')]);
  t.equal(ok.status, 0, ok.stderr);
  t.ok(fs.readFileSync(path.join(dir, 'out')).equals(crlf(content)), 'openssl output is the content with CRLF');
  const wrong = openssl([...args, '-certfile', path.join(dir, 'other.pem'), '-out', path.join(dir, 'out2')]);
  t.not(wrong.status, 0, 'openssl refuses it against another certificate');
});

t.test('signSmime with the RUDDER node key (PKCS#1, RSA 4096) verifies in openssl and here', { skip: noFixtures || noOpenssl }, async (t) => {
  const dir = t.testdir();
  const e745 = { keyPem: fixtureText(`keys/${E745}.nopass.priv`), certPem: fixtureText(`keys/${E745}.cert`) };
  const signed = signSmime(fixture('smime/normal.log'), e745);
  fs.writeFileSync(path.join(dir, 'signed'), signed);
  const r = openssl(['smime', '-verify', '-noverify', '-nointern', '-text', '-in', path.join(dir, 'signed'),
    '-certfile', path.join(FILES, `keys/${E745}.cert`), '-out', path.join(dir, 'out')]);
  t.equal(r.status, 0, r.stderr);
  t.ok(fs.readFileSync(path.join(dir, 'out')).equals(fixture('smime/normal.log')));
  t.ok(verifySmime(signed, [e745.certPem]).content.equals(fixture('smime/normal.log')));
  t.throws(() => verifySmime(signed, [fixtureText(`keys/${E745}-other.cert`)]), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
});

t.test('a message from openssl smime -sign -text -nocerts -md sha256 verifies and yields the content', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir({ 'key.pem': id.keyPem, 'cert.pem': id.certPem, 'content': runlog });
  const r = openssl(['smime', '-sign', '-text', '-nocerts', '-md', 'sha256', '-signer', path.join(dir, 'cert.pem'),
    '-inkey', path.join(dir, 'key.pem'), '-in', path.join(dir, 'content'), '-out', path.join(dir, 'signed')]);
  t.equal(r.status, 0, r.stderr);
  const v = verifySmime(fs.readFileSync(path.join(dir, 'signed')), [id.certPem]);
  t.ok(v.content.equals(crlf(runlog)));
  t.equal(v.signerCertPem, id.certPem);
  t.ok(v.signingTime && Math.abs(v.signingTime.getTime() - Date.now()) < 120_000, 'signingTime is read');
});

t.test('other openssl S/MIME forms verify: opaque, streamed BER, CMS with key id and sha512, sha1 when allowed', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir({ 'key.pem': id.keyPem, 'cert.pem': id.certPem, 'content': runlog });
  const common = ['-text', '-signer', path.join(dir, 'cert.pem'), '-inkey', path.join(dir, 'key.pem'), '-in', path.join(dir, 'content')];
  const variants: Record<string, string[]> = {
    opaque: ['smime', '-sign', '-nodetach', '-md', 'sha256', ...common],
    'opaque streamed (indefinite lengths)': ['smime', '-sign', '-nodetach', '-stream', '-md', 'sha256', ...common],
    'cms -keyid sha512': ['cms', '-sign', '-nocerts', '-keyid', '-md', 'sha512', ...common],
    'sha1 with embedded certificate': ['smime', '-sign', '-md', 'sha1', ...common],
  };
  for (const [name, args] of Object.entries(variants)) {
    const out = path.join(dir, name.replace(/\W+/g, '_'));
    const r = openssl([...args, '-out', out]);
    t.equal(r.status, 0, `${name}: ${r.stderr}`);
    // SHA-1 is refused unless the caller allows it (old agents; test/server/sha1-signatures.test.ts).
    t.ok(verifySmime(fs.readFileSync(out), [id.certPem], { allowSha1: name.startsWith('sha1') }).content.equals(crlf(runlog)), name);
  }
});

t.test('certificates embedded in the message are ignored (openssl -nointern)', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir({ 'key.pem': id.keyPem, 'cert.pem': id.certPem, 'content': runlog });
  const r = openssl(['smime', '-sign', '-text', '-md', 'sha256', '-signer', path.join(dir, 'cert.pem'), '-inkey',
    path.join(dir, 'key.pem'), '-in', path.join(dir, 'content'), '-out', path.join(dir, 'signed')]);
  t.equal(r.status, 0, r.stderr);
  const signed = fs.readFileSync(path.join(dir, 'signed'));
  t.throws(() => verifySmime(signed, []), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
  t.throws(() => verifySmime(signed, [other.certPem]), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
});

t.test('a signature by another key under the same issuer and serial fails with ERR_SMIME_SIGNATURE', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir();
  for (const n of ['a', 'b']) {
    const r = openssl(['req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-subj', '/UID=twin', '-set_serial', '0x1234',
      '-days', '1', '-keyout', path.join(dir, `${n}.key`), '-out', path.join(dir, `${n}.cert`)]);
    t.equal(r.status, 0, r.stderr);
  }
  const read = (f: string): string => fs.readFileSync(path.join(dir, f), 'utf8');
  const signed = signSmime(runlog, { keyPem: read('b.key'), certPem: read('b.cert') });
  t.equal(outcome(signed, [read('b.cert')], crlf(runlog)), 'ok');
  t.throws(() => verifySmime(signed, [read('a.cert')]), { code: 'ERR_SMIME_SIGNATURE' });
});

// --- our own round trip --------------------------------------------------------------------------

t.test('signSmime output is openssl-shaped multipart/signed and round-trips with CRLF content', async (t) => {
  const when = new Date('2031-02-03T04:05:06Z');
  const signed = signSmime(runlog, id, { signingTime: when });
  const text = signed.toString('latin1');
  t.match(text, /^MIME-Version: 1\.0\nContent-Type: multipart\/signed; protocol="application\/x-pkcs7-signature"; micalg="sha-256"; boundary="----[0-9A-F]{32}"\n\n/);
  t.match(text, /\nContent-Type: text\/plain\r\n\r\n2024-01-01T00:00:00\+00:00 R: /);
  t.match(text, /Content-Type: application\/x-pkcs7-signature; name="smime\.p7s"\nContent-Transfer-Encoding: base64\n/);
  const r = verifySmime(signed, [id.certPem]);
  t.ok(r.content.equals(crlf(runlog)));
  t.equal(r.signingTime?.toISOString(), when.toISOString());
  t.equal(r.signerCertPem, id.certPem);
});

t.test('edge-case contents round-trip: empty, no final newline, blank lines, CRLF, invalid UTF-8, 2050 dates', async (t) => {
  const cases: Array<[string, Buffer, Buffer]> = [
    ['empty', Buffer.alloc(0), Buffer.alloc(0)],
    ['no final newline', Buffer.from('a\nb'), Buffer.from('a\r\nb')],
    ['blank lines', Buffer.from('\n\na\n\n'), Buffer.from('\r\n\r\na\r\n\r\n')],
    ['already CRLF', Buffer.from('a\r\nb\r\n'), Buffer.from('a\r\nb\r\n')],
    ['stray CRs before LF (openssl strips them)', Buffer.from('a\r\r\nb\n'), Buffer.from('a\r\nb\r\n')],
    ['invalid UTF-8', Buffer.from([0x80, 0xff, 0x0a, 0xc3]), Buffer.from([0x80, 0xff, 0x0d, 0x0a, 0xc3])],
    ['boundary-looking text', Buffer.from('------\n--\n'), Buffer.from('------\r\n--\r\n')],
  ];
  for (const [name, content, expected] of cases) {
    t.ok(verifySmime(signSmime(content, id), [id.certPem]).content.equals(expected), name);
  }
  const late = verifySmime(signSmime(runlog, id, { signingTime: new Date('2051-06-07T08:09:10Z') }), [id.certPem]);
  t.equal(late.signingTime?.toISOString(), '2051-06-07T08:09:10.000Z', 'GeneralizedTime after 2049');
});

t.test('signSmime refuses a key that does not match the certificate, or an unreadable one, with ERR_KEY', async (t) => {
  t.throws(() => signSmime(runlog, { keyPem: other.keyPem, certPem: id.certPem }), { code: 'ERR_KEY' });
  t.throws(() => signSmime(runlog, { keyPem: 'not a key', certPem: id.certPem }), { code: 'ERR_KEY' });
  t.throws(() => signSmime(runlog, { keyPem: id.keyPem, certPem: 'not a cert' }), { code: 'ERR_CERTIFICATE' });
  // Keys are kept once read: one that signed for its own certificate is still refused for another's.
  t.ok(verifySmime(signSmime(runlog, other), [other.certPem]), 'the other key signs for its own certificate');
  t.throws(() => signSmime(runlog, { keyPem: other.keyPem, certPem: id.certPem }), { code: 'ERR_KEY' }, 'and is still refused for this one');
  t.throws(() => signSmime(runlog, { keyPem: 'not a key', certPem: id.certPem }), { code: 'ERR_KEY' }, 'an unreadable key is never kept');
});

t.test('an encrypted private key is refused with ERR_KEY', { skip: noFixtures }, async (t) => {
  const e745 = { keyPem: fixtureText(`keys/${E745}.priv`), certPem: fixtureText(`keys/${E745}.cert`) };
  t.throws(() => signSmime(runlog, e745), { code: 'ERR_KEY' });
});

// --- tampering -----------------------------------------------------------------------------------

t.test('changing any one byte of the signed text fails with ERR_SMIME_DIGEST', async (t) => {
  const signed = signSmime(runlog, id);
  const start = signed.indexOf('Content-Type: text/plain');
  const end = start + 'Content-Type: text/plain\r\n\r\n'.length + crlf(runlog).length;
  const seen = new Set<string>();
  for (let i = start; i < end; i++) {
    const bad = Buffer.from(signed);
    bad[i] = bad[i]! ^ 0x01;
    seen.add(outcome(bad, [id.certPem]));
  }
  t.same([...seen], ['ERR_SMIME_DIGEST']);
  // An added or removed line is a change too.
  const text = signed.toString('latin1');
  t.equal(outcome(Buffer.from(text.replace('  a continuation line\r\n', ''), 'latin1'), [id.certPem]), 'ERR_SMIME_DIGEST');
  t.equal(outcome(Buffer.from(text.replace('  a continuation', 'Wrong\r\n  a continuation'), 'latin1'), [id.certPem]), 'ERR_SMIME_DIGEST');
});

t.test('changing the signature value or a signed attribute fails with ERR_SMIME_SIGNATURE', async (t) => {
  const signed = signSmime(runlog, id, { signingTime: new Date('2030-01-01T00:00:00Z') });
  const flipLast = withSignature(signed, (der) => {
    const d = Buffer.from(der);
    d[d.length - 10] = d[d.length - 10]! ^ 0x40;
    return d;
  });
  t.throws(() => verifySmime(flipLast, [id.certPem]), { code: 'ERR_SMIME_SIGNATURE' });
  const otherTime = withSignature(signed, (der) => {
    const at = der.indexOf('300101000000Z', 0, 'latin1');
    t.ok(at > 0, 'signingTime found');
    const d = Buffer.from(der);
    d.write('310101000000Z', at, 'latin1');
    return d;
  });
  t.throws(() => verifySmime(otherTime, [id.certPem]), { code: 'ERR_SMIME_SIGNATURE' });
});

t.test('a signature by another node is not found among this node\'s certificates', async (t) => {
  t.throws(() => verifySmime(signSmime(runlog, other), [id.certPem]), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
});

// --- malformed input -----------------------------------------------------------------------------

t.test('malformed messages get the right coded error', async (t) => {
  const signed = signSmime(runlog, id).toString('latin1');
  const boundary = /boundary="([^"]+)"/.exec(signed)![1]!;
  const p7s = /filename="smime\.p7s"\n\n([A-Za-z0-9+/=\n]+?)\n\n--/.exec(signed)![1]!;
  const opaque = (der: Buffer, extra = ''): Buffer =>
    Buffer.from(`MIME-Version: 1.0\nContent-Type: application/pkcs7-mime; smime-type=signed-data${extra}\nContent-Transfer-Encoding: base64\n\n${der.toString('base64')}\n`);
  const cases: Array<[string, Buffer, string, string[]?]> = [
    ['empty input', Buffer.alloc(0), 'ERR_SMIME_FORMAT'],
    ['no header block', Buffer.from('just text'), 'ERR_SMIME_FORMAT'],
    ['no Content-Type', Buffer.from('MIME-Version: 1.0\n\nbody'), 'ERR_SMIME_FORMAT'],
    ['plain text message', Buffer.from('Content-Type: text/plain\n\nhello'), 'ERR_SMIME_FORMAT'],
    ['no boundary parameter', Buffer.from(signed.replace(/; boundary="[^"]+"/, '')), 'ERR_SMIME_FORMAT'],
    ['no closing boundary', Buffer.from(signed.slice(0, signed.lastIndexOf(`--${boundary}--`))), 'ERR_SMIME_FORMAT'],
    ['truncated in the signature', Buffer.from(signed.slice(0, signed.length - 200)), 'ERR_SMIME_FORMAT'],
    ['a third part', Buffer.from(signed.replace(`--${boundary}--`, `--${boundary}\nContent-Type: text/plain\n\nx\n--${boundary}--`)), 'ERR_SMIME_FORMAT'],
    ['signature part of another type', Buffer.from(signed.replace('application/x-pkcs7-signature; name', 'text/plain; name')), 'ERR_SMIME_FORMAT'],
    ['signature not base64', Buffer.from(signed.replace(p7s, '!!!not base64!!!')), 'ERR_SMIME_FORMAT'],
    ['signature base64 of garbage', Buffer.from(signed.replace(p7s, 'AAAAAAAA')), 'ERR_SMIME_FORMAT'],
    ['quoted-printable signature', Buffer.from(signed.replace('Transfer-Encoding: base64', 'Transfer-Encoding: quoted-printable')), 'ERR_SMIME_UNSUPPORTED'],
    ['enveloped (encrypted) data', opaque(Buffer.from('300b06092a864886f70d010703', 'hex'), ''), 'ERR_SMIME_UNSUPPORTED'],
    ['smime-type enveloped-data', Buffer.from('Content-Type: application/pkcs7-mime; smime-type=enveloped-data\n\nAAAA\n'), 'ERR_SMIME_UNSUPPORTED'],
    ['text/plain header removed in transit', Buffer.from(signed.replace('Content-Type: text/plain\r\n\r\n', '')), 'ERR_SMIME_DIGEST'],
    ['an unreadable certificate', Buffer.from(signed), 'ERR_CERTIFICATE', ['not a certificate']],
  ];
  for (const [name, input, code, certs] of cases) {
    t.equal(outcome(input, certs ?? [id.certPem]), code, name);
  }
});

function replaceAll(der: Buffer, fromHex: string, toHex: string): Buffer {
  return Buffer.from(der.toString('hex').split(fromHex).join(toHex), 'hex');
}

t.test('a digest algorithm other than sha1/sha2 is ERR_SMIME_UNSUPPORTED', async (t) => {
  // Same-length swap: sha256 (2.16.840.1.101.3.4.2.1) → sha3-256 (2.16.840.1.101.3.4.2.8).
  const signed = withSignature(signSmime(runlog, id), (der) => replaceAll(der, '0609608648016503040201', '0609608648016503040208'));
  t.throws(() => verifySmime(signed, [id.certPem]), { code: 'ERR_SMIME_UNSUPPORTED' });
});

t.test('signed content that is not text/plain is refused (openssl -text semantics)', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir({ 'key.pem': id.keyPem, 'cert.pem': id.certPem, 'content': runlog });
  // Without -text, openssl signs the bare text: the signature is good but there is no text header.
  const r = openssl(['smime', '-sign', '-nocerts', '-md', 'sha256', '-signer', path.join(dir, 'cert.pem'), '-inkey',
    path.join(dir, 'key.pem'), '-in', path.join(dir, 'content'), '-out', path.join(dir, 'signed')]);
  t.equal(r.status, 0, r.stderr);
  t.throws(() => verifySmime(fs.readFileSync(path.join(dir, 'signed')), [id.certPem]), { code: 'ERR_SMIME_FORMAT' });
});

t.test('messages larger than maxBytes are refused before parsing', async (t) => {
  const signed = signSmime(runlog, id);
  t.equal(verifySmime(signed, [id.certPem], { maxBytes: signed.length }).content.length, crlf(runlog).length);
  t.throws(() => verifySmime(signed, [id.certPem], { maxBytes: signed.length - 1 }), { code: 'ERR_SMIME_FORMAT' });
});

t.test('random bytes only ever produce a CapstanError', async () => {
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 4096 }), (bytes) => {
      outcome(Buffer.from(bytes), [id.certPem]);
    }),
    { numRuns: 500 },
  );
});

t.test('MIME-shaped random messages only ever produce a CapstanError', async () => {
  const part = fc.tuple(fc.constantFrom('text/plain', 'application/x-pkcs7-signature', 'application/pkcs7-mime', 'x/y'),
    fc.oneof(fc.base64String({ maxLength: 400 }), fc.string({ maxLength: 200 })));
  fc.assert(
    fc.property(fc.constantFrom('multipart/signed', 'application/pkcs7-mime', 'application/x-pkcs7-mime'),
      fc.string({ minLength: 1, maxLength: 20 }), fc.array(part, { maxLength: 4 }), fc.boolean(), fc.constantFrom('\n', '\r\n'),
      (type, boundary, parts, close, eol) => {
        let msg = `MIME-Version: 1.0${eol}Content-Type: ${type}; protocol="application/x-pkcs7-signature"; boundary="${boundary}"${eol}${eol}`;
        for (const [ct, body] of parts) msg += `--${boundary}${eol}Content-Type: ${ct}${eol}Content-Transfer-Encoding: base64${eol}${eol}${body}${eol}`;
        if (close) msg += `--${boundary}--${eol}`;
        outcome(Buffer.from(msg), [id.certPem]);
      }),
    { numRuns: 500 },
  );
});

t.test('a mutated valid message either verifies to the same content or fails with a CapstanError', async (t) => {
  // The property behind "one altered byte is rejected": no mutation may verify to other content.
  const signed = signSmime(runlog, id);
  const expected = crlf(runlog);
  const mutation = fc.record({
    kind: fc.constantFrom('flip', 'set', 'insert', 'delete', 'truncate'),
    at: fc.nat(),
    byte: fc.integer({ min: 0, max: 255 }),
  });
  const seen = new Map<string, number>();
  fc.assert(
    fc.property(fc.array(mutation, { minLength: 1, maxLength: 4 }), (ms) => {
      let b = Buffer.from(signed);
      for (const m of ms) {
        const i = m.at % (b.length + 1);
        if (m.kind === 'flip' && i < b.length) b[i] = b[i]! ^ (1 << (m.byte % 8));
        else if (m.kind === 'set' && i < b.length) b[i] = m.byte;
        else if (m.kind === 'insert') b = Buffer.concat([b.subarray(0, i), Buffer.from([m.byte]), b.subarray(i)]);
        else if (m.kind === 'delete') b = Buffer.concat([b.subarray(0, i), b.subarray(i + 1)]);
        else if (m.kind === 'truncate') b = b.subarray(0, i);
      }
      const r = outcome(b, [id.certPem], expected);
      seen.set(r, (seen.get(r) ?? 0) + 1);
    }),
    { numRuns: 1500 },
  );
  t.comment(`outcomes: ${JSON.stringify(Object.fromEntries(seen))}`);
});

t.test('a mutated PKCS#7 structure only ever produces a CapstanError or the same content', async () => {
  const signed = signSmime(runlog, id);
  const expected = crlf(runlog);
  fc.assert(
    fc.property(fc.array(fc.tuple(fc.nat(), fc.integer({ min: 0, max: 255 })), { minLength: 1, maxLength: 3 }), fc.nat(), (sets, cut) => {
      const msg = withSignature(signed, (der) => {
        const d = Buffer.from(der);
        for (const [at, v] of sets) d[at % d.length] = v;
        return cut % 4 === 0 ? d.subarray(0, cut % d.length) : d;
      });
      outcome(msg, [id.certPem], expected);
    }),
    { numRuns: 1500 },
  );
});

// --- reading without verifying ------------------------------------------------------------------

t.test('readSignedContentUnverified returns the signed text without checking the signature', async (t) => {
  const signed = signSmime(runlog, id);
  t.ok(readSignedContentUnverified(signed).equals(crlf(runlog)));
  // It is what lets the server read the certificate a first inventory carries: no cert needed,
  // and a tampered message still reads (verifySmime is what refuses it).
  const tampered = Buffer.from(signed.toString('latin1').replace('Start execution', 'Start executioN'), 'latin1');
  t.match(readSignedContentUnverified(tampered).toString(), /Start executioN/);
  t.throws(() => readSignedContentUnverified(Buffer.from('Content-Type: text/plain\n\nhello')), { code: 'ERR_SMIME_FORMAT' });
  t.throws(() => readSignedContentUnverified(signed, { maxBytes: 10 }), { code: 'ERR_SMIME_FORMAT' });
});

t.test('readSignedContentUnverified reads RUDDER fixtures and opaque messages', { skip: noFixtures || noOpenssl }, async (t) => {
  t.ok(readSignedContentUnverified(fixture('smime/normal.signed')).equals(fixture('smime/normal.log')));
  const dir = t.testdir({ 'key.pem': id.keyPem, 'cert.pem': id.certPem, 'content': runlog });
  const r = openssl(['smime', '-sign', '-nodetach', '-text', '-signer', path.join(dir, 'cert.pem'), '-inkey',
    path.join(dir, 'key.pem'), '-in', path.join(dir, 'content'), '-out', path.join(dir, 'signed')]);
  t.equal(r.status, 0, r.stderr);
  t.ok(readSignedContentUnverified(fs.readFileSync(path.join(dir, 'signed'))).equals(crlf(runlog)));
});

t.test('readSignedContentUnverified only ever throws CapstanErrors on random input', async () => {
  const valid = signSmime(runlog, id);
  fc.assert(
    fc.property(fc.uint8Array({ maxLength: 2048 }), fc.nat(), (bytes, cut) => {
      for (const input of [Buffer.from(bytes), valid.subarray(0, cut % valid.length)]) {
        try {
          readSignedContentUnverified(input);
        } catch (err) {
          if (!(err instanceof CapstanError)) throw err;
        }
      }
    }),
    { numRuns: 200 },
  );
});

// --- cost ----------------------------------------------------------------------------------------

t.test('signing and verifying a 17 KB run log takes a few milliseconds', async (t) => {
  const content = hasFixtures ? fixture(`runlogs/2018-08-24T15_55_01+00_00@${E745}.log`) : Buffer.concat(Array(130).fill(runlog));
  const keys: Array<[string, { keyPem: string; certPem: string }]> = [['RSA 2048', id]];
  if (hasFixtures) keys.push(['RSA 4096 (RUDDER fixture key)', { keyPem: fixtureText(`keys/${E745}.nopass.priv`), certPem: fixtureText(`keys/${E745}.cert`) }]);
  const N = 50;
  for (const [name, key] of keys) {
    let signed = signSmime(content, key);
    let t0 = performance.now();
    for (let i = 0; i < N; i++) signed = signSmime(content, key);
    const signMs = (performance.now() - t0) / N;
    verifySmime(signed, [key.certPem]);
    t0 = performance.now();
    for (let i = 0; i < N; i++) verifySmime(signed, [key.certPem]);
    const verifyMs = (performance.now() - t0) / N;
    t.comment(`${name}, ${content.length} bytes: signSmime ${signMs.toFixed(2)} ms, verifySmime ${verifyMs.toFixed(2)} ms`);
    t.ok(signMs < 100 && verifyMs < 50, `${name} within budget`);
  }
});

// The pinned certificate is parsed by our DER reader with the RSA key imported from n and e
// (JWK) — fast — where certificates from outside go through OpenSSL's X.509 parser as well.
t.test('an EC (P-256) signer verifies too: its key goes through SPKI, not the RSA fast path', { skip: noOpenssl }, async (t) => {
  const dir = t.testdir({ 'content': runlog });
  const key = path.join(dir, 'ec.key');
  const cert = path.join(dir, 'ec.pem');
  t.equal(openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', key, '-out', cert,
    '-subj', '/UID=node-ec', '-days', '2']).status, 0);
  const out = path.join(dir, 'signed');
  t.equal(openssl(['smime', '-sign', '-text', '-nocerts', '-md', 'sha256', '-signer', cert, '-inkey', key, '-in', path.join(dir, 'content'), '-out', out]).status, 0);
  const ecPem = fs.readFileSync(cert, 'utf8');
  t.ok(verifySmime(fs.readFileSync(out), [ecPem]).content.equals(crlf(runlog)));
  t.equal(certificateNodeId(ecPem), 'node-ec');
  t.equal(outcome(fs.readFileSync(out), [id.certPem]), 'ERR_SMIME_SIGNER_NOT_FOUND');
});

t.test('pinned certificates: a broken PEM or DER, or an unusable key, is ERR_CERTIFICATE', async (t) => {
  const der = Buffer.from(id.certPem.replace(/-----[^-]+-----|\s/g, ''), 'base64');
  const pem = (d: Buffer) => `-----BEGIN CERTIFICATE-----\n${d.toString('base64').replace(/.{64}/g, '$&\n')}\n-----END CERTIFICATE-----\n`;
  const signed = signSmime(runlog, id);
  t.equal(outcome(signed, [pem(der)], crlf(runlog)), 'ok', 'the same certificate re-wrapped still verifies');
  const cases: Record<string, string> = {
    'no PEM block': 'MIIB',
    'not base64 inside': '-----BEGIN CERTIFICATE-----\n***\n-----END CERTIFICATE-----\n',
    'trailing bytes after the DER': pem(Buffer.concat([der, Buffer.from([0, 0])])),
    'truncated DER': pem(der.subarray(0, der.length - 40)),
    // The modulus INTEGER's tag turned into a BIT STRING's: the RSA key cannot be read.
    'a mangled public key': pem(Buffer.from(der.toString('hex').replace(/30820(10a|20a)0282/, (m) => `${m.slice(0, 10)}0382`), 'hex')),
  };
  for (const [name, text] of Object.entries(cases)) t.equal(outcome(signed, [text]), 'ERR_CERTIFICATE', name);
  // From outside (enrollment), OpenSSL's parser has its say as well.
  t.throws(() => certificateFingerprint(cases['trailing bytes after the DER']!), { code: 'ERR_CERTIFICATE' });
  t.equal(certificateFingerprint(pem(der)), certificateFingerprint(id.certPem));
});
