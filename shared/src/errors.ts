/**
 * One registry of permanent error codes for every Capstan program.
 *
 * Tests and API clients match on `code`, never on message text. `statusCode` is the HTTP status an
 * API answers with when the error reaches it; `transient` decides a spooled file's fate (leave and
 * retry vs move to failed/), as RUDDER relayd does in processing.rs.
 */
export interface CapstanErrorOptions {
  statusCode?: number;
  transient?: boolean;
  cause?: unknown;
  details?: Record<string, unknown>;
}

export class CapstanError extends Error {
  readonly code: string;
  readonly statusCode: number;
  readonly transient: boolean;
  readonly details?: Record<string, unknown>;

  constructor(code: string, message: string, opts: CapstanErrorOptions = {}) {
    super(message, opts.cause === undefined ? undefined : { cause: opts.cause });
    this.name = 'CapstanError';
    this.code = code;
    this.statusCode = opts.statusCode ?? 500;
    this.transient = opts.transient ?? false;
    if (opts.details) this.details = opts.details;
  }
}

interface CodeSpec {
  status: number;
  transient?: boolean;
}

/** Every code Capstan raises, with its HTTP status and whether a retry may succeed. */
export const ERROR_CODES = {
  // configuration and start-up
  ERR_CONFIG: { status: 500 },
  ERR_CONFIG_SYNTAX: { status: 500 },
  ERR_STARTUP: { status: 500 },
  /** A listener that is not loopback would speak plain HTTP (tls.allow_plaintext not set). */
  ERR_PLAINTEXT_LISTEN: { status: 500 },
  /** A directory the program needs cannot be made (refused by its file system, or a file is in the way). */
  ERR_DIRECTORY: { status: 500 },
  // input names and bodies
  ERR_RUNINFO_NAME: { status: 400 },
  ERR_INVENTORY_NAME: { status: 400 },
  ERR_BAD_PATH: { status: 400 },
  ERR_BAD_REQUEST: { status: 400 },
  ERR_LENGTH_REQUIRED: { status: 411 },
  ERR_BODY_TOO_LARGE: { status: 413 },
  /** The request line or a path segment is longer than the router takes. */
  ERR_URI_TOO_LONG: { status: 414 },
  /** The request head is larger than http.max_header_size. */
  ERR_HEADERS_TOO_LARGE: { status: 431 },
  /** Headers not whole within http.headers_timeout, or an upload body too slow (http.body_timeout, min_upload_rate). */
  ERR_REQUEST_TIMEOUT: { status: 408, transient: true },
  /** The listener is contended and this client address holds its share of the uploads in progress (http.max_uploads_per_client). */
  ERR_TOO_MANY_UPLOADS: { status: 429, transient: true },
  /** One address failed to authenticate [limits] auth_failures times in auth_failure_window. */
  ERR_AUTH_RATE_LIMITED: { status: 429, transient: true },
  /** [events] max_readers long-polls and event streams are waiting already. */
  ERR_TOO_MANY_READERS: { status: 429, transient: true },
  /** A subscription's webhook URL or e-mail addresses cannot be used (or e-mail without an [smtp] host). */
  ERR_SUBSCRIPTION_TARGET: { status: 400 },
  ERR_UNSUPPORTED_MEDIA: { status: 415 },
  /** An upload batch (`POST /batch/<kind>`) that does not frame exactly (shared/src/batch.ts). */
  ERR_BATCH_FORMAT: { status: 400 },
  /** An upload batch over [http] max_batch_files or max_batch_size. */
  ERR_BATCH_TOO_LARGE: { status: 413 },
  ERR_NOT_FOUND: { status: 404 },
  ERR_UNAUTHORIZED: { status: 401 },
  ERR_FORBIDDEN: { status: 403 },
  /** A write made with a console sign-in cookie without its X-CSRF-Token (or with another one). */
  ERR_CSRF: { status: 403 },
  ERR_CONFLICT: { status: 409 },
  /** A policy change by a role that must go through review ([policy] review_roles): propose it as a change request. */
  ERR_REVIEW_REQUIRED: { status: 403 },
  /** A change request's objects changed since it was proposed: it cannot be deployed as reviewed. */
  ERR_CHANGE_STALE: { status: 409 },
  /** A change request is not in the state the step needs (approve an open one, deploy an approved one). */
  ERR_CHANGE_REQUEST_STATE: { status: 409 },
  ERR_PEER_TOO_OLD: { status: 426 },
  ERR_PEER_TOO_NEW: { status: 400 },
  // compression envelopes
  ERR_DECOMPRESS: { status: 400 },
  ERR_DECOMPRESSED_TOO_LARGE: { status: 413 },
  // run logs
  ERR_RUNLOG_EMPTY: { status: 400 },
  ERR_RUNLOG_INCONSISTENT: { status: 400 },
  ERR_RUNLOG_TOO_LARGE: { status: 413 },
  ERR_RUNLOG_LINE_TOO_LONG: { status: 400 },
  ERR_RUNLOG_TOO_MANY_REPORTS: { status: 413 },
  // S/MIME and certificates
  ERR_SMIME_FORMAT: { status: 400 },
  ERR_SMIME_DIGEST: { status: 400 },
  ERR_SMIME_SIGNATURE: { status: 400 },
  ERR_SMIME_SIGNER_NOT_FOUND: { status: 400 },
  ERR_SMIME_UNSUPPORTED: { status: 400 },
  ERR_SMIME_WEAK_DIGEST: { status: 400 },
  ERR_CERTIFICATE: { status: 400 },
  ERR_KEY: { status: 400 },
  // inventories
  ERR_INVENTORY_INVALID: { status: 400 },
  /** A RUDDER agent's OCS inventory is not well-formed XML, or lacks a field the node needs. */
  ERR_OCS_INVALID: { status: 400 },
  /** OCS XML larger than limits.ocs_max_size (uncompressed). */
  ERR_OCS_TOO_LARGE: { status: 413 },
  /** OCS XML nested deeper than limits.ocs_max_depth. */
  ERR_OCS_TOO_DEEP: { status: 400 },
  /** OCS XML with a DOCTYPE (entity declarations, external references): never read. */
  ERR_OCS_DOCTYPE: { status: 400 },
  /** The `.sign` file is malformed, or its signature does not verify over the inventory with the node's key. */
  ERR_OCS_SIGNATURE: { status: 400 },
  /** An OCS inventory without its `.sign` (or a `.sign` without its inventory) past limits.ocs_pair_wait; transient until then. */
  ERR_OCS_UNPAIRED: { status: 400 },
  /** Reading an inventory took more than [processing] inventory_time_limit or inventory_memory: refused. */
  ERR_INVENTORY_TOO_COSTLY: { status: 413 },
  /** [processing] inventory_queue inventories already wait to be read: the file is tried again later. */
  ERR_INVENTORY_BUSY: { status: 503, transient: true },
  /** POST /api/1/policy/plan ran past [policy] plan_time_limit. */
  ERR_PLAN_TIMEOUT: { status: 503, transient: true },
  /** The caller (or everyone) already has [policy] plan_concurrency (plan_concurrency_total) plans running. */
  ERR_PLAN_BUSY: { status: 429, transient: true },
  /** POST /api/1/policy/plan would hold more than [policy] plan_memory_limit bytes. */
  ERR_PLAN_TOO_LARGE: { status: 413 },
  /** Too many filtered or exported reads in progress, of this caller or in all ([limits] expensive_reads_*). */
  ERR_READ_BUSY: { status: 429, transient: true },
  // policies (downward trust)
  ERR_POLICY_INVALID: { status: 400 },
  ERR_POLICY_SIGNATURE: { status: 400 },
  ERR_POLICY_NODE_MISMATCH: { status: 400 },
  // a bundle older than one the agent applied (agent/src/policy/generation.ts)
  ERR_POLICY_ROLLBACK: { status: 409 },
  // confirming a claim on a discovered instance that has no (more) discovered row to join
  ERR_NODE_CLAIM_NONE: { status: 409 },
  // a spooled file whose ingest the server died in too often: moved to spool/quarantine/
  ERR_INGEST_QUARANTINED: { status: 422 },
  ERR_CONDITION_SYNTAX: { status: 400 },
  ERR_METHOD_PARAMS: { status: 400 },
  ERR_ARTIFACT_HASH: { status: 400 },
  ERR_ARCHIVE_INVALID: { status: 400 },
  /** A template that does not parse, names a value that is not defined, or uses a partial (the message names it and its line). */
  ERR_TEMPLATE: { status: 400 },
  /** A template or its rendering beyond a limit (`details.limit`: size, output, depth, iterations, steps). */
  ERR_TEMPLATE_LIMIT: { status: 400 },
  /** A technique that is not valid; `details.field` is where (`calls[2].params.path`). */
  ERR_TECHNIQUE_INVALID: { status: 400 },
  /** A sealed secret that does not open with the node's key, is malformed, or is used but not carried. */
  ERR_SECRET: { status: 400 },
  /** Properties beyond their limits or with a bad name; `details.field` is where. */
  ERR_PROPERTIES_INVALID: { status: 400 },
  /** Two policy groups of equal priority set one property path to different values: the node's policy is not generated. */
  ERR_PROPERTY_CONFLICT: { status: 409 },
  // file-writing methods on the node (docs/policy.md): reported as the directive's result_error
  /** The directive's `validate` command (or visudo) refused the candidate file; the old file is kept. */
  ERR_FILE_VALIDATE: { status: 400 },
  /** The managed path is a symbolic link: a method that writes files never writes through one. */
  ERR_FILE_SYMLINK: { status: 409 },
  /** A directory or special file is where a file or link belongs (or a non-link where symlink_absent looks). */
  ERR_FILE_TYPE: { status: 409 },
  /** A file an editing method would read is over its size limit. */
  ERR_FILE_TOO_LARGE: { status: 413 },
  /** A file an editing method would edit is not UTF-8 text (NUL bytes or invalid sequences). */
  ERR_FILE_NOT_TEXT: { status: 415 },
  /** A managed block's begin and end markers do not pair up in the file. */
  ERR_FILE_MARKERS: { status: 409 },
  /** The file an editing method edits in place (file_replace) does not exist. */
  ERR_FILE_MISSING: { status: 404 },
  /** A directive's regular expression ran longer than its time bound on the file. */
  ERR_REGEX_TIMEOUT: { status: 400 },
  /** A user or group name that /etc/passwd or /etc/group does not hold. */
  ERR_ACCOUNT_UNKNOWN: { status: 400 },
  /** A command a method runs after writing (daemon-reload, apt-get update, rpm --import) failed. */
  ERR_COMMAND_FAILED: { status: 500 },
  /** A host tool a method runs (useradd, apt-get, dnf, systemctl, mount, modprobe, …) failed, timed out or is missing. */
  ERR_METHOD_TOOL: { status: 500 },
  /** A method will not act: something it needs is missing on the host, or acting would do harm. */
  ERR_METHOD_REFUSED: { status: 409 },
  // node identity tokens
  ERR_TOKEN_INVALID: { status: 401 },
  ERR_TOKEN_EXPIRED: { status: 401 },
  ERR_TOKEN_UNKNOWN_KEY: { status: 401 },
  ERR_TOKEN_WRONG_NODE: { status: 403 },
  /** A valid token of a node that is not (or no longer) registered as a relay, where only a relay's will do. */
  ERR_TOKEN_NOT_RELAY: { status: 403 },
  ERR_RENEW_STALE: { status: 401 },
  ERR_RENEW_REPLAY: { status: 401 },
  // registry
  ERR_NODE_UNKNOWN: { status: 404 },
  ERR_NODE_PENDING: { status: 403 },
  ERR_NODE_REFUSED: { status: 403 },
  ERR_NODE_MISMATCH: { status: 400 },
  ERR_NODE_EXISTS: { status: 409 },
  ERR_CERTIFICATE_CONFLICT: { status: 409 },
  ERR_NODE_TERMINATED: { status: 409 },
  ERR_FILTER_CONFLICT: { status: 400 },
  /** A node filter expression that does not parse; `details.position` is where. */
  ERR_FILTER_SYNTAX: { status: 400 },
  /** A manual node whose address another node already has; `details.node` is that node's id. */
  ERR_ADDRESS_TAKEN: { status: 409 },
  ERR_RUN_IN_FUTURE: { status: 400 },
  // jobs (runs triggered on many nodes through the relays)
  ERR_JOB_NO_TARGETS: { status: 400 },
  ERR_JOB_UNKNOWN_NODES: { status: 400 },
  /** A static target is a relay node: a relay runs no remote-run agent (its host's agent is its own node). */
  ERR_JOB_RELAY_NODES: { status: 400 },
  ERR_JOB_UNKNOWN: { status: 404 },
  ERR_JOB_TRANSITION: { status: 409 },
  // patch campaigns (upgrades in waves and maintenance windows)
  ERR_CAMPAIGN_UNKNOWN: { status: 404 },
  /** Cancelling a campaign that is finished, stopped or cancelled already. */
  ERR_CAMPAIGN_STATE: { status: 409 },
  /** A campaign made from a vulnerability while no vulnerability data is wired to campaigns. */
  ERR_CAMPAIGN_VULNERABILITY_UNAVAILABLE: { status: 501 },
  // managers and providers (cloud discovery)
  ERR_MANAGER_INVALID: { status: 400 },
  ERR_MANAGER_FILTER: { status: 400 },
  /** A manager body carries a credential in clear: only references (env names, profiles) are accepted. */
  ERR_MANAGER_SECRET: { status: 400 },
  ERR_MANAGER_UNKNOWN: { status: 404 },
  /** Deleting a manager holding nodes no other manager holds needs ?nodes=keep|delete|state:<state>. */
  ERR_MANAGER_NODES_CHOICE: { status: 400 },
  /** The cloud API refused or could not be reached (the cloud's own error is in the message). */
  ERR_PROVIDER: { status: 502, transient: true },
  // SSH credentials and agent bootstrap (docs/bootstrap.md); the task reasons name the same failures
  ERR_CREDENTIAL_INVALID: { status: 400 },
  ERR_CREDENTIAL_UNKNOWN: { status: 404 },
  /** No credential's selectors match the node. */
  ERR_CREDENTIAL_NONE: { status: 400 },
  /** Two or more credentials match the node equally specifically. */
  ERR_CREDENTIAL_AMBIGUOUS: { status: 409 },
  /** A credential's sealed secret does not open with this server's identity secret. */
  ERR_CREDENTIAL_SEALED: { status: 500 },
  ERR_BOOTSTRAP_DISABLED: { status: 400 },
  // a bootstrap job's relay_url that is neither a registered relay's nor allowed: admin only
  ERR_BOOTSTRAP_RELAY_URL: { status: 403 },
  /** The SSH server refused every authentication the credential offers. */
  ERR_BOOTSTRAP_AUTH: { status: 502 },
  /** The node's SSH host key is not the one pinned: nothing more is done until an admin clears the pin. */
  ERR_BOOTSTRAP_HOST_KEY_CHANGED: { status: 409 },
  /** The SSH connection could not be made or was lost. */
  ERR_BOOTSTRAP_CONNECT: { status: 502 },
  /** The sudo command failed without a password (absent, or not allowed). */
  ERR_BOOTSTRAP_NO_SUDO: { status: 502 },
  ERR_BOOTSTRAP_UNSUPPORTED_OS: { status: 502 },
  /** No agent package for the node's architecture (or the configured one failed its sha256). */
  ERR_BOOTSTRAP_NO_PACKAGE: { status: 500 },
  ERR_BOOTSTRAP_COPY: { status: 502 },
  ERR_BOOTSTRAP_INSTALL: { status: 502 },
  /** The installed agent sent no inventory with the job's secret within bootstrap.enrol_timeout. */
  ERR_BOOTSTRAP_ENROL_TIMEOUT: { status: 504 },
  ERR_BOOTSTRAP_COMMAND_TIMEOUT: { status: 504 },
  // relay-run bootstrap: the task cannot be sealed to the relay (no RSA certificate), or the relay cannot open it
  ERR_BOOTSTRAP_RELAY: { status: 409 },
  ERR_BOOTSTRAP_SEALED: { status: 502 },
  // the remote admin CLI (capstan): never an HTTP answer, the status says what kind of failure it is
  /** A file named on the command line (token, CA) cannot be read; exit 2. */
  ERR_CLI_FILE: { status: 400 },
  /** A policy-as-code directory or file is not laid out or written as docs/cli.md says; exit 2. */
  ERR_POLICY_FILE: { status: 400 },
  /** The server could not be reached: connection, DNS, TLS, timeout; exit 3. */
  ERR_UNREACHABLE: { status: 502, transient: true },
  /** The server's answer is not the API's: invalid JSON, an error without a code; exit 1 (4 for a 4xx). */
  ERR_BAD_ANSWER: { status: 502 },
  // vulnerability feeds (docs/vulnerabilities.md): a bad entry is skipped and counted, the import goes on
  /** An OSV entry that is not JSON, or not the OSV schema (the message names the field). */
  ERR_OSV_INVALID: { status: 400 },
  /** An OSV entry (a file or a zip member) over the per-entry size limit: skipped unread. */
  ERR_OSV_TOO_LARGE: { status: 413 },
  /** A feed over its total size or entry count limit: the import stops there. */
  ERR_FEED_TOO_LARGE: { status: 413 },
  /** A feed source that is not a .json file, a .zip of them or a directory. */
  ERR_FEED_SOURCE: { status: 400 },
  /** A CISA KEV catalogue that is not its JSON, or an entry without a CVE id. */
  ERR_KEV_INVALID: { status: 400 },
  /** An EPSS file without its header, or a row that is not `cve,epss,percentile`. */
  ERR_EPSS_INVALID: { status: 400 },
  /** A CVSS vector that does not have every base metric once with a valid value. */
  ERR_CVSS_VECTOR: { status: 400 },
  /** A vulnerability mute without a target, a reason or a valid expiry. */
  ERR_MUTE_INVALID: { status: 400 },
  /** A mute id that exists already. */
  ERR_MUTE_EXISTS: { status: 409 },
  /** A downloaded feed whose SHA-256 is not its checksum file's: not imported. */
  ERR_FEED_CHECKSUM: { status: 502 },
  /** A feed URL that could not be fetched (connection, status, time-out): retried at the next refresh. */
  ERR_FEED_FETCH: { status: 502, transient: true },
  // storage and network: worth a retry
  ERR_STORE: { status: 503, transient: true },
  ERR_SPOOL_FULL: { status: 507, transient: true },
  /** An upload under the name of a file the spool holds with different bytes: the first is kept, never replaced. */
  ERR_SPOOL_CONFLICT: { status: 409, transient: true },
  ERR_IO: { status: 500, transient: true },
  ERR_UPSTREAM: { status: 502, transient: true },
  ERR_UPSTREAM_REJECTED: { status: 502 },
  /** Too much queued already (e.g. relay artifact downloads): come back after Retry-After. */
  ERR_BUSY: { status: 503, transient: true },
  /** A stored run log whose bytes (or its node-day base's) cannot be read: damaged on disk or by hand. */
  ERR_RUN_UNREADABLE: { status: 500 },
  ERR_INTERNAL: { status: 500 },
} as const satisfies Record<string, CodeSpec>;

