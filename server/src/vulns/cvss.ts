/**
 * Severity from an advisory's CVSS vectors: the base score and FIRST's rating bands (none 0,
 * low 0.1–3.9, medium 4.0–6.9, high 7.0–8.9, critical 9.0–10.0). ae-cvss-calculator computes the
 * score (v3.0, v3.1 and v4.0 each by its own specification); we check the vector first, because
 * the library scores a vector with missing metrics as 0 instead of refusing it.
 */
import cvssLib from 'ae-cvss-calculator';
import { capstanError } from '@capstan/shared/errors';

export type Rating = 'none' | 'low' | 'medium' | 'high' | 'critical';

export interface CvssScore {
  version: '3.0' | '3.1' | '4.0';
  /** The base score, 0.0–10.0. */
  score: number;
  rating: Rating;
  /** The vector as the feed wrote it. */
  vector: string;
}

/** Base metrics and their values, per version (CVSS v3.1 §2, v4.0 §2). */
const V3_BASE: Record<string, string> = { AV: 'NALP', AC: 'LH', PR: 'NLH', UI: 'NR', S: 'UC', C: 'HLN', I: 'HLN', A: 'HLN' };
const V4_BASE: Record<string, string> = { AV: 'NALP', AC: 'LH', AT: 'NP', PR: 'NLH', UI: 'NPA', VC: 'HLN', VI: 'HLN', VA: 'HLN', SC: 'HLN', SI: 'HLN', SA: 'HLN' };
/** The other metrics each version defines (temporal, threat, environmental, supplemental): allowed, not scored. */
const V3_OTHER = new Set(['E', 'RL', 'RC', 'CR', 'IR', 'AR', 'MAV', 'MAC', 'MPR', 'MUI', 'MS', 'MC', 'MI', 'MA']);
const V4_OTHER = new Set(['E', 'CR', 'IR', 'AR', 'MAV', 'MAC', 'MAT', 'MPR', 'MUI', 'MVC', 'MVI', 'MVA', 'MSC', 'MSI', 'MSA', 'S', 'AU', 'R', 'V', 'RE', 'U']);
/** A vector is short; anything longer is not one. */
const MAX_VECTOR = 512;

export function rating(score: number): Rating {
  if (score === 0) return 'none';
  if (score < 4) return 'low';
  if (score < 7) return 'medium';
  if (score < 9) return 'high';
  return 'critical';
}

/** Score a `CVSS:3.x/…` or `CVSS:4.0/…` vector; ERR_CVSS_VECTOR when a base metric is missing, repeated or unknown. */
export function cvssScore(vector: string): CvssScore {
  const bad = (why: string): never => { throw capstanError('ERR_CVSS_VECTOR', `CVSS vector ${JSON.stringify(vector.slice(0, 80))}: ${why}`); };
  if (typeof vector !== 'string' || vector.length > MAX_VECTOR) bad('not a vector');
  const m = /^CVSS:(3\.0|3\.1|4\.0)\/(.*)$/.exec(vector);
  if (!m) bad('expected CVSS:3.0/, CVSS:3.1/ or CVSS:4.0/');
  const version = m![1] as CvssScore['version'];
  const base = version === '4.0' ? V4_BASE : V3_BASE;
  const seen = new Map<string, string>();
  for (const part of m![2]!.split('/')) {
    const [k, v, extra] = part.split(':');
    if (!k || !v || extra !== undefined) bad(`malformed metric ${JSON.stringify(part)}`);
    if (seen.has(k!)) bad(`metric ${k} repeated`);
    if (!Object.hasOwn(base, k!) && !(version === '4.0' ? V4_OTHER : V3_OTHER).has(k!)) bad(`unknown metric ${k}`);
    seen.set(k!, v!);
  }
  for (const [k, values] of Object.entries(base)) {
    const v = seen.get(k);
    if (v === undefined) bad(`base metric ${k} missing`);
    if (v!.length !== 1 || !values.includes(v!)) bad(`base metric ${k} has value ${v}`);
  }
  // The base score only: temporal, threat and environmental metrics are the site's to apply.
  const baseVector = `CVSS:${version}/${Object.keys(base).map((k) => `${k}:${seen.get(k)}`).join('/')}`;
  let score: number;
  try {
    const calc = version === '4.0' ? new cvssLib.Cvss4P0(baseVector) : version === '3.1' ? new cvssLib.Cvss3P1(baseVector) : new cvssLib.Cvss3P0(baseVector);
    score = (calc.calculateScores() as { base?: number; overall?: number }).base ?? NaN;
  } catch (err) {
    return bad(`not scorable (${(err as Error).message})`);
  }
  if (!Number.isFinite(score) || score < 0 || score > 10) bad('not scorable');
  return { version, score, rating: rating(score), vector };
}
