/**
 * The code a call throws, for table-driven tests of parsers that refuse input with coded errors
 * (tests compare codes, never messages).
 */

/** `fn`'s error code; `uncoded …` when it throws without one; undefined when it does not throw. */
export function thrownCode(fn: () => unknown): string | undefined {
  try {
    fn();
  } catch (err) {
    return (err as { code?: string }).code ?? `uncoded ${String(err)}`;
  }
  return undefined;
}
