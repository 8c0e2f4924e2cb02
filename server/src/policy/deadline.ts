/**
 * A point in time past which a long read gives up: checked in its loops, so that the work stops
 * soon after the answer has been given (a plan past `[policy] plan_time_limit`, ERR_PLAN_TIMEOUT).
 */
import { capstanError } from '@capstan/shared/errors';

export class Deadline {
  readonly at: number;
  /** Checks made; the clock is read every `every` of them (Date.now is cheap, not free). */
  private n = 0;

  constructor(readonly ms: number, private readonly what = 'the plan', private readonly every = 64) {
    this.at = Date.now() + ms;
  }

  get passed(): boolean {
    return Date.now() > this.at;
  }

  error() {
    return capstanError('ERR_PLAN_TIMEOUT', `${this.what} ran longer than [policy] plan_time_limit (${this.ms} ms): stopped, nothing changed`);
  }

  /** Throws ERR_PLAN_TIMEOUT once the deadline has passed. */
  check(): void {
    if (++this.n % this.every === 0 && this.passed) throw this.error();
  }

  /** The same, reading the clock now (between steps that each take a while). */
  checkNow(): void {
    if (this.passed) throw this.error();
  }
}

/** A deadline that never passes: callers that set none. */
export const NO_DEADLINE = { check(): void {}, checkNow(): void {} };

export type DeadlineCheck = Pick<Deadline, 'check' | 'checkNow'>;
