/**
 * The bootstrap worker of a relay with bootstrap.enabled: its key opens the tasks sealed to it.
 * The worker (and the SSH code behind it) is loaded only by relays that bootstrap.
 */
import { join } from 'node:path';
import type { RelaydConfig } from '../config.js';
import { ensureRelayKey } from '../identity/own.js';
import type { RelayBootstrapOptions, RelayBootstrapper } from './worker.js';

export interface BootstrapperParts extends Pick<RelayBootstrapOptions, 'upstream' | 'log' | 'auth' | 'refused'> {
  /** Where this relay listens, as a URL, and the address it bound (a wildcard names no host). */
  url: string;
  address: string;
}

export async function relayBootstrapper(config: RelaydConfig, o: BootstrapperParts): Promise<RelayBootstrapper> {
  const { RelayBootstrapper } = await import('./worker.js');
  const key = await ensureRelayKey(config);
  // Agents reach this relay where it listens, unless that is every address (then: the job's relay_url).
  const wildcard = o.address === '0.0.0.0' || o.address === '::';
  const agentUrl = config.bootstrap.agent_url || (wildcard ? null : o.url);
  return new RelayBootstrapper({
    upstream: o.upstream, relayId: config.general.node_id, log: o.log.child({ part: 'bootstrap' }),
    keyPem: async () => key.keyPem,
    pollMs: config.bootstrap.poll_interval,
    concurrency: config.bootstrap.concurrency,
    agentUrl: () => agentUrl,
    maxPackageBytes: config.bootstrap.max_package_size,
    cacheDir: join(config.spool.directory, 'bootstrap-packages'),
    timeoutMs: config.upstream.timeout,
    ...(o.auth && { auth: o.auth }),
    ...(o.refused && { refused: o.refused }),
  });
}
