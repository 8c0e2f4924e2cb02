/**
 * Run-log and inventory file names: who sent the file, when, and how it is compressed.
 *
 * These names become file names in relay and server spools, so they are parsed strictly: one
 * exact suffix, a node id from a small charset (no `/`, `\`, `.`, NUL, `_`, no leading `-`) and a
 * real date. relayd's v1 parser only checks up to `.log` and takes the node id up to the first
 * `.`; Capstan rejects anything it could not have written itself instead.
 */
import { capstanError } from '../errors.js';
import { parseRfc3339, rfc3339Utc } from './time.js';

export type Compression = 'none' | 'gzip' | 'zip' | 'zstd';

export interface RunInfo {
  nodeId: string;
  /** run timestamp from the file name, normalised RFC 3339 with ':' (e.g. 2018-08-24T15:55:01+00:00) */
  timestamp: string;
  compression: Compression;
  /** v1 = `<RFC3339>@<node-id>.log`, v2 = `<node-id>_<datetime>.log` */
  format: 'v1' | 'v2';
  fileName: string;
}

export interface InventoryInfo {
  nodeId: string;
  timestamp: string;
  compression: Compression;
  fileName: string;
  /** `json`: a Capstan agent's signed document; `ocs`: a RUDDER agent's OCS XML, signed beside it. */
  format: 'json' | 'ocs';
  /** `.ocs.sign`: the signature file that goes with `<same>.ocs[.gz]` (docs/inventory.md). */
  signature: boolean;
}

export interface FileNameOptions {
  /** Write `_` for `:` in the timestamp, as RUDDER's Windows agent does (colons are not allowed there). */
  underscore?: boolean;
}

const SUFFIX: Record<Compression, string> = { none: '', gzip: '.gz', zip: '.zip', zstd: '.zst' };
const BY_SUFFIX: ReadonlyArray<readonly [string, Compression]> = [['.gz', 'gzip'], ['.zip', 'zip'], ['.zst', 'zstd']];

/**
 * RUDDER node ids are UUIDs or `root`. `_` is excluded because it separates the node id from the
 * date in v2 and inventory names; `.` because relayd's v1 parser stops at it. 64 characters leaves
 * room for custom ids while keeping every name far below the 255-byte file-name limit.
 */
const NODE_ID = /^[A-Za-z0-9][A-Za-z0-9-]{0,63}$/;
const MAX_NAME = 255;

export function isValidNodeId(id: string): boolean {
  return typeof id === 'string' && NODE_ID.test(id);
}

export function compressionSuffix(c: Compression): string {
  const suffix = SUFFIX[c];
  if (suffix === undefined) throw capstanError('ERR_INTERNAL', `unknown compression ${quoted(c)}`);
  return suffix;
}

/** Name without its compression suffix, and that compression. */
function splitCompression(name: string): [string, Compression] {
  for (const [suffix, c] of BY_SUFFIX) {
    if (name.endsWith(suffix)) return [name.slice(0, -suffix.length), c];
  }
  return [name, 'none'];
}

/** A file-name timestamp (`_` may stand for `:`) normalised, or null when it is not a real date. */
function nameTimestamp(text: string): string | null {
  return parseRfc3339(text.replaceAll('_', ':'));
}

function quoted(name: unknown): string {
  const text = typeof name === 'string' ? name : String(name);
  return JSON.stringify(text.length > 100 ? `${text.slice(0, 100)}…` : text);
}

export function parseRunInfo(fileName: string): RunInfo {
  const bad = (why: string) => capstanError('ERR_RUNINFO_NAME', `invalid run log file name ${quoted(fileName)}: ${why}`);
  if (typeof fileName !== 'string' || fileName.length === 0 || fileName.length > MAX_NAME) throw bad('bad length');
  const [base, compression] = splitCompression(fileName);
  if (!base.endsWith('.log')) throw bad('expected .log with an optional .gz, .zip or .zst');
  const stem = base.slice(0, -4);
  const at = stem.indexOf('@');
  let nodeId: string;
  let stamp: string;
  let format: RunInfo['format'];
  if (at >= 0) {
    format = 'v1';
    stamp = stem.slice(0, at);
    nodeId = stem.slice(at + 1);
  } else {
    // v2: node ids never contain `_`, so the first one ends the node id
    const us = stem.indexOf('_');
    if (us < 0) throw bad('expected <date>@<node-id>.log or <node-id>_<date>.log');
    format = 'v2';
    nodeId = stem.slice(0, us);
    stamp = stem.slice(us + 1);
  }
  if (!isValidNodeId(nodeId)) throw bad('invalid node id');
  const timestamp = nameTimestamp(stamp);
  if (timestamp === null) throw bad('invalid date');
  return { nodeId, timestamp, compression, format, fileName };
}

