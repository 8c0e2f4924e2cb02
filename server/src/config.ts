/** capstan-server's configuration schema (see packaging/etc/capstan/server.toml). */
import { loadConfig, type ConfigOf, type LoadConfigOptions } from '@capstan/shared';

export const SERVER_SCHEMA = {
  general: {
    listen: { type: 'listen', default: '127.0.0.1:3031' },
    /** Database (SQLite), spool, admin token and keys live here. */
    data_dir: { type: 'string', default: '/var/lib/capstan/server' },
    /** The root's own node id, answered by GET /uuid. */
    node_id: { type: 'string', default: 'root' },
  },
  database: {
    /** postgres://… to use PostgreSQL; empty → SQLite at <data_dir>/capstan.db. */
    url: { type: 'string', default: '', optional: true },
    pool_size: { type: 'integer', default: 10, min: 1, max: 200 },
  },
  limits: {
    /** Largest upload accepted (compressed, as sent). */
    max_body_size: { type: 'size', default: '32MiB', min: 1 },
    /** Largest run log or inventory after decompression. */
    max_decompressed_size: { type: 'size', default: '64MiB', min: 1 },
    max_reports: { type: 'integer', default: 200000, min: 1 },
    max_line_length: { type: 'size', default: '1MiB', min: 1 },
  },
  processing: {
    /** Run logs and inventories ingested at the same time. */
    concurrency: { type: 'integer', default: 4, min: 1, max: 64 },
    catchup_interval: { type: 'duration', default: '10s', min: 10 },
    retry_min: { type: 'duration', default: '1s', min: 1 },
    retry_max: { type: 'duration', default: '5m', min: 1 },
  },
  log: {
    level: { type: 'level', default: 'info' },
  },
} as const;

export type ServerConfig = ConfigOf<typeof SERVER_SCHEMA>;

export function loadServerConfig(opts: LoadConfigOptions): ServerConfig {
  return loadConfig(SERVER_SCHEMA, opts);
}
