/**
 * gcp: Compute Engine `instances.aggregatedList` (every zone of a project in one paginated
 * listing, pageToken/nextPageToken, at most 500 per page) over the REST API with fetch — the JSON
 * that @google-cloud/compute's REST transport exchanges too. That library is not used: its
 * current major (7) needs Node 22, and the last major for Node 20 (6.x) is ~105 MB installed,
 * ~135 MB with google-gax, gRPC and protobufjs, for this one listing call in every relay package.
 * Credentials: Google's application default chain on the provider's host (gcp-auth.ts). 429 and
 * 5xx retried with backoff, Retry-After honoured (http.ts).
 *
 * A zone the listing could not reach (`unreachables`, or a scope warning UNREACHABLE) fails the
 * poll: its instances are merely unseen, and marking them missing would be a lie.
 */
import { capstanError } from '@capstan/shared/errors';
import { getJson } from './http.js';
import { probeReachable } from './common.js';
import { regionKept } from './filters.js';
import { gcpTokenSource } from './gcp-auth.js';
import type { DiscoveredInstance, Driver, ManagerSpec } from './types.js';

const API = 'https://compute.googleapis.com';

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

interface ScopedList {
  instances?: GceInstance[];
  warning?: { code?: string; message?: string };
}

export interface GcpOptions {
  /** Backoff base for retries (tests use a small one). */
  baseDelayMs?: number;
}

export function gcpDriver(spec: ManagerSpec, env: NodeJS.ProcessEnv = process.env, opts: GcpOptions = {}): Driver {
  const cfg = spec.config as { project: string; endpoint?: string };
  const base = (cfg.endpoint ?? API).replace(/\/+$/, '');
  const token = gcpTokenSource(spec.credentials, env);

  async function list(signal?: AbortSignal, maxPages = Infinity): Promise<DiscoveredInstance[]> {
    const out: DiscoveredInstance[] = [];
    let pageToken: string | undefined;
    let pages = 0;
    do {
      const url = new URL(`${base}/compute/v1/projects/${encodeURIComponent(cfg.project)}/aggregated/instances`);
      url.searchParams.set('maxResults', '500');
      url.searchParams.set('returnPartialSuccess', 'true');
      if (pageToken) url.searchParams.set('pageToken', pageToken);
      const page = await getJson(url.toString(), { token: () => token(signal), signal, where: `gcp ${cfg.project}`, ...(opts.baseDelayMs !== undefined && { baseDelayMs: opts.baseDelayMs }) });
      const items = (page.items ?? {}) as Record<string, ScopedList>;
      // Zones the manager's region filters leave out do not matter.
      const unreachable = [
        ...(Array.isArray(page.unreachables) ? page.unreachables.map(String) : []),
        ...Object.entries(items).filter(([, v]) => v.warning?.code === 'UNREACHABLE').map(([scope]) => scope),
      ].filter((scope) => regionKept(spec.filters, scope.replace(/^(zones|regions)\//, '')));
      if (unreachable.length > 0) {
        throw capstanError('ERR_PROVIDER', `gcp ${cfg.project}: the listing could not reach ${unreachable.slice(0, 10).join(', ')}; poll not applied`);
      }
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
    test: (signal) => probeReachable(() => list(signal, 1)),
  };
}
