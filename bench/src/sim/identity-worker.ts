/**
 * Worker thread for identities.ts: makes RSA keys and certifies them for node ids, a batch per
 * message, so generation uses every core instead of one. Certificates under a key this worker
 * has seen come from that key's template (cert-template.ts).
 */
import { generateKeyPairSync } from 'node:crypto';
import { parentPort } from 'node:worker_threads';
import { CertTemplate } from './cert-template.js';

type Job = { kind: 'key'; bits: number } | { kind: 'cert'; nodeId: string; keyPem: string };

const templates = new Map<string, CertTemplate>();

parentPort!.on('message', (jobs: Job[]) => {
  const out = jobs.map((job) => {
    if (job.kind === 'key') {
      const { privateKey } = generateKeyPairSync('rsa', { modulusLength: job.bits, publicExponent: 0x10001 });
      return privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
    }
    let t = templates.get(job.keyPem);
    if (!t) templates.set(job.keyPem, (t = new CertTemplate(job.keyPem)));
    return t.issue(job.nodeId);
  });
  parentPort!.postMessage(out);
});
