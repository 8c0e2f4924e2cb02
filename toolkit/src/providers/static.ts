/**
 * static: a list of hosts given in the manager (`config.hosts`) or in a file on the provider's
 * host (`config.file`: a JSON array in the same form, or one hostname per line; `#` comments),
 * re-read at every poll so editing the file is enough. Every listed host is running; a host
 * removed from the list becomes missing at the next poll. The source id is the hostname, the
 * region `config.region` (default `static`), the account `static` — the same for every static
 * manager, so a host that two lists name is one node linked to both (as one instance two cloud
 * managers see); a list that means other machines of the same name gives its own region.
 */
import { readFile } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';
import { probeReachable } from './common.js';
import type { DiscoveredInstance, Driver, ManagerSpec } from './types.js';

interface Host {
  hostname: string;
  address?: string;
  tags?: Record<string, string>;
}

/** The account of every statically listed host (see above). */
export const STATIC_ACCOUNT = 'static';
const MAX_FILE_BYTES = 16 * 1024 * 1024;

function fromText(text: string, file: string): Host[] {
  const t = text.trim();
  if (t.startsWith('[')) {
    let parsed: unknown;
    try {
      parsed = JSON.parse(t);
    } catch {
      throw capstanError('ERR_PROVIDER', `static host file ${file} is not valid JSON`);
    }
    if (!Array.isArray(parsed)) throw capstanError('ERR_PROVIDER', `static host file ${file} must hold an array`);
    return parsed.map((h, i) => {
      if (typeof h === 'string') return { hostname: h };
      const o = h as Host;
      if (!o || typeof o.hostname !== 'string' || o.hostname === '') throw capstanError('ERR_PROVIDER', `static host file ${file}: entry ${i} has no hostname`);
      return o;
    });
  }
  return t.split('\n').map((l) => l.replace(/#.*/, '').trim()).filter((l) => l !== '').map((hostname) => ({ hostname }));
}

export function staticDriver(spec: ManagerSpec): Driver {
  const cfg = spec.config as { hosts?: Host[]; file?: string; region: string };
  async function hosts(): Promise<Host[]> {
    if (cfg.hosts) return cfg.hosts;
    let text: string;
    try {
      const buf = await readFile(cfg.file!);
      if (buf.length > MAX_FILE_BYTES) throw capstanError('ERR_PROVIDER', `static host file ${cfg.file} is larger than ${MAX_FILE_BYTES} bytes`);
      text = buf.toString('utf8');
    } catch (err) {
      if ((err as { code?: string }).code === 'ERR_PROVIDER') throw err;
      throw capstanError('ERR_PROVIDER', `static host file ${cfg.file}: ${(err as Error).message}`, { cause: err });
    }
    return fromText(text, cfg.file!);
  }
  return {
    async list() {
      const seen = new Set<string>();
      const out: DiscoveredInstance[] = [];
      for (const h of await hosts()) {
        if (seen.has(h.hostname)) continue;
        seen.add(h.hostname);
        out.push({
          source_id: h.hostname, region: cfg.region, account_id: STATIC_ACCOUNT, hostname: h.hostname,
          address: h.address ?? h.hostname, state: 'running', tags: h.tags ?? {},
        });
      }
      return out;
    },
    test: () => probeReachable(hosts),
  };
}
