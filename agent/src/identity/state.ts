/**
 * The node's identity on disk: a UUID node id, an RSA key (0600) and a self-signed certificate
 * with subject UID=<node-id>, made once on first run and reused ever after.
 */
import { randomUUID } from 'node:crypto';
import { mkdir, readFile, rename, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError, certificateNodeId, createNodeIdentity, isValidNodeId } from '@capstan/shared/agent';

export interface AgentIdentity {
  nodeId: string;
  keyPem: string;
  certPem: string;
  keyPath: string;
  certPath: string;
}

/** Write a file so that a crash leaves either the old content or the new, never half. */
export async function writeAtomic(path: string, data: string | Buffer, mode = 0o600): Promise<void> {
  const tmp = `${path}.${process.pid}.tmp`;
  await writeFile(tmp, data, { mode });
  await rename(tmp, path);
}

async function readOptional(path: string): Promise<string | null> {
  try {
    return await readFile(path, 'utf8');
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code === 'ENOENT') return null;
    throw err;
  }
}

export async function ensureIdentity(stateDir: string, keyBits: number): Promise<AgentIdentity> {
  await mkdir(stateDir, { recursive: true, mode: 0o700 });
  const idPath = join(stateDir, 'node-id');
  const keyPath = join(stateDir, 'agent.key');
  const certPath = join(stateDir, 'agent.cert');
  let nodeId = (await readOptional(idPath))?.trim() ?? null;
  if (nodeId !== null && !isValidNodeId(nodeId)) throw capstanError('ERR_CONFIG', `${idPath} does not hold a valid node id`);
  if (nodeId === null) {
    nodeId = randomUUID();
    await writeAtomic(idPath, `${nodeId}\n`, 0o644);
  }
  let keyPem = await readOptional(keyPath);
  let certPem = await readOptional(certPath);
  if (keyPem === null || certPem === null) {
    const made = createNodeIdentity(nodeId, { bits: keyBits });
    keyPem = made.keyPem;
    certPem = made.certPem;
    await writeAtomic(keyPath, keyPem, 0o600);
    await writeAtomic(certPath, certPem, 0o644);
  }
  if (certificateNodeId(certPem) !== nodeId) {
    throw capstanError('ERR_CERTIFICATE', `${certPath} is not the certificate of node ${nodeId}`);
  }
  return { nodeId, keyPem, certPem, keyPath, certPath };
}
