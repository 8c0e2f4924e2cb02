/**
 * Spread CPU-bound jobs (key generation, certificates, S/MIME signing) over worker threads, a
 * batch per message, results in job order. Each worker module answers a batch of jobs with an
 * array of results of the same length.
 */
import { Worker } from 'node:worker_threads';

export async function runInWorkers<J, R>(
  worker: URL, jobs: readonly J[], workers: number, onDone: (done: number) => void = () => undefined,
): Promise<R[]> {
  if (jobs.length === 0) return [];
  const out = new Array<R>(jobs.length);
  const n = Math.max(1, Math.min(workers, jobs.length));
  // Batches keep message overhead small while still spreading work evenly.
  const batch = Math.max(1, Math.min(64, Math.ceil(jobs.length / (n * 4))));
  let next = 0;
  let done = 0;
  await Promise.all(
    Array.from({ length: n }, () =>
      new Promise<void>((resolve, reject) => {
        const w = new Worker(worker);
        let start = 0;
        let finished = false;
        const feed = () => {
          if (next >= jobs.length) {
            finished = true;
            void w.terminate().then(() => resolve());
            return;
          }
          start = next;
          next = Math.min(jobs.length, next + batch);
          w.postMessage(jobs.slice(start, next));
        };
        w.on('message', (results: R[]) => {
          for (let k = 0; k < results.length; k++) out[start + k] = results[k]!;
          done += results.length;
          onDone(done);
          feed();
        });
        w.once('error', reject);
        w.once('exit', (code) => {
          if (!finished) reject(new Error(`worker exited with ${code} before its jobs were done`));
        });
        feed();
      })),
  );
  return out;
}
