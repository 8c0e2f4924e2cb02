/** relayd's configuration schema: every key, its type and its default (see packaging/etc/capstan/relayd.toml). */
import { loadConfig, type ConfigOf, type LoadConfigOptions } from '@capstan/shared';

export const RELAYD_SCHEMA = {
  general: {
    /** This relay's node id, answered by GET /uuid. */
    node_id: { type: 'string', default: 'root' },
    listen: { type: 'listen', default: '127.0.0.1:3030' },
  },
  spool: {
    directory: { type: 'string', default: '/var/spool/capstan/relayd' },
    /** Largest upload accepted by PUT /reports and /inventories. */
    max_file_size: { type: 'size', default: '64MiB', min: 1 },
    /** Refuse uploads (507) when the spool's file system would keep less than this free. */
    min_free_space: { type: 'size', default: '256MiB' },
    /** Partial uploads older than this are removed. */
    tmp_retention: { type: 'duration', default: '1h' },
  },
  upstream: {
    url: { type: 'url', default: 'http://127.0.0.1:3031' },
    timeout: { type: 'duration', default: '30s', min: 1 },
    /** Files forwarded at the same time. */
    concurrency: { type: 'integer', default: 8, min: 1, max: 256 },
  },
  processing: {
    /** How often the spool is listed to catch what inotify missed and retries that are due. */
    catchup_interval: { type: 'duration', default: '10s', min: 10 },
    retry_min: { type: 'duration', default: '1s', min: 1 },
    retry_max: { type: 'duration', default: '5m', min: 1 },
  },
  log: {
    level: { type: 'level', default: 'info' },
  },
} as const;

export type RelaydConfig = ConfigOf<typeof RELAYD_SCHEMA>;

export function loadRelaydConfig(opts: LoadConfigOptions): RelaydConfig {
  return loadConfig(RELAYD_SCHEMA, opts);
}
