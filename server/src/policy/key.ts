/**
 * The server's ed25519 policy key: made at first start in <data-dir>/policy-key.pem (0600) and
 * kept. Every bundle is signed with it; agents pin its public key (docs/policy.md).
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync } from 'node:crypto';
import { chmod, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError, policyKeyId } from '@capstan/shared';

export interface PolicyKey {
  privateKeyPem: string;
  publicKeyPem: string;
  keyId: string;
}

export const POLICY_KEY_FILE = 'policy-key.pem';

export function policyKeyFrom(privateKeyPem: string): PolicyKey {
  let priv;
  try {
    priv = createPrivateKey(privateKeyPem);
  } catch (err) {
    throw capstanError('ERR_STARTUP', 'policy key file is not a PEM private key', { cause: err });
  }
  if (priv.asymmetricKeyType !== 'ed25519') throw capstanError('ERR_STARTUP', `policy key must be ed25519, not ${priv.asymmetricKeyType}`);
  const pub = createPublicKey(priv);
  return { privateKeyPem, publicKeyPem: pub.export({ type: 'spki', format: 'pem' }).toString(), keyId: policyKeyId(pub) };
}

/** Read the key, or make it when absent. 'wx' so two servers starting at once keep one key. */
export async function ensurePolicyKey(dataDir: string): Promise<PolicyKey> {
  const path = join(dataDir, POLICY_KEY_FILE);
  try {
    return policyKeyFrom(await readFile(path, 'utf8'));
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const { privateKey } = generateKeyPairSync('ed25519');
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  await writeFile(path, pem, { mode: 0o600, flag: 'wx' }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  // The umask cannot widen 0600, but a pre-existing file's mode is what it is: say so at start.
  await chmod(path, 0o600);
  return policyKeyFrom(await readFile(path, 'utf8'));
}
