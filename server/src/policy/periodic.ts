/**
 * The generator's periodic pass (PolicyGenerator.every): `regenerate` every `intervalMs`, the
 * next one `intervalMs` after the previous one ended; stop() waits for a pass under way.
 */
import type { Logger } from '@capstan/shared/log';

export function periodically(regenerate: () => Promise<{ nodes: number; changed: number; ms: number }>, log: Logger, intervalMs: number): { stop(): Promise<void> } {
  let timer: NodeJS.Timeout | null = null;
  let running: Promise<unknown> = Promise.resolve();
  let stopped = false;
  const tick = () => {
    running = regenerate().then(
      (s) => s.changed > 0 && log.info({ nodes: s.nodes, changed: s.changed, ms: Math.round(s.ms) }, 'policies regenerated (periodic)'),
      (err: unknown) => log.warn({ err }, 'periodic policy regeneration failed'),
    ).finally(() => {
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
