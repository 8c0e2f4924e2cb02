/**
 * Which spooled files the ingest has just finished with, and who waits for one: the answer to an
 * agent's inventory waits (briefly) for its node to be registered, so that a node an enrollment
 * rule accepts gets its token, and its policy, in its first run.
 */
import type { SpoolKind } from '@capstan/shared/protocol';

/** Names remembered per kind: far more than uploads can be answered at once. */
export const MAX_REMEMBERED_NAMES = 4096;

export class SettledFiles {
  private readonly recent = new Map<SpoolKind, Set<string>>();
  private readonly waiting = new Map<string, Set<() => void>>();

  /** The ingest is done with `name` (stored, failed, or left for a retry). */
  settle(kind: SpoolKind, name: string): void {
    let names = this.recent.get(kind);
    if (!names) this.recent.set(kind, (names = new Set()));
    names.add(name);
    // A Set iterates in insertion order: the oldest name goes first.
    if (names.size > MAX_REMEMBERED_NAMES) names.delete(names.values().next().value as string);
    const key = `${kind}/${name}`;
    const wakers = this.waiting.get(key);
    if (!wakers) return;
    this.waiting.delete(key);
    for (const wake of wakers) wake();
  }

  /** Resolves true once `name` is settled (at once if it already was), false after `ms`. */
  wait(kind: SpoolKind, name: string, ms: number): Promise<boolean> {
    if (this.recent.get(kind)?.has(name)) return Promise.resolve(true);
    if (ms <= 0) return Promise.resolve(false);
    const key = `${kind}/${name}`;
    return new Promise((resolve) => {
      let wakers = this.waiting.get(key);
      if (!wakers) this.waiting.set(key, (wakers = new Set()));
      const wake = () => {
        clearTimeout(timer);
        resolve(true);
      };
      const timer = setTimeout(() => {
        wakers.delete(wake);
        if (wakers.size === 0 && this.waiting.get(key) === wakers) this.waiting.delete(key);
        resolve(false);
      }, ms);
      wakers.add(wake);
    });
  }
}
