/**
 * aws-ec2: DescribeInstances in each configured region (filtered by the manager's region
 * filters first, so an excluded region is never even called), following NextToken. Throttling
 * (RequestLimitExceeded, 429) and 5xx are retried by the SDK's standard retry strategy with
 * backoff (`max_attempts`, default 5). `config.endpoint` points the SDK elsewhere (tests, VPC
 * endpoints). The SDK is loaded on first use, so programs that never discover never load it.
 */
import type { DiscoveredInstance, Driver, ManagerSpec } from './types.js';
import { regionKept } from './filters.js';
import { envCredential, providerError } from './common.js';

type Ec2 = typeof import('@aws-sdk/client-ec2');

const STATES: Record<string, DiscoveredInstance['state']> = {
  pending: 'running', running: 'running', stopping: 'stopped', stopped: 'stopped',
  'shutting-down': 'terminated', terminated: 'terminated',
};

export const MAX_ATTEMPTS = 5;

export function awsDriver(spec: ManagerSpec, env: NodeJS.ProcessEnv = process.env): Driver {
  const cfg = spec.config as { regions: string[]; endpoint?: string };
  const regions = cfg.regions.filter((r) => regionKept(spec.filters, r));
  let sdk: Promise<Ec2> | null = null;
  const load = () => (sdk ??= import('@aws-sdk/client-ec2'));

  async function client(region: string) {
    const { EC2Client } = await load();
    const c = spec.credentials;
    return new EC2Client({
      region,
      maxAttempts: MAX_ATTEMPTS,
      ...(cfg.endpoint && { endpoint: cfg.endpoint }),
      ...(c.source === 'profile' && { profile: c.profile }),
      ...(c.source === 'env' && {
        credentials: {
          accessKeyId: envCredential(env, c.vars, 'access_key_id'),
          secretAccessKey: envCredential(env, c.vars, 'secret_access_key'),
          ...(c.vars.session_token && { sessionToken: envCredential(env, c.vars, 'session_token') }),
        },
      }),
    });
  }

  async function listRegion(region: string, signal?: AbortSignal): Promise<DiscoveredInstance[]> {
    const { DescribeInstancesCommand } = await load();
    const ec2 = await client(region);
    const out: DiscoveredInstance[] = [];
    try {
      let token: string | undefined;
      do {
        const page = await ec2.send(new DescribeInstancesCommand({ MaxResults: 1000, ...(token && { NextToken: token }) }), { abortSignal: signal });
        for (const r of page.Reservations ?? []) {
          for (const i of r.Instances ?? []) {
            if (!i.InstanceId) continue;
            const tags = Object.fromEntries((i.Tags ?? []).filter((t) => t.Key !== undefined).map((t) => [t.Key!, t.Value ?? '']));
            out.push({
              source_id: i.InstanceId,
              region,
              account_id: r.OwnerId ?? 'unknown',
              hostname: i.PrivateDnsName || tags.Name || i.InstanceId,
              ...(tags.Name && { name: tags.Name }),
              address: i.PrivateIpAddress ?? i.PublicIpAddress ?? null,
              state: STATES[i.State?.Name ?? ''] ?? 'running',
              tags,
            });
          }
        }
        token = page.NextToken || undefined;
      } while (token);
    } catch (err) {
      throw providerError(`aws-ec2 ${region}`, err);
    } finally {
      ec2.destroy();
    }
    return out;
  }

  return {
    async list(signal) {
      const all: DiscoveredInstance[] = [];
      for (const region of regions) all.push(...await listRegion(region, signal));
      return all;
    },
    async test(signal) {
      const region = regions[0] ?? cfg.regions[0]!;
      const { DescribeInstancesCommand } = await load();
      let ec2: Awaited<ReturnType<typeof client>> | null = null;
      try {
        // Inside the try: credentials that cannot be read (a variable not set) are a failed test too.
        ec2 = await client(region);
        await ec2.send(new DescribeInstancesCommand({ MaxResults: 5 }), { abortSignal: signal });
        return { reachable: true };
      } catch (err) {
        return { reachable: false, error: providerError(`aws-ec2 ${region}`, err).message };
      } finally {
        ec2?.destroy();
      }
    },
  };
}
