/**
 * Worker thread for prepare.ts: builds, signs and compresses run logs and inventories, a batch
 * per message. The bytes go back as transferred buffers (no copy).
 */
import { parentPort } from 'node:worker_threads';
import { nodeProfile, signedInventory, signedRunLog, type ReportMix } from './runlog.js';
import type { SimIdentity } from './identities.js';

export type SignJob =
  | { kind: 'run'; id: SimIdentity; startedAtMs: number; run: number; reports: number; mix: ReportMix }
  | { kind: 'inventory'; id: SimIdentity; atMs: number; policyServer: string };

parentPort!.on('message', (jobs: SignJob[]) => {
  const out = jobs.map((j) => {
    const f = j.kind === 'run'
      ? signedRunLog(j.id, nodeProfile(j.id.nodeId, j.reports, j.mix), new Date(j.startedAtMs), j.run, j.mix)
      : signedInventory(j.id, j.policyServer, new Date(j.atMs));
    // A standalone ArrayBuffer, so it can be transferred rather than copied.
    const ab = new ArrayBuffer(f.body.length);
    new Uint8Array(ab).set(f.body);
    return { name: f.name, body: ab };
  });
  parentPort!.postMessage(out, out.map((o) => o.body));
});
