/** Start a real relay in this process on port 0, with a temporary spool, for API and forwarding tests. */
import { join } from 'node:path';
import { silentLogger, type Logger } from '@capstan/shared';
import { loadRelaydConfig, startRelay, type RelayHandle, type RelaydConfig } from '@capstan/relayd';
import { programDir } from '../../helpers/programs.js';

export interface TestRelay {
  handle: RelayHandle;
  url: string;
  spool: string;
  config: RelaydConfig;
}

export async function startTestRelay(
  t: { testdir: () => string; teardown: (fn: () => unknown) => void },
  overrides: Record<string, unknown> = {},
  opts: { log?: Logger; configPath?: string; dir?: string } = {},
): Promise<TestRelay> {
  const dir = opts.dir ?? programDir(t);
  const load = () =>
    loadRelaydConfig({
      path: opts.configPath,
      overrides: {
        'general.listen': '127.0.0.1:0',
        'spool.directory': join(dir, 'spool'),
        'spool.min_free_space': '0',
        'upstream.url': 'http://127.0.0.1:9',
        'processing.retry_min': '20ms',
        'processing.retry_max': '200ms',
        'upstream.probe_interval': '50ms',
        'log.level': 'silent',
        ...overrides,
      },
    });
  const config = load();
  const handle = await startRelay(config, opts.log ?? silentLogger, { processMetrics: false, reloadConfig: load });
  t.teardown(() => handle.close());
  return { handle, url: handle.url, spool: join(dir, 'spool'), config };
}

export async function put(url: string, kind: 'reports' | 'inventories', name: string, body: Buffer | string): Promise<Response> {
  return fetch(`${url}/${kind}/${encodeURIComponent(name)}`, { method: 'PUT', body });
}
