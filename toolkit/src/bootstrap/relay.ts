/**
 * The contract between the server and a relay that runs bootstrap tasks (docs/bootstrap.md,
 * "From a relay"). The relay only ever calls outward, with its relay token, like the providers it
 * hosts; a sub-relay's calls pass through the relays above it unchanged:
 *
 *   POST /relay-api/1/bootstrap/<relay>/claim                    {limit, agent_url?} → {data: RelayBootstrapTask[]}
 *   GET  /relay-api/1/bootstrap/<relay>/package/<arch>           the .deb (x-capstan-sha256, x-capstan-package)
 *   POST /relay-api/1/bootstrap/<relay>/tasks/<job>/<node>       one RelayBootstrapEvent → {data: {in_progress, accepted?}}
 */

export const RELAY_BOOTSTRAP_PATH = '/relay-api/1/bootstrap';

/** What the sealed part of a task holds (SshCredential's secrets and the agent's configuration). */
export interface SealedTaskSecrets {
  private_key?: string;
  passphrase?: string;
  password?: string;
  agent_config: string;
}

/** One task handed to a relay: in progress, with everything the SSH steps need. */
export interface RelayBootstrapTask {
  job_id: string;
  node_id: string;
  host: string;
  user: string;
  port: number;
  /** SealedTaskSecrets, sealed to the relay's certificate (seal.ts, sealedTaskAad). */
  sealed: string;
  /** The pinned host key; null: none yet (the relay reports the first key it meets). */
  host_key: { algorithm: string; fingerprint: string } | null;
  /** A package URL and its sha256 to download from; null: ask the upstream (…/package/<arch>). */
  package: { url: string; sha256: string } | null;
  install_root: string;
  sudo: string;
  start_command: string;
  remote_tmp: string;
  connect_timeout_ms: number;
  command_timeout_ms: number;
}

/** What a relay reports on a task, one per post. */
export type RelayBootstrapEvent =
  | { step: 'connect' | 'verify' | 'copy' | 'install'; message: string }
  /** A host key met where none was pinned: the server pins it (or answers the pin that won). */
  | { host_key: { algorithm: string; fingerprint: string } }
  /** The SSH steps are over: the server waits for the agent's first inventory (enrol). */
  | { installed: { os: string; arch: string } }
  | { failed: { code: string; message: string } };

export interface RelayBootstrapAnswer {
  /** false: the task was cancelled or timed out meanwhile, the relay stops. */
  in_progress: boolean;
  /** To a host_key event: whether the key is the one pinned now. */
  accepted?: boolean;
}
