/**
 * capstan-sim against a relay slower than the schedule: the runs it cannot start within
 * --max-lag of their due time are counted as not sent, never sent late, so a fleet run that
 * falls behind still ends at its duration plus the lag instead of long after it.
 */
import { createServer } from 'node:http';
import { join, resolve } from 'node:path';
import t from 'tap';
import { ROOT, runProgram, runProgramToEnd, programDir } from '../helpers/programs.js';

const SIM = resolve(ROOT, 'bench/dist/sim/cli.js');

t.test('runs the simulator falls behind on are counted as not sent, and every other one is sent', async (t) => {
  const dir = programDir(t);
  // A relay that takes 300 ms to acknowledge each upload: the schedule (16 nodes, one run each
  // every second) asks for one every 62 ms, and at most one is in flight.
  const received: string[] = [];
  const relay = createServer((req, res) => {
    req.resume();
    req.on('end', () => {
      // The simulator also reads the relay's /metrics for its samples: only uploads count.
      if (req.method === 'PUT') received.push(req.url ?? '');
      setTimeout(() => res.writeHead(200, { 'content-type': 'application/json' }).end('{"ok":true}'), 300);
    });
  });
  await new Promise<void>((r) => relay.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => relay.close(() => r())));
  const port = (relay.address() as { port: number }).port;

  const started = performance.now();
  const r = await runProgramToEnd(SIM, [
    '--relay', `http://127.0.0.1:${port}`, '--enroll', 'none', '--nodes', '16', '--keys', '2', '--time-scale', '300',
    '--duration', '2s', '--reports', '10', '--sample', '500ms', '--max-in-flight', '1', '--max-lag', '100ms',
    '--cache-dir', join(dir, 'cache'), '--json',
  ], 120_000);
  const elapsed = performance.now() - started;
  t.equal(r.code, 0, 'exits 0', { stderr: r.stderr.slice(-3000) });
  const rep = JSON.parse(r.stdout) as { runs: { scheduled: number; acked: number; failed: number; skipped: number } };
  t.ok(rep.runs.scheduled >= 32, `every node runs twice in 2 s (${rep.runs.scheduled} scheduled)`);
  // At 300 ms an upload, one at a time, at most 2 s / 300 ms + 1 fit in the duration and the lag.
  t.ok(rep.runs.acked >= 1 && rep.runs.acked <= 8, `some sent (${rep.runs.acked})`);
  t.equal(rep.runs.failed, 0);
  t.equal(rep.runs.acked + rep.runs.skipped, rep.runs.scheduled, 'every scheduled run is either sent or counted as not sent');
  t.equal(received.length, rep.runs.acked, 'the relay got exactly the ones counted as sent');
  t.ok(received.every((u) => u.includes('/reports/')), 'all of them run logs');
  t.match(r.stdout, /"skipped":\d+/);
  t.comment(`the simulator ran ${Math.round(elapsed)} ms (including its identities)`);

  const bad = await runProgram(SIM, ['--max-lag', 'soon'], 30_000);
  t.equal(bad.code, 2, 'a malformed --max-lag is a configuration error');
  t.match(bad.stderr, /--max-lag/);
});
