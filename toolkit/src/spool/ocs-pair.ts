/**
 * A RUDDER agent sends an OCS inventory as two uploads: `<name>.ocs.gz` (or `.ocs`), then
 * `<name>.ocs.sign`, each its own PUT. They arrive as two spool files and mean something only
 * together, so relayd forwards them, and the server verifies them, as one pair: the inventory's
 * handler takes both once both are there; the signature's handler only waits for it.
 *
 * A half that stays alone longer than the pair wait (`ocs_pair_wait`) is refused for good
 * (ERR_OCS_UNPAIRED, to failed/); until then it waits as a transient error marked `waiting`,
 * which the processor retries quietly (an expected state, not a failure).
 *
 * Anyone can upload under a RUDDER agent's names, so junk may be spooled first under either
 * half's name. The spool never replaces it (place.ts): a different half arriving under a taken
 * name is kept beside it as a candidate, `<name>~<8 hex of its sha256>` (candidateName), and the
 * root tries each signature on each inventory, taking the pair that verifies.
 */
import { readdir, stat } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { ocsPairNames } from '@capstan/shared/runlog/name';

export interface OcsPair {
  /** The inventory file's spooled name (the one whose handler runs; maybe a candidate). */
  data: string;
  /** Its `.sign` files in the same directory: the upload's name and its candidates, in name order. */
  signs: string[];
  /** Whether other inventory files (candidates of it, or its .ocs/.ocs.gz twin) wait beside this one. */
  otherData: boolean;
}

/** A half waiting for the other: retried quietly by the processor, never logged as a failure. */
function waiting(message: string, partner?: string) {
  return capstanError('ERR_OCS_UNPAIRED', message, { transient: true, details: { waiting: true, ...(partner && { partner }) } });
}

export function isWaiting(err: unknown): boolean {
  return (err as { details?: { waiting?: unknown } } | undefined)?.details?.waiting === true;
}

async function mtime(path: string): Promise<number | null> {
  return (await stat(path).catch(() => null))?.mtimeMs ?? null;
}

/**
 * For a spooled OCS upload `name` in `dir` (an upload's name or a candidate's, see candidateName):
 * the pair when this is the inventory and at least one signature is there (the caller tries them,
 * then removes what was used). Throws a waiting error while the other half may still come (for a
 * `.sign` whose inventory is there, `prompt` is called with each inventory file so that its
 * handler runs now rather than at its next retry), ERR_OCS_UNPAIRED once `waitMs` has passed
 * since this half arrived. A `.sign` with no inventory beside it gives `'alone'` when `loneSign`
 * says so (a relay sends it up: its inventory may be waiting there), else waits. Null for a name
 * that is not an OCS upload.
 */
export async function ocsPairReady(
  dir: string, name: string, waitMs: number, prompt?: (name: string) => void, now = Date.now(), loneSign: 'wait' | 'alone' = 'wait',
): Promise<OcsPair | 'alone' | null> {
  const names = ocsPairNames(uploadNameOf(name));
  if (!names) return null;
  const own = await mtime(join(dir, name));
  if (own === null) {
    // Gone: its pair's handler took it. ENOENT tells the processor there is nothing left to do.
    throw Object.assign(new Error(`${name} is gone`), { code: 'ENOENT' });
  }
  const tooOld = now - own > waitMs;
  const datas = (await Promise.all(names.data.map((d) => withCandidates(dir, d)))).flat();
  if (names.isSign) {
    if (datas.length > 0) {
      for (const data of datas) prompt?.(data);
      throw waiting(`signature ${name} goes with ${datas.join(', ')}`, datas[0]);
    }
    if (loneSign === 'alone') return 'alone';
    if (tooOld) throw capstanError('ERR_OCS_UNPAIRED', `signature ${name} came without its inventory (${names.data[0]}) within ocs_pair_wait`);
    throw waiting(`signature ${name} waits for its inventory`);
  }
  const signs = await withCandidates(dir, names.sign);
  if (signs.length > 0) return { data: name, signs, otherData: datas.some((d) => d !== name) };
  if (tooOld) throw capstanError('ERR_OCS_UNPAIRED', `inventory ${name} came without its signature (${names.sign}) within ocs_pair_wait`);
  throw waiting(`inventory ${name} waits for its signature ${names.sign}`);
}

/** Whether `name` in `dir` arrived more than `waitMs` ago (an OCS half no longer worth waiting for). */
export async function olderThan(dir: string, name: string, waitMs: number, now = Date.now()): Promise<boolean> {
  const t = await mtime(join(dir, name));
  return t !== null && now - t > waitMs;
}

export { waiting as ocsWaiting };

/** Candidates kept per OCS half name (beside the first), at most: past them, a conflict (409). */
export const MAX_OCS_CANDIDATES = 4;

/** `<name>~<8 hex>`: a candidate for an OCS half, named for its bytes (re-sending it is idempotent). */
const CANDIDATE = /~[0-9a-f]{8}$/;

