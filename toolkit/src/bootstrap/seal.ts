/**
 * Sealing a bootstrap task's secrets (the SSH credential, the agent's configuration with its
 * enrollment secret) to the relay that runs the task (docs/bootstrap.md, "From a relay").
 *
 * The server encrypts to the public key of the certificate the relay was registered with: a fresh
 * AES-256-GCM key per task, itself encrypted with RSA-OAEP (SHA-256). The additional data names
 * the relay, the job and the node, so a sealed task opens only as what it was made for. The relay
 * opens it in memory with its own key, just before it connects, and never writes it anywhere:
 * its spool, its logs and its upstream see the sealed form only.
 */
import { constants, createCipheriv, createDecipheriv, privateDecrypt, publicEncrypt, randomBytes, X509Certificate } from 'node:crypto';
import { capstanError } from '@capstan/shared/errors';

const ALG = 'RSA-OAEP-256+A256GCM';

interface Envelope {
  alg: typeof ALG;
  key: string;
  iv: string;
  tag: string;
  data: string;
}

/** What a sealed task is bound to. */
export const sealedTaskAad = (relay: string, jobId: string, nodeId: string) => `capstan-bootstrap\u0000${relay}\u0000${jobId}\u0000${nodeId}`;

/** Seal `plain` to the RSA key of `certificatePem`; ERR_BOOTSTRAP_RELAY when that is no RSA certificate. */
export function sealToCertificate(certificatePem: string, aad: string, plain: string): string {
  let publicKey;
  try {
    publicKey = new X509Certificate(certificatePem).publicKey;
  } catch (err) {
    throw capstanError('ERR_BOOTSTRAP_RELAY', `the relay's certificate cannot be read: ${(err as Error).message}`);
  }
  if (publicKey.asymmetricKeyType !== 'rsa') throw capstanError('ERR_BOOTSTRAP_RELAY', `the relay's certificate holds a ${publicKey.asymmetricKeyType} key: only RSA keys are sealed to`);
  const key = randomBytes(32);
  const iv = randomBytes(12);
  const cipher = createCipheriv('aes-256-gcm', key, iv);
  cipher.setAAD(Buffer.from(aad, 'utf8'));
  const data = Buffer.concat([cipher.update(plain, 'utf8'), cipher.final()]);
  const wrapped = publicEncrypt({ key: publicKey, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha256' }, key);
  key.fill(0);
  const env: Envelope = { alg: ALG, key: wrapped.toString('base64'), iv: iv.toString('base64'), tag: cipher.getAuthTag().toString('base64'), data: data.toString('base64') };
  return Buffer.from(JSON.stringify(env), 'utf8').toString('base64url');
}

/** Open what sealToCertificate made, with the matching private key; ERR_BOOTSTRAP_SEALED otherwise. */
export function openWithKey(privateKeyPem: string, aad: string, sealed: string): string {
  try {
    const env = JSON.parse(Buffer.from(sealed, 'base64url').toString('utf8')) as Envelope;
    if (env.alg !== ALG) throw new Error(`unknown algorithm ${String(env.alg)}`);
    const key = privateDecrypt({ key: privateKeyPem, padding: constants.RSA_PKCS1_OAEP_PADDING, oaepHash: 'sha256' }, Buffer.from(env.key, 'base64'));
    const decipher = createDecipheriv('aes-256-gcm', key, Buffer.from(env.iv, 'base64'));
    decipher.setAAD(Buffer.from(aad, 'utf8'));
    decipher.setAuthTag(Buffer.from(env.tag, 'base64'));
    const plain = Buffer.concat([decipher.update(Buffer.from(env.data, 'base64')), decipher.final()]).toString('utf8');
    key.fill(0);
    return plain;
  } catch {
    // No detail: which part failed says nothing useful and nothing secret should be echoed.
    throw capstanError('ERR_BOOTSTRAP_SEALED', 'the sealed task does not open with this relay\'s key (was the relay registered with another certificate?)');
  }
}
