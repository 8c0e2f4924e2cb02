/**
 * Configuration: TOML files validated at the door, then frozen.
 *
 * Each program declares a schema (section → key → spec with its default). `loadConfig` merges
 * defaults ← file ← command-line overrides, checks every key with a message naming its path
 * (`upstream.timeout must be a duration`), rejects unknown keys (a typo must not be silently
 * ignored), and deep-freezes the result so nothing below cli.ts can change it.
 */
import { readFileSync } from 'node:fs';
import { parse as parseToml } from 'smol-toml';
import { capstanError } from './errors.js';

export type FieldType = 'string' | 'strings' | 'integer' | 'boolean' | 'duration' | 'size' | 'url' | 'listen' | 'level';

export interface FieldSpec {
  type: FieldType;
  /** `strings` (a TOML array of strings) defaults to an array. */
  default: string | number | boolean | readonly string[];
  min?: number;
  max?: number;
  /** May be the empty string (meaning "not set"). */
  optional?: boolean;
}

export type Schema = Record<string, Record<string, FieldSpec>>;

/** The value types after validation: durations are milliseconds, sizes bytes. */
export type ConfigOf<S extends Schema> = {
  readonly [Sec in keyof S]: {
    readonly [K in keyof S[Sec]]: S[Sec][K]['type'] extends 'integer' | 'duration' | 'size'
      ? number
      : S[Sec][K]['type'] extends 'boolean'
        ? boolean
        : S[Sec][K]['type'] extends 'strings'
          ? readonly string[]
          : string;
  };
};

const DURATION_UNITS: Record<string, number> = {
  ms: 1, s: 1000, sec: 1000, secs: 1000, second: 1000, seconds: 1000,
  m: 60_000, min: 60_000, mins: 60_000, minute: 60_000, minutes: 60_000,
  h: 3_600_000, hour: 3_600_000, hours: 3_600_000, d: 86_400_000, day: 86_400_000, days: 86_400_000,
};

/**
 * "10s", "5m", "1h 7s", "30min 20s", or a bare integer meaning seconds (RUDDER's habit).
 * Returns milliseconds, or null when the text is not a duration or overflows.
 */
/** TOML text → object (smol-toml); throws on a syntax error. Agents read facts.d files with it. */
export function parseTomlText(text: string): Record<string, unknown> {
  return parseToml(text) as Record<string, unknown>;
}

export function parseDuration(v: unknown): number | null {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v * 1000 : null;
  if (typeof v !== 'string') return null;
  const text = v.trim();
  if (/^\d+$/.test(text)) return parseDuration(Number(text));
  const re = /(\d+)\s*([a-z]+)\s*/gy;
  let total = 0;
  let consumed = 0;
  let m: RegExpExecArray | null;
  while ((m = re.exec(text)) !== null) {
    const unit = DURATION_UNITS[m[2]!];
    if (unit === undefined) return null;
    total += Number(m[1]) * unit;
    consumed = re.lastIndex; // a failed exec resets lastIndex, so remember how far we got
  }
  if (consumed === 0 || consumed !== text.length || !Number.isSafeInteger(total)) return null;
  return total;
}

const SIZE_UNITS: Record<string, number> = {
  '': 1, b: 1, k: 1000, kb: 1000, kib: 1024, m: 1e6, mb: 1e6, mib: 1024 ** 2, g: 1e9, gb: 1e9, gib: 1024 ** 3,
};

/** "64MiB", "8192", "1 GB" → bytes; null when not a size. */
export function parseSize(v: unknown): number | null {
  if (typeof v === 'number') return Number.isSafeInteger(v) && v >= 0 ? v : null;
  if (typeof v !== 'string') return null;
  const m = /^\s*(\d+)\s*([a-zA-Z]*)\s*$/.exec(v);
  if (!m) return null;
  const unit = SIZE_UNITS[m[2]!.toLowerCase()];
  if (unit === undefined) return null;
  const n = Number(m[1]) * unit;
  return Number.isSafeInteger(n) ? n : null;
}

/** "host:port" or "[v6]:port"; port 0 means "any free port" (tests). */
export function parseListen(v: string): { host: string; port: number } | null {
  const m = /^(?:\[([0-9a-fA-F:.]+)\]|([^:[\]]+)):(\d{1,5})$/.exec(v.trim());
  if (!m) return null;
  const port = Number(m[3]);
  if (port > 65535) return null;
  return { host: m[1] ?? m[2]!, port };
}

const LEVELS = new Set(['trace', 'debug', 'info', 'warn', 'error', 'fatal', 'silent']);

