/**
 * What makes one CVE more urgent than another beyond its CVSS score: CISA's Known Exploited
 * Vulnerabilities catalogue (exploited in the wild, with the date CISA added it and the date
 * US agencies must fix it by) and FIRST's EPSS (the probability of exploitation in the next 30
 * days, and its percentile). Both are files an offline site copies in (docs/vulnerabilities.md).
 *
 * Both are read bounded: a size limit on the file (uncompressed), a row limit, and a bad row is
 * skipped and counted (ERR_KEV_INVALID, ERR_EPSS_INVALID) rather than failing the file. A file
 * that is not one at all (no `vulnerabilities` array, no `cve,epss,percentile` header) fails.
 */
import { createReadStream } from 'node:fs';
import { open } from 'node:fs/promises';
import { createInterface } from 'node:readline';
import { pipeline, Transform } from 'node:stream';
import zlib from 'node:zlib';
import { capstanError } from '@capstan/shared/errors';

export interface EnrichLimits {
  maxKevBytes: number;
  maxKevEntries: number;
  maxEpssBytes: number;
  maxEpssRows: number;
  maxLine: number;
}

/** The KEV catalogue is ~1.5 MB for ~1,300 CVEs; an EPSS day ~10 MB for ~250,000. */
export const ENRICH_LIMITS: Readonly<EnrichLimits> = { maxKevBytes: 64 * 1024 * 1024, maxKevEntries: 200_000, maxEpssBytes: 256 * 1024 * 1024, maxEpssRows: 2_000_000, maxLine: 1024 };

export interface KevEntry {
  dateAdded: string;
  dueDate: string | null;
  /** `Known` when CISA knows of ransomware campaigns using it, else `Unknown`. */
  ransomware: string | null;
}

export interface Kev {
  catalogVersion: string | null;
  dateReleased: string | null;
  entries: Map<string, KevEntry>;
  skipped: number;
}

const CVE = /^CVE-\d{4}-\d{4,}$/;
const DATE = /^\d{4}-\d{2}-\d{2}$/;

async function readBounded(path: string, max: number): Promise<Buffer> {
  const fh = await open(path, 'r');
  try {
    const st = await fh.stat();
    if (st.size > max) throw capstanError('ERR_FEED_TOO_LARGE', `${path}: ${st.size} bytes, over the ${max}-byte limit`);
    return await fh.readFile();
  } finally {
    await fh.close();
  }
}

/** CISA's `known_exploited_vulnerabilities.json`: CVE id → when added, when due. */
export async function readKev(path: string, limits: Partial<EnrichLimits> = {}): Promise<Kev> {
  const lim = { ...ENRICH_LIMITS, ...limits };
  let doc: unknown;
  try {
    doc = JSON.parse((await readBounded(path, lim.maxKevBytes)).toString('utf8'));
  } catch (err) {
    if ((err as { code?: string }).code === 'ERR_FEED_TOO_LARGE') throw err;
    throw capstanError('ERR_KEV_INVALID', `${path}: not JSON (${(err as Error).message})`);
  }
  const o = doc as Record<string, unknown> | null;
  if (!o || typeof o !== 'object' || !Array.isArray(o.vulnerabilities)) throw capstanError('ERR_KEV_INVALID', `${path}: no vulnerabilities array`);
  if (o.vulnerabilities.length > lim.maxKevEntries) throw capstanError('ERR_FEED_TOO_LARGE', `${path}: more than ${lim.maxKevEntries} entries`);
  const entries = new Map<string, KevEntry>();
  let skipped = 0;
  for (const v of o.vulnerabilities as unknown[]) {
    const e = v as Record<string, unknown> | null;
    const id = typeof e?.cveID === 'string' ? e.cveID.trim() : '';
    const added = typeof e?.dateAdded === 'string' ? e.dateAdded : '';
    if (!CVE.test(id) || !DATE.test(added)) {
      skipped++;
      continue;
    }
    const due = typeof e!.dueDate === 'string' && DATE.test(e!.dueDate) ? e!.dueDate : null;
    const ransomware = typeof e!.knownRansomwareCampaignUse === 'string' ? e!.knownRansomwareCampaignUse.slice(0, 32) : null;
    entries.set(id, { dateAdded: added, dueDate: due, ransomware });
  }
  const str = (k: string) => (typeof o[k] === 'string' ? (o[k] as string).slice(0, 64) : null);
  return { catalogVersion: str('catalogVersion'), dateReleased: str('dateReleased'), entries, skipped };
}

