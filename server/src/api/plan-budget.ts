/**
 * What plans may cost the server (POST /api/1/policy/plan): a plan reads the whole policy and
 * renders every node a change reaches, so it is the dearest read there is, whatever the caller's
 * role. At most `[policy] plan_concurrency` plans per caller and `plan_concurrency_total` in all
 * run at once (more: 429 ERR_PLAN_BUSY); each has `plan_time_limit` (past it: 503
 * ERR_PLAN_TIMEOUT, answered when it passes, and the plan's loops stop at their next check) and
 * `plan_memory_limit` (bytes it may hold, counted as it goes: past it 413 ERR_PLAN_TOO_LARGE, and
 * its loops stop there; policy/plan-memory.ts).
 * A plan's place is given back when its work has stopped, not when it was answered: a timed-out
 * plan still computing keeps it.
 */
import { capstanError } from '@capstan/shared/errors';
import { Deadline } from '../policy/deadline.js';
import { PlanMemory, planBounds, type PlanBounds } from '../policy/plan-memory.js';

export interface PlanLimits {
  timeLimitMs: number;
  perCaller: number;
  total: number;
  /** Bytes one plan may hold. */
  memoryBytes: number;
}

export class PlanBudget {
  private readonly byCaller = new Map<string, number>();
  private running = 0;

  constructor(readonly limits: PlanLimits) {}

  async run<T>(caller: string, work: (bounds: PlanBounds) => Promise<T>): Promise<T> {
    const mine = this.byCaller.get(caller) ?? 0;
    if (mine >= this.limits.perCaller) {
      throw capstanError('ERR_PLAN_BUSY', `${mine} plan(s) of yours are running ([policy] plan_concurrency ${this.limits.perCaller}): retry when one has answered`);
    }
    if (this.running >= this.limits.total) {
      throw capstanError('ERR_PLAN_BUSY', `${this.running} plans are running on this server ([policy] plan_concurrency_total ${this.limits.total}): retry shortly`);
    }
    this.byCaller.set(caller, mine + 1);
    this.running++;
    const deadline = new Deadline(this.limits.timeLimitMs);
    let timer: NodeJS.Timeout | undefined;
    const done = (async () => work(planBounds(deadline, new PlanMemory(this.limits.memoryBytes))))();
    void done.catch(() => undefined).finally(() => {
      this.running--;
      const left = (this.byCaller.get(caller) ?? 1) - 1;
      if (left > 0) this.byCaller.set(caller, left);
      else this.byCaller.delete(caller);
    });
    const late = new Promise<never>((_, reject) => {
      timer = setTimeout(() => reject(deadline.error()), this.limits.timeLimitMs);
    });
    try {
      return await Promise.race([done, late]);
    } finally {
      clearTimeout(timer);
    }
  }
}
