/**
 * The simulator's certificates made from a template (bench/src/sim/cert-template.ts) are real
 * certificates: each is signed over its own serial and node id, as OpenSSL and node:crypto
 * check them, and an S/MIME run log signed with one verifies against it alone.
 */
import { execFileSync } from 'node:child_process';
import { X509Certificate, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { writeFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { certificateNodeId, signSmime, verifySmime } from '@capstan/shared';
import { CertTemplate } from '@capstan/bench/sim/cert-template';
import { simNodeId } from '@capstan/bench/sim/identities';

const keyPem = generateKeyPairSync('rsa', { modulusLength: 2048 }).privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
const publicKey = createPublicKey(keyPem);

t.test('each certificate names its own node, has its own serial, and its signature verifies', async (t) => {
  const tpl = new CertTemplate(keyPem);
  const ids = Array.from({ length: 6 }, (_, i) => simNodeId('template', i));
  const certs = ids.map((id) => tpl.issue(id));
  const serials = new Set<string>();
  certs.forEach((pem, i) => {
    const x = new X509Certificate(pem);
    t.equal(certificateNodeId(pem), ids[i], `certificate ${i} is for its node`);
    t.equal(x.subject, x.issuer, 'self-signed: issuer is the subject');
    t.ok(x.verify(publicKey), `certificate ${i}'s signature verifies with the key`);
    serials.add(x.serialNumber);
  });
  t.equal(serials.size, ids.length, 'serial numbers differ');

  // OpenSSL, the independent peer: a self-signed certificate verifies against itself only when
  // its signature covers what it says.
  const dir = t.testdir();
  writeFileSync(join(dir, 'c.pem'), certs[3]!);
  t.match(execFileSync('openssl', ['verify', '-CAfile', join(dir, 'c.pem'), join(dir, 'c.pem')], { encoding: 'utf8' }), /OK/);
  t.match(execFileSync('openssl', ['x509', '-in', join(dir, 'c.pem'), '-noout', '-subject'], { encoding: 'utf8' }), new RegExp(ids[3]!));

  // A tampered node id no longer verifies: the signature is over the patched bytes.
  const der = Buffer.from(certs[2]!.replace(/-----[A-Z ]+-----|\s/g, ''), 'base64');
  const at = der.indexOf(Buffer.from(ids[2]!));
  der[at] = der[at] === 0x61 ? 0x62 : 0x61;
  t.notOk(new X509Certificate(der).verify(publicKey), 'a changed subject breaks the signature');

  // S/MIME with the patched certificate verifies against it, and not against its neighbour's.
  const signed = signSmime(Buffer.from('run log'), { keyPem, certPem: certs[4]! });
  t.equal(verifySmime(signed, [certs[4]!]).content.toString(), 'run log');
  t.throws(() => verifySmime(signed, [certs[5]!]), { code: 'ERR_SMIME_SIGNER_NOT_FOUND' });
});

t.test('an id of another length is made whole, not patched', async (t) => {
  const tpl = new CertTemplate(keyPem);
  const long = tpl.issue(simNodeId('template', 0));
  const short = tpl.issue('node-1');
  const other = tpl.issue('a-much-longer-node-identifier-than-a-uuid-0123456789');
  for (const [pem, id] of [[long, simNodeId('template', 0)], [short, 'node-1'], [other, 'a-much-longer-node-identifier-than-a-uuid-0123456789']] as const) {
    t.equal(certificateNodeId(pem), id);
    t.ok(new X509Certificate(pem).verify(publicKey), `${id} verifies`);
  }
});
