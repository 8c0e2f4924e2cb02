/**
 * gcp: Compute Engine `instances.aggregatedList` (every zone of a project in one paginated
 * listing) over REST — the same JSON API @google-cloud/compute speaks, without its transport
 * (REST fallback). Credentials: `env` names a variable holding an OAuth access token; `default`
 * takes one from the GCE metadata server (the instance's service account), as Google's default
 * chain does on Compute Engine. Throttling (429/503) retried with backoff (http.ts).
 */
import { capstanError } from '../errors.js';
import { envCredential } from './common.js';
import { getJson } from './http.js';
import { regionKept } from './filters.js';
import type { DiscoveredInstance, Driver, ManagerSpec } from './types.js';

const API = 'https://compute.googleapis.com';
const METADATA_TOKEN = 'http://metadata.google.internal/computeMetadata/v1/instance/service-accounts/default/token';

const STATES: Record<string, DiscoveredInstance['state']> = {
  PROVISIONING: 'running', STAGING: 'running', RUNNING: 'running', REPAIRING: 'running',
  STOPPING: 'stopped', STOPPED: 'stopped', SUSPENDING: 'stopped', SUSPENDED: 'stopped', TERMINATED: 'stopped',
};

interface GceInstance {
  id?: string;
  name?: string;
  status?: string;
  labels?: Record<string, string>;
  networkInterfaces?: Array<{ networkIP?: string }>;
}

export interface GcpOptions {
  /** Backoff base for retries (tests use a small one). */
  baseDelayMs?: number;
}

export function gcpDriver(spec: ManagerSpec, env: NodeJS.ProcessEnv = process.env, opts: GcpOptions = {}): Driver {
  const cfg = spec.config as { project: string; endpoint?: string };
  const base = (cfg.endpoint ?? API).replace(/\/+$/, '');
  const c = spec.credentials;
  let cached: { token: string; until: number } | null = null;
  const token = async (): Promise<string> => {
    if (c.source === 'env') return envCredential(env, c.vars, 'access_token');
    if (cached && cached.until > Date.now()) return cached.token;
    const res = await fetch(METADATA_TOKEN, { headers: { 'metadata-flavor': 'Google' }, signal: AbortSignal.timeout(5000) })
      .catch((err: unknown) => { throw capstanError('ERR_PROVIDER', `gcp: no credentials (metadata server: ${(err as Error).message})`); });
    if (!res.ok) throw capstanError('ERR_PROVIDER', `gcp: metadata server answered ${res.status}`);
    const t = await res.json() as { access_token: string; expires_in: number };
    cached = { token: t.access_token, until: Date.now() + (t.expires_in - 60) * 1000 };
    return t.access_token;
  };

  async function list(signal?: AbortSignal, maxPages = Infinity): Promise<DiscoveredInstance[]> {
    const out: DiscoveredInstance[] = [];
    let pageToken: string | undefined;
    let pages = 0;
    do {
      const url = new URL(`${base}/compute/v1/projects/${encodeURIComponent(cfg.project)}/aggregated/instances`);
      url.searchParams.set('maxResults', '500');
      url.searchParams.set('returnPartialSuccess', 'true');
      if (pageToken) url.searchParams.set('pageToken', pageToken);
      const page = await getJson(url.toString(), { token, signal, where: `gcp ${cfg.project}`, ...(opts.baseDelayMs !== undefined && { baseDelayMs: opts.baseDelayMs }) });
      const items = (page.items ?? {}) as Record<string, { instances?: GceInstance[] }>;
      for (const [scope, v] of Object.entries(items)) {
        const zone = scope.replace(/^zones\//, '');
        if (!regionKept(spec.filters, zone)) continue;
        for (const i of v.instances ?? []) {
          if (!i.id || !i.name) continue;
          out.push({
            source_id: String(i.id), region: zone, account_id: cfg.project, hostname: i.name, name: i.name,
            address: i.networkInterfaces?.[0]?.networkIP ?? null,
            state: STATES[i.status ?? ''] ?? 'stopped',
            tags: i.labels ?? {},
          });
        }
      }
      pageToken = (page.nextPageToken as string | undefined) || undefined;
      pages++;
    } while (pageToken && pages < maxPages);
    return out;
  }

  return {
    list: (signal) => list(signal),
    async test(signal) {
      try {
        await list(signal, 1);
        return { reachable: true };
      } catch (err) {
        return { reachable: false, error: (err as Error).message };
      }
    },
  };
}
