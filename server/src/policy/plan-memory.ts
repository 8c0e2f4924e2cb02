/**
 * What a plan may hold (`[policy] plan_memory_limit`): the bytes of the text it keeps while it
 * runs, counted as it goes — the ids of the nodes it reaches and their groups, each distinct
 * directive list (as JSON), a batch's node data (host names, certificates, properties,
 * inventories), each node's rendered directives and properties while its impact is made, and
 * the results it keeps for the answer (each listed node's impact as JSON, the nodes a
 * conditioned directive reaches). Past the limit the plan stops at once: 413 ERR_PLAN_TOO_LARGE.
 * The bytes are UTF-8 bytes of the text; the heap holding it is a few times more (docs/capacity.md).
 */
import { capstanError } from '@capstan/shared/errors';
import type { DeadlineCheck } from './deadline.js';

export class PlanMemory {
  /** Bytes held now, and at most so far. */
  held = 0;
  peak = 0;

  constructor(readonly limit: number) {}

  /** `bytes` more are held; throws ERR_PLAN_TOO_LARGE when that is over the limit. */
  charge(bytes: number, what: string): void {
    this.held += bytes;
    if (this.held > this.peak) this.peak = this.held;
    if (this.held > this.limit) {
      throw capstanError('ERR_PLAN_TOO_LARGE',
        `the plan would hold more than [policy] plan_memory_limit (${this.limit} bytes) of node data, rendered policies and results (reached at ${what}): stopped, nothing changed; plan fewer objects at once, with a smaller max_nodes, or raise the limit`);
    }
  }

  /** `bytes` charged before are no longer held. */
  release(bytes: number): void {
    this.held -= bytes;
  }
}

/** A plan's bounds: its deadline (deadline.ts) and its memory. */
export type PlanBounds = DeadlineCheck & Pick<PlanMemory, 'charge' | 'release'>;

/** No bound: callers that set none (a change request's diff of one node). */
export const UNBOUNDED: PlanBounds = { check(): void {}, checkNow(): void {}, charge(): void {}, release(): void {} };

/** A deadline and a memory bound as one. */
export function planBounds(deadline: DeadlineCheck, memory: PlanMemory): PlanBounds {
  return {
    check: () => deadline.check(),
    checkNow: () => deadline.checkNow(),
    charge: (bytes, what) => memory.charge(bytes, what),
    release: (bytes) => memory.release(bytes),
  };
}

/** UTF-8 bytes of a text (undefined and null: none). */
export function textBytes(s: string | null | undefined): number {
  return s ? Buffer.byteLength(s) : 0;
}

/** UTF-8 bytes of a value as JSON. */
export function jsonBytes(v: unknown): number {
  return v === undefined ? 0 : Buffer.byteLength(JSON.stringify(v));
}
