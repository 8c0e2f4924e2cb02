/**
 * azure-vm: @azure/arm-compute `virtualMachines.listAll` over the subscription with
 * `statusOnly=true` (each VM with its instance view, so the power state comes in the same
 * listing), following nextLink; the SDK pipeline retries 429/503 honouring Retry-After.
 * `config.resource_groups` keeps only VMs of those groups. Credentials: `default` is
 * DefaultAzureCredential on the provider's host (environment, workload or managed identity, az
 * CLI); `env` names the variables of a service principal (tenant_id, client_id, client_secret)
 * or of an access token obtained elsewhere (access_token). `config.endpoint` /
 * `authority_host` point at another cloud (sovereign clouds, Azure Stack, tests); `config.ca_file`
 * trusts a private CA for them. The SDK is loaded on first use.
 */
import { readFile } from 'node:fs/promises';
import type { TokenCredential } from '@azure/core-auth';
import { capstanError } from '@capstan/shared/errors';
import { envCredential, probeReachable, providerError } from './common.js';
import { regionKept } from './filters.js';
import type { DiscoveredInstance, Driver, ManagerSpec } from './types.js';

interface AzureConfig {
  subscription_id: string;
  resource_groups?: string[];
  endpoint?: string;
  authority_host?: string;
  ca_file?: string;
}

/** PowerState/<x> → our state. Deallocated/stopped VMs still exist; deleted ones disappear (missing). */
const POWER: Record<string, DiscoveredInstance['state']> = {
  running: 'running', starting: 'running',
  stopping: 'stopped', stopped: 'stopped', deallocating: 'stopped', deallocated: 'stopped',
};

export interface AzureOptions {
  /** Retry delays of the SDK pipeline (tests use small ones). */
  retryDelayMs?: number;
}

export function azureDriver(spec: ManagerSpec, env: NodeJS.ProcessEnv = process.env, opts: AzureOptions = {}): Driver {
  const cfg = spec.config as unknown as AzureConfig;
  const groups = cfg.resource_groups?.map((g) => g.toLowerCase());

  async function credential(ca: string | undefined): Promise<TokenCredential> {
    const c = spec.credentials;
    if (c.source === 'env' && c.vars.access_token) {
      return { getToken: async () => ({ token: envCredential(env, c.vars, 'access_token'), expiresOnTimestamp: Date.now() + 300_000 }) };
    }
    const identity = await import('@azure/identity');
    const common = { ...(cfg.authority_host && { authorityHost: cfg.authority_host }), ...(ca && { tlsOptions: { ca } }) };
    if (c.source === 'env') {
      return new identity.ClientSecretCredential(envCredential(env, c.vars, 'tenant_id'), envCredential(env, c.vars, 'client_id'), envCredential(env, c.vars, 'client_secret'), common);
    }
    return new identity.DefaultAzureCredential(common);
  }

  async function client() {
    const ca = cfg.ca_file ? await readFile(cfg.ca_file, 'utf8').catch((err: unknown) => {
      throw capstanError('ERR_PROVIDER', `azure-vm: cannot read config.ca_file: ${(err as Error).message}`);
    }) : undefined;
    const { ComputeManagementClient } = await import('@azure/arm-compute');
    return new ComputeManagementClient(await credential(ca), cfg.subscription_id, {
      ...(cfg.endpoint && { endpoint: cfg.endpoint }),
      ...(ca && { tlsOptions: { ca } }),
      retryOptions: { maxRetries: 4, ...(opts.retryDelayMs !== undefined && { retryDelayInMs: opts.retryDelayMs, maxRetryDelayInMs: opts.retryDelayMs * 8 }) },
    });
  }

  async function list(signal?: AbortSignal, max = Infinity): Promise<DiscoveredInstance[]> {
    const out: DiscoveredInstance[] = [];
    const compute = await client();
    try {
      for await (const vm of compute.virtualMachines.listAll({ statusOnly: 'true', abortSignal: signal })) {
        if (!vm.id || !vm.name) continue;
        const group = /\/resourceGroups\/([^/]+)\//i.exec(vm.id)?.[1]?.toLowerCase();
        if (groups && (!group || !groups.includes(group))) continue;
        const location = vm.location ?? 'unknown';
        if (!regionKept(spec.filters, location)) continue;
        const power = vm.instanceView?.statuses?.map((s) => s.code ?? '').find((code) => code.startsWith('PowerState/'))?.slice('PowerState/'.length);
        out.push({
          source_id: vm.vmId ?? vm.id,
          region: location,
          account_id: cfg.subscription_id,
          hostname: vm.osProfile?.computerName ?? vm.name,
          name: vm.name,
          address: null,
          // No power state in the listing (a VM being created): it exists, count it running.
          state: power === undefined ? 'running' : (POWER[power] ?? 'stopped'),
          tags: vm.tags ?? {},
        });
        if (out.length >= max) break;
      }
    } catch (err) {
      throw providerError(`azure-vm ${cfg.subscription_id}`, err);
    }
    return out;
  }

  return {
    list: (signal) => list(signal),
    test: (signal) => probeReachable(() => list(signal, 1)),
  };
}