export type ErrorCode = keyof typeof ERROR_CODES;

/** Build an error from the registry: the status and transience come from the code. */
export function capstanError(
  code: ErrorCode,
  message: string,
  opts: Omit<CapstanErrorOptions, 'statusCode' | 'transient'> & { statusCode?: number; transient?: boolean } = {},
): CapstanError {
  const spec: CodeSpec = ERROR_CODES[code];
  return new CapstanError(code, message, {
    ...opts,
    statusCode: opts.statusCode ?? spec.status,
    transient: opts.transient ?? spec.transient ?? false,
  });
}

export function isCapstanError(err: unknown): err is CapstanError {
  return err instanceof CapstanError;
}

/**
 * Decide a spooled file's fate: transient → keep and retry with backoff; permanent → failed/.
 * A Capstan error says which it is (its code's registry entry). Any other error — a system call,
 * the database driver, a library, a bug — is transient, whatever its code: a file stays put and
 * the log says why, which an admin can act on, where a wrongly failed file is easy to miss. Code
 * that knows an outside error means bad input wraps it in a permanent Capstan error first.
 */
export function isTransient(err: unknown): boolean {
  return err instanceof CapstanError ? err.transient : true;
}

/** The JSON body every API answers an error with (admin API). Never carries secrets or stacks. */
/** Details some codes show in the error body: where a filter went wrong, which node holds an address. */
const PUBLIC_DETAILS: Record<string, readonly string[]> = { ERR_FILTER_SYNTAX: ['position'], ERR_ADDRESS_TAKEN: ['node'], ERR_MUTE_INVALID: ['field'] };

export function errorBody(err: unknown): { error: { code: string; message: string; [k: string]: unknown } } {
  if (err instanceof CapstanError) {
    const shown = (PUBLIC_DETAILS[err.code] ?? []).filter((k) => err.details?.[k] !== undefined);
    return { error: { code: err.code, message: err.message, ...Object.fromEntries(shown.map((k) => [k, err.details![k]])) } };
  }
  return { error: { code: 'ERR_INTERNAL', message: 'internal error' } };
}