function checkedStamp(code: 'ERR_RUNINFO_NAME' | 'ERR_INVENTORY_NAME', nodeId: string, date: Date, opts: FileNameOptions): string {
  if (!isValidNodeId(nodeId)) throw capstanError(code, `invalid node id ${quoted(nodeId)}`);
  const year = date instanceof Date ? date.getUTCFullYear() : NaN;
  if (!(year >= 0 && year <= 9999)) throw capstanError(code, 'invalid date for a file name');
  const stamp = rfc3339Utc(date);
  return opts.underscore ? stamp.replaceAll(':', '_') : stamp;
}

/** v1 name (what RUDDER's Unix agent writes): `<UTC RFC 3339>@<node-id>.log<suffix>`. */
export function runLogFileName(nodeId: string, date: Date, compression: Compression, opts: FileNameOptions = {}): string {
  return `${checkedStamp('ERR_RUNINFO_NAME', nodeId, date, opts)}@${nodeId}.log${compressionSuffix(compression)}`;
}

const INVENTORY_COMPRESSION: Partial<Record<string, Compression>> = { '': 'none', '.zst': 'zstd', '.gz': 'gzip' };

/**
 * What follows `.ocs` in a RUDDER agent's inventory names: the XML, gzip'd or not, and the
 * signature file made over the uncompressed XML (RUDDER's `do-inventory` signs, then gzips).
 */
const OCS_SUFFIX: Partial<Record<string, { compression: Compression; signature: boolean }>> = {
  '': { compression: 'none', signature: false },
  '.gz': { compression: 'gzip', signature: false },
  '.sign': { compression: 'none', signature: true },
};

/**
 * `<node-id>_<RFC 3339 UTC>.json[.zst|.gz]`; `_` may stand for `:` as in run-log names. RUDDER
 * agents name theirs `<node-id>_<RFC 3339 UTC>.ocs[.gz]`, with `<…>.ocs.sign` beside.
 */
export function parseInventoryName(fileName: string): InventoryInfo {
  const bad = (why: string) => capstanError('ERR_INVENTORY_NAME', `invalid inventory file name ${quoted(fileName)}: ${why}`);
  if (typeof fileName !== 'string' || fileName.length === 0 || fileName.length > MAX_NAME) throw bad('bad length');
  const json = fileName.lastIndexOf('.json');
  const ocs = fileName.lastIndexOf('.ocs');
  let end: number;
  let format: InventoryInfo['format'];
  let kind: { compression: Compression; signature: boolean } | undefined;
  if (ocs >= 0 && ocs > json) {
    end = ocs;
    format = 'ocs';
    kind = OCS_SUFFIX[fileName.slice(ocs + 4)];
  } else {
    end = json;
    format = 'json';
    const compression = json < 0 ? undefined : INVENTORY_COMPRESSION[fileName.slice(json + 5)];
    kind = compression === undefined ? undefined : { compression, signature: false };
  }
  if (kind === undefined) throw bad('expected .json with an optional .zst or .gz, or .ocs with an optional .gz or .sign');
  const { compression, signature } = kind;
  const stem = fileName.slice(0, end);
  const us = stem.indexOf('_');
  const nodeId = us < 0 ? '' : stem.slice(0, us);
  if (!isValidNodeId(nodeId)) throw bad('invalid node id');
  const timestamp = nameTimestamp(stem.slice(us + 1));
  if (timestamp === null || !timestamp.endsWith('+00:00')) throw bad('expected a UTC date');
  return { nodeId, timestamp, compression, fileName, format, signature };
}

/**
 * The two halves of a RUDDER agent's upload: for either name, the signature file's name and the
 * inventory's possible names (gzip'd as sent, or plain). Null for any other name.
 */
export function ocsPairNames(fileName: string): { sign: string; data: [string, string]; isSign: boolean } | null {
  const m = /^(.*\.ocs)(\.gz|\.sign)?$/.exec(fileName);
  if (!m) return null;
  const base = m[1]!;
  return { sign: `${base}.sign`, data: [`${base}.gz`, base], isSign: m[2] === '.sign' };
}

export function inventoryFileName(nodeId: string, date: Date, compression: 'none' | 'zstd' | 'gzip', opts: FileNameOptions = {}): string {
  if (compression !== 'none' && compression !== 'zstd' && compression !== 'gzip') {
    throw capstanError('ERR_INVENTORY_NAME', `unsupported inventory compression ${quoted(compression)}`);
  }
  return `${nodeId}_${checkedStamp('ERR_INVENTORY_NAME', nodeId, date, opts)}.json${compressionSuffix(compression)}`;
}
