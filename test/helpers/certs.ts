/**
 * Certificates for the TLS tests, made with openssl, and a handshake at one TLS version: what
 * the relay's and the server's listener tests both need.
 */
import { execFileSync } from 'node:child_process';
import tls from 'node:tls';

export function haveOpenssl(): boolean {
  try {
    execFileSync('openssl', ['version']);
    return true;
  } catch {
    return false;
  }
}

/**
 * In `dir`: a CA (ca.pem, ca.key), a certificate it signs for 127.0.0.1 and localhost with
 * `cn` as its subject (server.pem, server.key), and a self-signed one for 127.0.0.1 per name of
 * `selfSigned` (<name>.pem, <name>.key).
 */
export function makeCerts(dir: string, cn: string, selfSigned: readonly string[] = []): void {
  const run = (...args: string[]) => execFileSync('openssl', args, { cwd: dir, stdio: 'ignore' });
  run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'ca.key', '-out', 'ca.pem', '-days', '2', '-subj', '/CN=Capstan test CA');
  run('req', '-newkey', 'rsa:2048', '-nodes', '-keyout', 'server.key', '-out', 'server.csr', '-subj', `/CN=${cn}`);
  execFileSync('sh', ['-c', 'printf "subjectAltName=IP:127.0.0.1,DNS:localhost\\n" > ext.cnf'], { cwd: dir });
  run('x509', '-req', '-in', 'server.csr', '-CA', 'ca.pem', '-CAkey', 'ca.key', '-CAcreateserial', '-out', 'server.pem', '-days', '2', '-extfile', 'ext.cnf');
  for (const n of selfSigned) {
    run('req', '-x509', '-newkey', 'rsa:2048', '-nodes', '-keyout', `${n}.key`, '-out', `${n}.pem`, '-days', '2', '-subj', `/CN=${n}`, '-addext', 'subjectAltName=IP:127.0.0.1');
  }
}

export type TlsVersion = 'TLSv1' | 'TLSv1.1' | 'TLSv1.2' | 'TLSv1.3';

/** Connect at exactly `version`: the protocol agreed (null when refused), the error, the peer's fingerprint. */
export function handshake(port: number, version: TlsVersion): Promise<{ protocol: string | null; error?: string; fingerprint?: string }> {
  return new Promise((resolve) => {
    // SECLEVEL=0 lets the client offer TLS 1.0/1.1 at all: the refusal must come from the listener.
    const s = tls.connect({ host: '127.0.0.1', port, minVersion: version, maxVersion: version, ciphers: 'DEFAULT@SECLEVEL=0', rejectUnauthorized: false }, () => {
      const out = { protocol: s.getProtocol(), fingerprint: s.getPeerCertificate().fingerprint256 };
      s.end();
      resolve(out);
    });
    s.on('error', (err: NodeJS.ErrnoException) => resolve({ protocol: null, error: err.code }));
  });
}
