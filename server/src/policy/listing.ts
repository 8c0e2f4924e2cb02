import type { NodeFilter, Store } from '../store/store.js';

/**
 * Node listings for one generation. The accepted nodes are listed at most once, however many
 * groups and steps need them (a 100,000-node generation listed them four times).
 */
export class Listing {
  private all: Promise<Set<string>> | null = null;

  constructor(private readonly store: Store) {}

  accepted(): Promise<Set<string>> {
    this.all ??= this.store.listNodeIds([{ key: 'accepted', values: ['accepted'] }]).then((ids) => new Set(ids));
    return this.all;
  }

  /** Accepted nodes matching `filters`; acceptance is checked here, not merged into the filters. */
  async matching(filters: NodeFilter[], each: (id: string) => void): Promise<void> {
    if (!filters.some((f) => f.key === 'accepted')) {
      for (const id of await this.store.listNodeIds([...filters, { key: 'accepted', values: ['accepted'] }])) each(id);
      return;
    }
    const accepted = await this.accepted();
    // "Every accepted node" (the usual all-nodes group) is the listing itself.
    if (filters.length === 1 && !filters[0]!.exclude && filters[0]!.values.includes('accepted')) {
      accepted.forEach((id) => each(id));
      return;
    }
    for (const id of await this.store.listNodeIds(filters)) if (accepted.has(id)) each(id);
  }
}
