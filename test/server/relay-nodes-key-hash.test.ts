/**
 * RUDDER's key-hash in the relays' nodes list (`sha256:` of the public key's SubjectPublicKeyInfo
 * DER), read from the certificate by a walk of its DER, against OpenSSL's command line as the
 * independent peer (the key exported by `openssl x509 -pubkey` then `openssl pkey -outform DER`),
 * for RSA and EC keys; a certificate it cannot read has none.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { keyHashOf } from '@capstan/server/api/routes/relay-nodes';
import { spkiOf } from '@capstan/shared/smime/certificate';

const openssl = (args: string[], input?: Buffer): Buffer => execFileSync('openssl', args, { input, stdio: ['pipe', 'pipe', 'pipe'] });

t.test('the key-hash of RSA and EC certificates is the one OpenSSL gives', async (t) => {
  const dir = t.testdir();
  const kinds: Array<[string, string[]]> = [
    ['rsa', ['-newkey', 'rsa:2048']],
    ['ec', ['-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256']],
  ];
  for (const [name, newkey] of kinds) {
    const pemPath = join(dir, `${name}.pem`);
    openssl(['req', '-x509', ...newkey, '-nodes', '-keyout', join(dir, `${name}.key`), '-out', pemPath, '-days', '2', '-subj', `/CN=${name}.example/UID=0d5e0000-0000-4000-8000-000000000001`]);
    const pem = readFileSync(pemPath, 'utf8');
    const spkiPem = openssl(['x509', '-in', pemPath, '-pubkey', '-noout']);
    const der = openssl(['pkey', '-pubin', '-outform', 'DER'], spkiPem);
    t.same(spkiOf(pem), der, `${name}: the SubjectPublicKeyInfo as OpenSSL exports it`);
    t.equal(keyHashOf(pem), `sha256:${createHash('sha256').update(der).digest('hex')}`, `${name}: the key-hash`);
  }
});

t.test('a certificate that cannot be read has no key-hash', async (t) => {
  t.equal(keyHashOf(null), null, 'none registered');
  t.equal(keyHashOf('-----BEGIN CERTIFICATE-----\nMIIBAAAA\n-----END CERTIFICATE-----\n'), null, 'truncated DER');
  t.equal(keyHashOf('not a certificate'), null, 'not PEM');
  t.throws(() => spkiOf('-----BEGIN CERTIFICATE-----\nMAMCAQE=\n-----END CERTIFICATE-----\n'), { code: 'ERR_CERTIFICATE' }, 'an INTEGER where the certificate should be');
});
