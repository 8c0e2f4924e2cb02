/**
 * Work repeated at an interval, the next run `intervalMs` after the previous one ended (never two
 * at once); stop() waits for a run under way. The generator's periodic pass
 * (PolicyGenerator.every) and the shared-folder templates' check (template-watch.ts) use it.
 */
import type { Logger } from '@capstan/shared/log';

export function repeatAfter(work: () => Promise<unknown>, intervalMs: number): { stop(): Promise<void> } {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<unknown> = Promise.resolve();
  let stopped = false;
  const tick = () => {
    running = work().catch(() => undefined).finally(() => {
      if (!stopped) timer = setTimeout(tick, intervalMs);
    });
  };
  timer = setTimeout(tick, intervalMs);
  return {
    stop: async () => {
      stopped = true;
      if (timer) clearTimeout(timer);
      await running;
    },
  };
}

/** `regenerate` every `intervalMs`, logging the passes that changed bundles and the failures. */
export function periodically(regenerate: () => Promise<{ nodes: number; changed: number; ms: number }>, log: Logger, intervalMs: number): { stop(): Promise<void> } {
  return repeatAfter(() => regenerate().then(
    (s) => s.changed > 0 && log.info({ nodes: s.nodes, changed: s.changed, ms: Math.round(s.ms) }, 'policies regenerated (periodic)'),
    (err: unknown) => log.warn({ err }, 'periodic policy regeneration failed'),
  ), intervalMs);
}
