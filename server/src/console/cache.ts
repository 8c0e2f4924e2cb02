/**
 * Fleet-wide aggregates that take a few hundred milliseconds over 100,000 nodes (compliance per
 * rule, per directive, per group), answered from a recent copy when the caller allows it with
 * `max_age=<seconds>` (the console does; the answer then says `as_of`). Without it every answer
 * is computed at the moment of the request, as before. One computation at a time per key: a
 * dozen admins opening the dashboard together cost one query. A copy past half its allowed age
 * is refreshed in the background when it is served, so a console in use keeps finding it warm.
 */
export interface Cached<T> {
  value: T;
  /** When the copy was computed, ISO 8601. */
  as_of: string;
}

interface Entry {
  at: number;
  value: Promise<unknown>;
}

/** The largest max_age a request may ask for, seconds. */
export const MAX_AGE_LIMIT_S = 3600;

export class AggregateCache {
  private readonly entries = new Map<string, Entry>();
  private readonly refreshing = new Set<string>();

  constructor(private readonly now: () => number = Date.now) {}

  async get<T>(key: string, maxAgeMs: number, compute: () => Promise<T>): Promise<Cached<T>> {
    const e = this.entries.get(key);
    const now = this.now();
    if (e && now - e.at <= maxAgeMs) {
      if (now - e.at > maxAgeMs / 2) this.refresh(key, compute);
      return { value: (await e.value) as T, as_of: new Date(e.at).toISOString() };
    }
    return this.compute(key, compute);
  }

  private compute<T>(key: string, compute: () => Promise<T>): Promise<Cached<T>> {
    const at = this.now();
    const value = compute();
    const entry: Entry = { at, value };
    this.entries.set(key, entry);
    // A failure is not kept: the next request tries again.
    value.catch(() => {
      if (this.entries.get(key) === entry) this.entries.delete(key);
    });
    return value.then((v) => ({ value: v, as_of: new Date(at).toISOString() }));
  }

  private refresh<T>(key: string, compute: () => Promise<T>): void {
    if (this.refreshing.has(key)) return;
    this.refreshing.add(key);
    const at = this.now();
    compute().then(
      (v) => this.entries.set(key, { at, value: Promise.resolve(v) }),
      () => undefined,
    ).finally(() => this.refreshing.delete(key));
  }
}
