/**
 * Runs the managers a host is assigned, each at its own interval, and hands each poll's outcome
 * to `report` (the server applies it to the registry; a relay posts it upstream). The list of
 * managers is refreshed every `refreshMs`, so a manager created, changed or deleted upstream is
 * picked up without a restart. One poll per manager at a time; a timer per manager, no loop.
 */
import type { Logger } from '@capstan/shared/log';
import { discover, type DriverOptions } from './drivers.js';
import type { DiscoveredInstance, ManagerSpec } from './types.js';

export type PollOutcome = { instances: DiscoveredInstance[] } | { error: string };

export interface PollerOptions extends DriverOptions {
  managers: () => Promise<ManagerSpec[]>;
  report: (spec: ManagerSpec, outcome: PollOutcome, at: Date) => Promise<void>;
  refreshMs: number;
  log?: Logger;
  now?: () => Date;
}

interface Slot {
  spec: ManagerSpec;
  key: string;
  timer: NodeJS.Timeout | null;
  running: Promise<void> | null;
}

export class Poller {
  private readonly slots = new Map<string, Slot>();
  private refreshTimer: NodeJS.Timeout | null = null;
  private refreshing: Promise<void> | null = null;
  private stopped = false;
  /** Aborts the polls in flight at stop, so a slow cloud never holds a shutdown. */
  private readonly abort = new AbortController();

  constructor(private readonly o: PollerOptions) {}

  start(): void {
    void this.refresh().finally(() => this.scheduleRefresh());
  }

  private scheduleRefresh(): void {
    if (this.stopped) return;
    this.refreshTimer = setTimeout(() => void this.refresh().finally(() => this.scheduleRefresh()), this.o.refreshMs);
    this.refreshTimer.unref();
  }

  /** Fetch the assigned managers; start new ones at once, restart changed ones, drop removed ones. */
  refresh(): Promise<void> {
    this.refreshing ??= (async () => {
      try {
        const specs = await this.o.managers();
        const ids = new Set(specs.map((s) => s.id));
        for (const [id, slot] of this.slots) {
          if (!ids.has(id)) {
            if (slot.timer) clearTimeout(slot.timer);
            this.slots.delete(id);
          }
        }
        for (const spec of specs) {
          const key = JSON.stringify(spec);
          const slot = this.slots.get(spec.id);
          if (slot && slot.key === key) continue;
          if (slot?.timer) clearTimeout(slot.timer);
          const fresh: Slot = { spec, key, timer: null, running: null };
          this.slots.set(spec.id, fresh);
          if (!this.stopped) this.schedule(fresh, 0);
        }
      } catch (err) {
        this.o.log?.warn({ err }, 'cannot fetch the managers to poll; keeping the current ones');
      } finally {
        this.refreshing = null;
      }
    })();
    return this.refreshing;
  }

  private schedule(slot: Slot, delay: number): void {
    slot.timer = setTimeout(() => {
      void this.pollNow(slot.spec.id).finally(() => {
        if (!this.stopped && this.slots.get(slot.spec.id) === slot) this.schedule(slot, slot.spec.poll_interval_ms);
      });
    }, delay);
    slot.timer.unref();
  }

  /** Poll one manager now (or join its poll in flight). Unknown ids resolve at once. */
  pollNow(id: string): Promise<void> {
    const slot = this.slots.get(id);
    if (!slot) return Promise.resolve();
    slot.running ??= (async () => {
      const at = (this.o.now ?? (() => new Date()))();
      let outcome: PollOutcome;
      try {
        outcome = { instances: await discover(slot.spec, this.o, this.abort.signal) };
      } catch (err) {
        outcome = { error: (err as Error).message };
        this.o.log?.warn({ manager: slot.spec.id, error: outcome.error }, 'discovery poll failed');
      }
      if (this.stopped) return;
      try {
        await this.o.report(slot.spec, outcome, at);
      } catch (err) {
        this.o.log?.warn({ err, manager: slot.spec.id }, 'cannot report a discovery poll; next poll will');
      }
    })().finally(() => {
      slot.running = null;
    });
    return slot.running;
  }

  managerIds(): string[] {
    return [...this.slots.keys()];
  }

  async stop(): Promise<void> {
    this.stopped = true;
    this.abort.abort();
    if (this.refreshTimer) clearTimeout(this.refreshTimer);
    for (const s of this.slots.values()) if (s.timer) clearTimeout(s.timer);
    await this.refreshing;
    await Promise.all([...this.slots.values()].map((s) => s.running));
  }
}