function checkField(path: string, spec: FieldSpec, raw: unknown): string | number | boolean | string[] {
  const bad = (what: string) => capstanError('ERR_CONFIG', `${path} must be ${what}`);
  if (spec.optional && raw === '') return '';
  switch (spec.type) {
    case 'string':
      if (typeof raw !== 'string') throw bad('a string');
      return raw;
    case 'strings':
      if (!Array.isArray(raw) || raw.some((x) => typeof x !== 'string')) throw bad('a list of strings');
      return [...(raw as string[])];
    case 'boolean':
      if (typeof raw !== 'boolean') throw bad('true or false');
      return raw;
    case 'integer': {
      const n = typeof raw === 'string' && /^-?\d+$/.test(raw) ? Number(raw) : raw;
      if (typeof n !== 'number' || !Number.isSafeInteger(n)) throw bad('an integer');
      if (spec.min !== undefined && n < spec.min) throw bad(`at least ${spec.min}`);
      if (spec.max !== undefined && n > spec.max) throw bad(`at most ${spec.max}`);
      return n;
    }
    case 'duration': {
      const ms = parseDuration(raw);
      if (ms === null) throw bad('a duration such as "30s", "5m" or "1h 30m"');
      if (spec.min !== undefined && ms < spec.min) throw bad(`at least ${spec.min} ms`);
      if (spec.max !== undefined && ms > spec.max) throw bad(`at most ${spec.max} ms`);
      return ms;
    }
    case 'size': {
      const n = parseSize(raw);
      if (n === null) throw bad('a size such as "64MiB" or a number of bytes');
      if (spec.min !== undefined && n < spec.min) throw bad(`at least ${spec.min} bytes`);
      return n;
    }
    case 'url': {
      if (typeof raw !== 'string') throw bad('a URL');
      let u: URL;
      try {
        u = new URL(raw);
      } catch {
        throw bad('an http:// or https:// URL');
      }
      if (u.protocol !== 'http:' && u.protocol !== 'https:') throw bad('an http:// or https:// URL');
      return raw.replace(/\/+$/, '');
    }
    case 'listen':
      if (typeof raw !== 'string' || parseListen(raw) === null) throw bad('host:port');
      return raw;
    case 'level':
      if (typeof raw !== 'string' || !LEVELS.has(raw)) throw bad(`one of ${[...LEVELS].join(', ')}`);
      return raw;
  }
}

function deepFreeze<T>(o: T): T {
  if (o && typeof o === 'object') {
    for (const v of Object.values(o)) deepFreeze(v);
    Object.freeze(o);
  }
  return o;
}

/** Every key at its default: what the shipped, commented config file must say. */
export function defaultsOf<S extends Schema>(schema: S): ConfigOf<S> {
  const out: Record<string, Record<string, unknown>> = {};
  for (const [sec, fields] of Object.entries(schema)) {
    out[sec] = {};
    for (const [key, spec] of Object.entries(fields)) out[sec]![key] = checkField(`${sec}.${key}`, spec, spec.default);
  }
  return out as ConfigOf<S>;
}

export interface LoadConfigOptions {
  /** TOML file; absent → defaults and overrides only. */
  path?: string;
  /** Values from flags, keyed "section.key"; undefined entries are ignored. */
  overrides?: Record<string, unknown>;
}

/** Read, merge, validate and freeze. Throws ERR_CONFIG_SYNTAX for bad TOML, ERR_CONFIG otherwise. */
export function loadConfig<S extends Schema>(schema: S, opts: LoadConfigOptions = {}): ConfigOf<S> {
  let file: Record<string, unknown> = {};
  if (opts.path !== undefined) {
    let text: string;
    try {
      text = readFileSync(opts.path, 'utf8');
    } catch (err) {
      throw capstanError('ERR_CONFIG', `cannot read configuration ${opts.path}: ${(err as Error).message}`);
    }
    try {
      file = parseToml(text) as Record<string, unknown>;
    } catch (err) {
      throw capstanError('ERR_CONFIG_SYNTAX', `${opts.path}: ${(err as Error).message.split('\n')[0]}`);
    }
  }
  for (const [sec, body] of Object.entries(file)) {
    const fields = schema[sec];
    if (!fields) throw capstanError('ERR_CONFIG', `unknown section [${sec}]`);
    if (!body || typeof body !== 'object' || Array.isArray(body)) throw capstanError('ERR_CONFIG', `${sec} must be a table`);
    for (const key of Object.keys(body)) {
      if (!fields[key]) throw capstanError('ERR_CONFIG', `unknown key ${sec}.${key}`);
    }
  }
  const out: Record<string, Record<string, unknown>> = {};
  for (const [sec, fields] of Object.entries(schema)) {
    out[sec] = {};
    const fromFile = (file[sec] ?? {}) as Record<string, unknown>;
    for (const [key, spec] of Object.entries(fields)) {
      const path = `${sec}.${key}`;
      const override = opts.overrides?.[path];
      const raw = override !== undefined ? override : key in fromFile ? fromFile[key] : spec.default;
      out[sec]![key] = checkField(path, spec, raw);
    }
  }
  for (const path of Object.keys(opts.overrides ?? {})) {
    const [sec, key] = path.split('.');
    if (!sec || !key || !schema[sec]?.[key]) throw capstanError('ERR_CONFIG', `unknown key ${path}`);
  }
  return deepFreeze(out) as ConfigOf<S>;
}
