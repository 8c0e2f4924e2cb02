/**
 * Worker thread for identities.ts: makes RSA keys and certifies them for node ids, a batch per
 * message, so generation uses every core instead of one.
 */
import { generateKeyPairSync } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { createNodeIdentity } from '@capstan/shared/smime/identity';

type Job = { kind: 'key'; bits: number } | { kind: 'cert'; nodeId: string; keyPem: string };

parentPort!.on('message', (jobs: Job[]) => {
  const out = jobs.map((job) => {
    if (job.kind === 'key') {
      const { privateKey } = generateKeyPairSync('rsa', { modulusLength: job.bits, publicExponent: 0x10001 });
      return privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    }
    return createNodeIdentity(job.nodeId, { keyPem: job.keyPem }).certPem;
  });
  parentPort!.postMessage(out);
});
