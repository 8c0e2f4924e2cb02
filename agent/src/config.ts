/** capstan-agent's configuration schema (see packaging/etc/capstan/agent.toml). */
import { loadConfig, type ConfigOf, type LoadConfigOptions } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { DEFAULT_RELAYD_LISTEN } from '@capstan/shared/protocol';
import { DEFAULT_MAX_DIFF_BYTES } from '@capstan/shared/runlog/diff';

export const AGENT_SCHEMA = {
  agent: {
    /** Node id, key, certificate, cached policy and the outbox live here (kept 0700). */
    state_dir: { type: 'string', default: '/var/lib/capstan/agent' },
    /** The relay (or server) this node talks to. */
    relay: { type: 'url', default: `http://${DEFAULT_RELAYD_LISTEN}` },
    /** RSA key size for the node key made on first run. */
    key_bits: { type: 'integer', default: 2048, min: 2048, max: 8192 },
    /**
     * Shared enrollment secret, sent in the inventory so that a server configured with the same
     * [enrollment] secret accepts this node without an admin. Empty: wait for an admin.
     */
    enrollment_secret: { type: 'string', default: '', optional: true },
    /** HTTP timeout for each request to the relay. */
    timeout: { type: 'duration', default: '30s', min: 1 },
  },
  policy: {
    /** PEM file of the server's ed25519 policy public key; empty → pinned from the first policy received. */
    public_key: { type: 'string', default: '', optional: true },
    /**
     * The same key given inline (PEM text), as a bootstrap writes it; public_key, when set, wins.
     * Either one pins the key: nothing is trusted on first use.
     */
    public_key_pem: { type: 'string', default: '', optional: true },
  },
  methods: {
    /** Longest a package, service or command step may take. */
    command_timeout: { type: 'duration', default: '5m', min: 1000 },
    /** Where sysctl values are read and written (a container or test may point elsewhere). */
    sysctl_root: { type: 'string', default: '/proc/sys' },
    /** Cap on one change's diff in the run log (UTF-8 bytes); a longer diff is cut and marked. */
    max_diff_bytes: { type: 'size', default: DEFAULT_MAX_DIFF_BYTES, min: 256 },
    /** Content larger than this (before or after) is described by size and sha256, not diffed. */
    max_diff_file_size: { type: 'size', default: '1MiB', min: 1 },
    /** Globs of absolute paths whose content is never shown in a diff, beyond the built-in secret list. */
    diff_secret_paths: { type: 'strings', default: [] },
  },
  inventory: {
    /** An unchanged inventory is re-sent this often; a changed one on the next run. */
    interval: { type: 'duration', default: '1d', min: 1000 },
    /** Each node waits a fixed share of this beyond the interval, so a fleet does not send at once. */
    splay: { type: 'duration', default: '1h' },
    /** cloud-init's instance data, read for the instance's cloud identity (joins a row a cloud manager discovered). */
    cloud_instance_data: { type: 'string', default: '/run/cloud-init/instance-data.json' },
    /** The node's own facts: *.json and *.toml files, and executables printing a JSON object (docs/inventory.md). */
    facts_dir: { type: 'string', default: '/etc/capstan/facts.d' },
    /** Longest one fact executable may run; it is killed beyond and reported in the inventory. */
    facts_timeout: { type: 'duration', default: '10s', min: 100 },
    /** Largest fact file, or fact executable output, that is read. */
    facts_max_size: { type: 'size', default: '1MiB', min: 1 },
    /** Most files read from the facts directory (in name order); the rest are reported. */
    facts_max_files: { type: 'integer', default: 100, min: 1, max: 10000 },
  },
  queue: {
    /** Files kept for back-fill when the relay is unreachable; the oldest are dropped beyond. */
    max_files: { type: 'integer', default: 2000, min: 1 },
    /** Files older than this are dropped from the outbox with a warning. */
    max_age: { type: 'duration', default: '7d', min: 1000 },
  },
  log: {
    level: { type: 'level', default: 'info' },
  },
} as const;

export type AgentConfig = ConfigOf<typeof AGENT_SCHEMA>;

/** The configured policy key's PEM: the file public_key names, else public_key_pem; null: none. */
export async function configuredPolicyKey(config: AgentConfig, read: (path: string) => Promise<string>): Promise<string | null> {
  if (config.policy.public_key) return read(config.policy.public_key);
  return config.policy.public_key_pem.trim() ? config.policy.public_key_pem : null;
}

export function loadAgentConfig(opts: LoadConfigOptions): AgentConfig {
  const config = loadConfig(AGENT_SCHEMA, opts);
  const inline = config.policy.public_key_pem.trim();
  if (inline && !inline.startsWith('-----BEGIN PUBLIC KEY-----')) throw capstanError('ERR_CONFIG', 'policy.public_key_pem must be a PEM public key');
  config.methods.diff_secret_paths.forEach((g, i) => {
    // A relative glob would never match: the agent matches absolute paths.
    if (!g.startsWith('/') || g.includes('\0')) throw capstanError('ERR_CONFIG', `methods.diff_secret_paths[${i}] must be an absolute path glob`);
  });
  return config;
}
