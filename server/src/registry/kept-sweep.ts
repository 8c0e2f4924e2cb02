/**
 * Keeps the fleet compliance counters' time thresholds near now (store/compliance/kept.ts):
 * every `compliance.kept_sweep_interval`, the nodes that became silent or stopped applying since
 * the last sweep move between counters, and on PostgreSQL the triggers' logs are folded in.
 * Readers are exact without it; it keeps what they correct for small (a few nodes per sweep
 * instead of every node that changed state since start). Once at start, then every interval.
 */
import type { Logger } from '@capstan/shared/log';
import { complianceClock, type ComplianceSettings } from './compliance.js';
import type { Store } from '../store/store.js';

export interface KeptSweeperOptions {
  store: Pick<Store, 'sweepCompliance'>;
  settings: ComplianceSettings;
  intervalMs: number;
  /** Most nodes one step of a sweep moves (`[compliance] kept_sweep_step`). */
  step?: number;
  log: Logger;
  now?: () => Date;
}

export class KeptSweeper {
  private timer: NodeJS.Timeout | null = null;
  private running: Promise<void> = Promise.resolve();
  private stopped = false;

  constructor(private readonly o: KeptSweeperOptions) {}

  start(): void {
    if (this.o.intervalMs <= 0 || this.timer || this.stopped) return;
    this.running = this.once();
    this.timer = setInterval(() => {
      this.running = this.running.then(() => this.once());
    }, this.o.intervalMs);
    this.timer.unref();
  }

  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.running;
  }

  /** One sweep; a failure is logged and the next one tries again (readers stay exact meanwhile). */
  async once(): Promise<void> {
    if (this.stopped) return;
    try {
      const s = await this.o.store.sweepCompliance(complianceClock(this.o.settings, (this.o.now ?? (() => new Date()))()), this.o.step);
      if (!s.done) this.o.log.info({ checked: s.checked, steps: s.steps }, 'compliance counters not swept to now: writers held them past the lock timeout, or the steps ran out; next time');
      else if (s.checked > 0) this.o.log.debug({ checked: s.checked, folded: s.folded, steps: s.steps, longest_step_ms: s.longest_step_ms }, 'compliance counters swept');
    } catch (err) {
      this.o.log.warn({ err }, 'sweeping the compliance counters failed');
    }
  }
}
