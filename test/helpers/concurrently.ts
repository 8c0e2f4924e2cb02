/**
 * Independent program runs at once, a few at a time: each `node` start of a program costs about
 * a second of CPU, mostly loading its modules, so a test that runs a dozen of them one after the
 * other waits on one core while the other idles. Results come back in the order of `items`, so the
 * test asserts them in a fixed order whatever finished first.
 */
export async function concurrently<I, R>(items: readonly I[], fn: (item: I, index: number) => Promise<R>, limit = 4): Promise<R[]> {
  const results = new Array<R>(items.length);
  let next = 0;
  const worker = async (): Promise<void> => {
    while (next < items.length) {
      const i = next++;
      results[i] = await fn(items[i]!, i);
    }
  };
  await Promise.all(Array.from({ length: Math.min(limit, items.length) }, worker));
  return results;
}

/** Each of `runs` started at once (a few at a time); their results in the same order. */
export function all<R>(runs: ReadonlyArray<() => Promise<R>>, limit = 4): Promise<R[]> {
  return concurrently(runs, (run) => run(), limit);
}
