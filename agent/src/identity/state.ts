/**
 * The node's identity on disk: a UUID node id, and the node key (0600) and self-signed
 * certificate with subject UID=<node-id> that shared/identity/state.ts makes once on first run
 * and reuses ever after (relays keep theirs the same way).
 */
import { randomUUID } from 'node:crypto';
import { join } from 'node:path';
import { makeDir } from '@capstan/shared/dir';
import { capstanError } from '@capstan/shared/errors';
import { ensureNodeKeyPair, readOptional, writeAtomic } from '@capstan/shared/identity/state';
import { isValidNodeId } from '@capstan/shared/runlog/name';

export { writeAtomic };

export interface AgentIdentity {
  nodeId: string;
  keyPem: string;
  certPem: string;
  keyPath: string;
  certPath: string;
}

export async function ensureIdentity(stateDir: string, keyBits: number): Promise<AgentIdentity> {
  await makeDir(stateDir, 0o700);
  const idPath = join(stateDir, 'node-id');
  let nodeId = (await readOptional(idPath))?.trim() ?? null;
  if (nodeId !== null && !isValidNodeId(nodeId)) throw capstanError('ERR_CONFIG', `${idPath} does not hold a valid node id`);
  if (nodeId === null) {
    nodeId = randomUUID();
    await writeAtomic(idPath, `${nodeId}\n`, 0o644);
  }
  const pair = await ensureNodeKeyPair(nodeId, { keyPath: join(stateDir, 'agent.key'), certPath: join(stateDir, 'agent.cert') }, keyBits);
  return { nodeId, keyPem: pair.keyPem, certPem: pair.certPem, keyPath: pair.keyPath, certPath: pair.certPath };
}
