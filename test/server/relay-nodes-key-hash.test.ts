/**
 * RUDDER's key-hash in the relays' nodes list (`sha256:` of the public key's SubjectPublicKeyInfo
 * DER), read from the certificate by a walk of its DER, against OpenSSL's command line as the
 * independent peer (the key exported by `openssl x509 -pubkey` then `openssl pkey -outform DER`),
 * for RSA and EC keys; a certificate it cannot read has none. The list reads certificates only
 * for the pages that hold a fingerprint it has not hashed yet.
 */
import { execFileSync } from 'node:child_process';
import { createHash } from 'node:crypto';
import { readFileSync } from 'node:fs';
import { join } from 'node:path';
import t from 'tap';
import { acceptedNodesList, keyHashOf } from '@capstan/server/api/routes/relay-nodes';
import type { AcceptedNodeRow, Reads } from '@capstan/server/reads';
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

t.test('the list reads certificates only for a page with a fingerprint it has not hashed', async (t) => {
  const dir = t.testdir();
  const pems = ['a', 'b'].map((name) => {
    const out = join(dir, `${name}.pem`);
    openssl(['req', '-x509', '-newkey', 'ec', '-pkeyopt', 'ec_paramgen_curve:P-256', '-nodes', '-keyout', join(dir, `${name}.key`), '-out', out, '-days', '2', '-subj', `/CN=${name}`]);
    return readFileSync(out, 'utf8');
  });
  const fp = (pem: string) => createHash('sha256').update(pem).digest('hex');
  const rows: AcceptedNodeRow[] = [
    { id: 'n1', hostname: 'one', policy_server: '', relay: false, certificate_fingerprint: fp(pems[0]!), certificate: pems[0]! },
    { id: 'n2', hostname: 'two', policy_server: 'relay-1', relay: false, certificate_fingerprint: null, certificate: null },
  ];
  const reads: boolean[] = [];
  const store = {
    identity: { forcedRenewals: async () => new Map<string, number>() },
    acceptedNodesPage: async (after: string, limit: number, withCertificates = true) => {
      reads.push(withCertificates);
      return rows.filter((r) => r.id > after).slice(0, limit).map((r) => (withCertificates ? r : { ...r, certificate: null }));
    },
  } as unknown as Reads;

  const first = await acceptedNodesList(store, 'root');
  t.same(reads, [false, true], 'a fingerprint not seen: the page read again with its certificates');
  t.same(first, {
    n1: { hostname: 'one', 'policy-server': 'root', 'key-hash': keyHashOf(pems[0]!) },
    n2: { hostname: 'two', 'policy-server': 'relay-1' },
  });
  reads.length = 0;
  t.same(await acceptedNodesList(store, 'root'), first, 'the same list from the hashes kept');
  t.same(reads, [false], 'every fingerprint seen: no certificate read');

  reads.length = 0;
  rows.push({ id: 'n3', hostname: 'three', policy_server: '', relay: true, certificate_fingerprint: fp(pems[1]!), certificate: pems[1]! });
  const third = await acceptedNodesList(store, 'root');
  t.same(reads, [false, true], 'a new node with a new certificate: read again');
  t.same(third.n3, { hostname: 'three', 'policy-server': 'root', 'key-hash': keyHashOf(pems[1]!), relay: true });
  t.not(third.n3!['key-hash'], third.n1!['key-hash'], 'each node its own key');
});
