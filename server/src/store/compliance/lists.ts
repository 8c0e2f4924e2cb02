/**
 * Expectation lists by digest (migration 30), parsed once: a list never changes under its name,
 * so what is kept here is never stale, only bounded. A run is judged against its node's list; a
 * fleet's nodes share a handful of them, so the JSON is parsed once per list, not once per run.
 */
import type { ExpectedComponent } from './types.js';

/** Parsed lists kept, least recently used dropped first. */
export const KEPT_LISTS = 256;

export class ExpectationListCache {
  private readonly kept = new Map<string, readonly ExpectedComponent[]>();

  constructor(private readonly max = KEPT_LISTS) {}

  /** Is the list named `digest` kept? */
  has(digest: string): boolean {
    return this.kept.has(digest);
  }

  /** The list named `digest`, read with `read` (its JSON, undefined when absent) when not kept. */
  get(digest: string, read: () => string | undefined): ExpectedComponent[] | null {
    let list = this.kept.get(digest);
    if (list) {
      this.kept.delete(digest);
    } else {
      const json = read();
      if (json === undefined) return null;
      list = Object.freeze((JSON.parse(json) as ExpectedComponent[]).map((c) => Object.freeze(c)));
      if (this.kept.size >= this.max) this.kept.delete(this.kept.keys().next().value!);
    }
    this.kept.set(digest, list);
    return list as ExpectedComponent[];
  }
}