/** The upload name a spooled file stands for: a candidate's name without its `~<8 hex>`. */
export function uploadNameOf(name: string): string {
  if (!CANDIDATE.test(name)) return name;
  const base = name.slice(0, -9);
  return ocsPairNames(base) ? base : name;
}

/**
 * Where the spool keeps an OCS half that arrives under a name already holding different bytes:
 * beside it, as a candidate (this path), so that junk raced ahead of a RUDDER agent's inventory or `.sign`
 * cannot take the genuine half's place (the root pairs candidates by verifying them). Undefined
 * for any other file, or when the name has MAX_OCS_CANDIDATES already (then a conflict).
 */
export async function candidateName(kind: string, dir: string, name: string, sha256: string): Promise<string | undefined> {
  if (kind !== 'inventories' || !ocsPairNames(name)) return undefined;
  const candidate = `${name}~${sha256.slice(0, 8)}`;
  // Only looked at when the name is taken: a plain upload costs nothing more.
  if ((await mtime(join(dir, name))) === null) return join(dir, candidate);
  const existing = (await withCandidates(dir, name)).filter((n) => n !== name);
  if (!existing.includes(candidate) && existing.length >= MAX_OCS_CANDIDATES) return undefined;
  // Known before its processor is told of it, so that its partner's handler finds it at once.
  indexes.get(resolve(dir))?.note(candidate);
  return join(dir, candidate);
}

/** Every spooled file standing for upload `name` in `dir`: the name itself and its candidates. */
export async function withCandidates(dir: string, name: string): Promise<string[]> {
  const index = indexes.get(resolve(dir));
  if (!index || index.overflowed) {
    const all = await readdir(dir).catch(() => [] as string[]);
    return all.filter((n) => n === name || (n.startsWith(`${name}~`) && CANDIDATE.test(n))).sort();
  }
  const files = [name, ...(await index.of(name))];
  const present = await Promise.all(files.map(async (f) => (await mtime(join(dir, f))) !== null));
  const found: string[] = [];
  files.forEach((f, i) => {
    if (present[i]) found.push(f);
    else if (f !== name) index.forget(f);
  });
  return found.sort();
}

/** Candidates an index holds at most; past it, the directory is listed again at each lookup. */
export const MAX_INDEXED_CANDIDATES = 65_536;

/**
 * The candidates in one spool directory, by the upload name they stand for, so that pairing an
 * upload costs a stat or two rather than a listing of a directory that may hold 100,000 files
 * (at a second-level relay with a backlog, listing 75,000 names took 55 ms, and pairing listed
 * three times per inventory). Complete because the directory's processor tells it of every file
 * it is offered (every file in a watched directory is, whichever process wrote it), after one
 * listing at first use; a file it names that is gone is dropped at lookup.
 */
class CandidateIndex {
  private readonly byUpload = new Map<string, Set<string>>();
  private count = 0;
  private loading: Promise<void> | null = null;
  overflowed = false;
  watchers = 0;

  constructor(private readonly dir: string) {}

  /** A file now in the directory: kept when it is a candidate. */
  note(file: string): void {
    if (this.overflowed || !CANDIDATE.test(file)) return;
    const upload = uploadNameOf(file);
    if (upload === file) return;
    let set = this.byUpload.get(upload);
    if (!set) this.byUpload.set(upload, (set = new Set()));
    if (set.has(file)) return;
    set.add(file);
    if (++this.count > MAX_INDEXED_CANDIDATES) {
      // Junk in such numbers: stop keeping it, and list as before.
      this.overflowed = true;
      this.byUpload.clear();
      this.count = 0;
    }
  }

  forget(file: string): void {
    const upload = uploadNameOf(file);
    const set = this.byUpload.get(upload);
    if (!set?.delete(file)) return;
    this.count--;
    if (set.size === 0) this.byUpload.delete(upload);
  }

  async of(upload: string): Promise<string[]> {
    this.loading ??= readdir(this.dir).then(
      (names) => { for (const n of names) this.note(n); },
      () => { this.loading = null; },
    );
    await this.loading;
    return [...(this.byUpload.get(upload) ?? [])];
  }
}

const indexes = new Map<string, CandidateIndex>();

/**
 * A processor now watches `dir`: from here on, lookups of candidates in it use an index, which
 * `note` (given every file the processor is offered) keeps complete. `release` when it stops.
 */
export function watchCandidates(dir: string): { note(file: string): void; release(): void } {
  const key = resolve(dir);
  let index = indexes.get(key);
  if (!index) indexes.set(key, (index = new CandidateIndex(key)));
  index.watchers++;
  const held = index;
  let released = false;
  return {
    note: (file) => { if (file.includes('~')) held.note(file); },
    release: () => {
      if (released) return;
      released = true;
      if (--held.watchers === 0 && indexes.get(key) === held) indexes.delete(key);
    },
  };
}