export interface EpssScore {
  epss: number;
  percentile: number;
}

export interface Epss {
  modelVersion: string | null;
  scoreDate: string | null;
  scores: Map<string, EpssScore>;
  skipped: number;
}

/** Passes bytes through until more than `max` went by, then fails with ERR_FEED_TOO_LARGE. */
function limiter(max: number, path: string): Transform {
  let total = 0;
  return new Transform({
    transform(chunk: Buffer, _enc, cb) {
      total += chunk.length;
      if (total > max) cb(capstanError('ERR_FEED_TOO_LARGE', `${path}: over the ${max}-byte limit (uncompressed)`));
      else cb(null, chunk);
    },
  });
}

/**
 * FIRST's daily EPSS file (`epss_scores-YYYY-MM-DD.csv`, or its `.gz` as published):
 * `#model_version:…,score_date:…`, then `cve,epss,percentile`, then one row per CVE.
 */
export async function readEpss(path: string, limits: Partial<EnrichLimits> = {}): Promise<Epss> {
  const lim = { ...ENRICH_LIMITS, ...limits };
  const head = Buffer.alloc(2);
  const fh = await open(path, 'r');
  try {
    await fh.read(head, 0, 2, 0);
  } finally {
    await fh.close();
  }
  const raw = createReadStream(path);
  const gz = head[0] === 0x1f && head[1] === 0x8b;
  // pipeline: an error anywhere (corrupt gzip, the limit) destroys the chain and reaches the reader.
  const text = gz
    ? pipeline(raw, zlib.createGunzip(), limiter(lim.maxEpssBytes, path), () => {})
    : pipeline(raw, limiter(lim.maxEpssBytes, path), () => {});
  const out: Epss = { modelVersion: null, scoreDate: null, scores: new Map(), skipped: 0 };
  let header = false;
  let rows = 0;
  const lines = createInterface({ input: text, crlfDelay: Infinity });
  // Once the loop below has stopped (a limit, a bad header), tearing the pipeline down makes it
  // report a premature close on the interface: nobody is reading any more, so it is dropped.
  lines.on('error', () => {});
  try {
    for await (const line of lines) {
      if (line.length > lim.maxLine) {
        out.skipped++;
        continue;
      }
      if (!header) {
        if (line.startsWith('#')) {
          // `#model_version:v2023.03.01,score_date:2023-03-22T00:00:00+0000`
          for (const part of line.slice(1).split(',')) {
            const [k, ...v] = part.split(':');
            if (k === 'model_version') out.modelVersion = v.join(':').slice(0, 64);
            if (k === 'score_date') out.scoreDate = v.join(':').slice(0, 64);
          }
          continue;
        }
        if (line.trim() !== 'cve,epss,percentile') throw capstanError('ERR_EPSS_INVALID', `${path}: expected the header cve,epss,percentile`);
        header = true;
        continue;
      }
      if (line === '') continue;
      if (++rows > lim.maxEpssRows) throw capstanError('ERR_FEED_TOO_LARGE', `${path}: more than ${lim.maxEpssRows} rows`);
      const [cve, e, p, extra] = line.split(',');
      const epss = Number(e);
      const percentile = Number(p);
      if (extra !== undefined || !CVE.test(cve ?? '') || e === '' || p === '' || !(epss >= 0 && epss <= 1) || !(percentile >= 0 && percentile <= 1)) {
        out.skipped++;
        continue;
      }
      out.scores.set(cve!, { epss, percentile });
    }
  } catch (err) {
    if ((err as { code?: string }).code === 'Z_DATA_ERROR' || (err as { code?: string }).code === 'Z_BUF_ERROR') throw capstanError('ERR_DECOMPRESS', `${path}: corrupt gzip`);
    throw err;
  } finally {
    lines.close();
    text.destroy();
  }
  if (!header) throw capstanError('ERR_EPSS_INVALID', `${path}: no cve,epss,percentile header`);
  return out;
}
