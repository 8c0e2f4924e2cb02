/**
 * What the ingest tests start from: limits far above what they feed (a test that hits one does so
 * on purpose, with its own), and a fresh SQLite store in the test's directory.
 */
import { join } from 'node:path';
import { type Store } from '@capstan/server/store/index';
import { openRegistry } from '@capstan/server/registry/open';
import { programDir } from './programs.js';

export const INGEST_LIMITS = { maxDecompressedBytes: 1 << 20, maxReports: 1000, maxLineBytes: 65536 };

/** A store on `<dir>/db.sqlite`, closed at the end of the test; the directory holds the files to ingest. */
export async function ingestStore(t: { testdir: () => string; teardown: (fn: () => unknown) => void }): Promise<{ dir: string; store: Store }> {
  const dir = programDir(t);
  const store = await openRegistry({ sqlitePath: join(dir, 'db.sqlite') });
  t.teardown(() => store.close());
  return { dir, store };
}
