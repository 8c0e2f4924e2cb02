/**
 * `capstan-server compact-runs`: converts runs stored before migration 14 to the node-day form, in
 * place, one transaction per batch (docs/capacity.md).
 */
import type { Command } from 'commander';
import { int } from '../admin-cli/kit.js';
import { flagsOf, withStore } from './common.js';

export function compactRunsCommand(program: Command): void {
  program.command('compact-runs').description('convert runs stored before migration 14 to the node-day form, in place (docs/capacity.md)')
    .option('--batch <n>', 'runs per transaction', int('--batch'), 500)
    .action(async (_o: unknown, cmd: Command) => {
      const flags = flagsOf<{ batch: number }>(cmd);
      // Resumable: the store remembers the last run looked at, so an interrupted run goes on from there.
      await withStore(flags, async (store) => {
        let done = 0;
        let skipped = 0;
        for (;;) {
          const r = await store.compactRuns(flags.batch);
          done += r.converted;
          skipped += r.skipped;
          process.stdout.write(`converted ${done} runs, left ${skipped} as they were; through run id ${r.through_id} of ${r.max_id}\n`);
          if (r.done) break;
        }
      });
    });
}
