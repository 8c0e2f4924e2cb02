/**
 * A node's key and certificate on disk, the same for an agent and a relay: an RSA key (0600) and
 * a self-signed certificate with subject UID=<node id> (0644), made once when absent and reused
 * ever after. What the server pins when the node is accepted (or registered as a relay).
 */
import { createPrivateKey, createPublicKey, X509Certificate } from 'node:crypto';
import { readFile, rename, unlink, writeFile } from 'node:fs/promises';
import { capstanError } from '../errors.js';
import { certificateNodeId, createNodeIdentity } from '../smime/identity.js';

export interface NodeKeyFiles {
  keyPath: string;
  certPath: string;
}

export interface NodeKeyPair extends NodeKeyFiles {
  keyPem: string;
  certPem: string;
}

/** Write a file so that a crash leaves either the old content or the new, never half. */
export async function writeAtomic(path: string, data: string | Buffer, mode = 0o600): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  try {
    await writeFile(tmp, data, { mode });
    await rename(tmp, path);
  } catch (err) {
    await unlink(tmp).catch(() => {});
    throw err;
  }
}

/** A file's text, or null when it does not exist. */
export async function readOptional(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

/**
 * The node's key pair: read, or made (key 0600, certificate 0644) when either file is missing.
 * A certificate of another node id is refused (ERR_CERTIFICATE): a state directory copied from
 * another host, or a node id changed in the configuration, must not sign as someone else.
 */
export async function ensureNodeKeyPair(nodeId: string, files: NodeKeyFiles, bits = 2048): Promise<NodeKeyPair> {
  let keyPem = await readOptional(files.keyPath);
  let certPem = await readOptional(files.certPath);
  if (keyPem === null || certPem === null) {
    const made = createNodeIdentity(nodeId, { bits });
    keyPem = made.keyPem;
    certPem = made.certPem;
    await writeAtomic(files.keyPath, keyPem, 0o600);
    await writeAtomic(files.certPath, certPem, 0o644);
  }
  let certNode: string | null;
  try {
    certNode = certificateNodeId(certPem);
  } catch (err) {
    throw capstanError('ERR_CERTIFICATE', `${files.certPath} is not a readable certificate: ${(err as Error).message}`, { cause: err });
  }
  if (certNode !== nodeId) throw capstanError('ERR_CERTIFICATE', `${files.certPath} is not the certificate of node ${nodeId}`);
  // Found now rather than at the first signature: a key file replaced or damaged by hand.
  let matches: boolean;
  try {
    const spki = createPublicKey(createPrivateKey(keyPem)).export({ type: 'spki', format: 'der' });
    matches = spki.equals(new X509Certificate(certPem).publicKey.export({ type: 'spki', format: 'der' }));
  } catch (err) {
    throw capstanError('ERR_KEY', `${files.keyPath} is not a readable unencrypted private key`, { cause: err });
  }
  if (!matches) throw capstanError('ERR_KEY', `${files.keyPath} is not the key of the certificate ${files.certPath}`);
  return { ...files, keyPem, certPem };
}
