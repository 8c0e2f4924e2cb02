/** capstan-server's configuration schema (see packaging/etc/capstan/server.toml). */
import { loadConfig, type ConfigOf, type LoadConfigOptions } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { DEFAULT_SERVER_LISTEN } from '@capstan/shared/protocol';
import { checkHttpLimits, HTTP_LIMITS_SCHEMA } from '@capstan/toolkit/http/limits';
import { checkListenerTlsConfig, LISTENER_TLS_SCHEMA } from '@capstan/toolkit/http/tls';
import { RETRY_SCHEMA, SPOOL_SCHEMA } from '@capstan/toolkit/spool/schema';
import { enrollmentRules } from './registry/enrollment.js';
import { DATABASE_SCHEMA } from './store/settings.js';
import { KEPT_SWEEP_STEP } from './store/compliance/kept.js';
import { identitySettings } from './identity/settings.js';
import { vulnSettings } from './vulns/settings.js';

export const SERVER_SCHEMA = {
  general: {
    listen: { type: 'listen', default: DEFAULT_SERVER_LISTEN },
    /** Database (SQLite), spool, admin token and keys live here. */
    data_dir: { type: 'string', default: '/var/lib/capstan/server' },
    /** The root's own node id, answered by GET /uuid. */
    node_id: { type: 'string', default: 'root' },
  },
  /** The listener's certificate; plain HTTP only on loopback unless allow_plaintext (see relayd's [tls]). */
  tls: LISTENER_TLS_SCHEMA,
  /** What one client may cost the listener (see relayd's [http]). */
  http: HTTP_LIMITS_SCHEMA,
  database: DATABASE_SCHEMA,
  limits: {
    /** Largest upload accepted (compressed, as sent). */
    max_body_size: { type: 'size', default: '32MiB', min: 1 },
    /** Largest run log or inventory after decompression. */
    max_decompressed_size: { type: 'size', default: '64MiB', min: 1 },
    max_reports: { type: 'integer', default: 200000, min: 1 },
    max_line_length: { type: 'size', default: '1MiB', min: 1 },
    /** Runs dated further than this ahead of the server's clock are refused (ERR_RUN_IN_FUTURE). */
    max_clock_skew: { type: 'duration', default: '10m', min: 1000 },
    /** Deepest nesting of arrays and objects in an admin API JSON body. */
    max_json_depth: { type: 'integer', default: 64, min: 2, max: 1000 },
    /** Largest OCS inventory (a RUDDER agent's XML) once decompressed: over it ERR_OCS_TOO_LARGE. */
    ocs_max_size: { type: 'size', default: '32MiB', min: 1 },
    /** Deepest element nesting in an OCS inventory (real ones nest 5 deep): over it ERR_OCS_TOO_DEEP. */
    ocs_max_depth: { type: 'integer', default: 16, min: 4, max: 1000 },
    /** Most elements in one OCS inventory (a package is about ten): over it ERR_OCS_TOO_LARGE. */
    ocs_max_elements: { type: 'integer', default: 1000000, min: 100 },
    /**
     * Failed authentications (401 on the admin API or the console's sign-in) one address may make
     * in auth_failure_window; from there it is answered 429 ERR_AUTH_RATE_LIMITED until the window ends. 0: no limit.
     */
    auth_failures: { type: 'integer', default: 20, min: 0, max: 1000000 },
    auth_failure_window: { type: 'duration', default: '5m', min: 1000 },
    /**
     * Filtered (`q=`) or exported (CSV) reads of the admin API one caller may have in progress at
     * once, and the whole server; one more → 429 ERR_READ_BUSY. 0: no limit.
     */
    expensive_reads_per_caller: { type: 'integer', default: 8, min: 0, max: 10000 },
    expensive_reads_total: { type: 'integer', default: 32, min: 0, max: 100000 },
    /** How long an OCS inventory waits for its `.sign` (or a `.sign` for its inventory): then ERR_OCS_UNPAIRED. */
    ocs_pair_wait: { type: 'duration', default: '10m', min: 1 },
  },
  signatures: {
    /** Accept run logs, inventories and renewal requests signed with SHA-1 (old agents); logged at start. */
    allow_sha1: { type: 'boolean', default: false },
  },
  /** The spool in the data directory. */
  spool: SPOOL_SCHEMA,
  processing: {
    /** Run logs and inventories ingested at the same time. */
    concurrency: { type: 'integer', default: 4, min: 1, max: 64 },
    /** Threads verifying, decompressing and parsing run logs; 0: one per core. */
    workers: { type: 'integer', default: 0, min: 0, max: 64 },
    /**
     * Run logs handed to each worker ahead of its work: up to batch_size of them (it prepares the
     * next batch while one commits), and beyond two at most this many bytes as received.
     */
    worker_hold_size: { type: 'size', default: '4MiB', min: 0 },
    /** Most run logs stored in one transaction (one commit and one fsync for all of them). */
    batch_size: { type: 'integer', default: 64, min: 1, max: 1000 },
    /** Longest a run log waits for its batch to fill (at once when nothing else is coming); why 200 ms: docs/capacity.md. */
    batch_window: { type: 'duration', default: '200ms', min: 0 },
    /**
     * Run logs of upload batches (what relays send) ingested straight from memory at once; past
     * it, a batch's run logs are spooled first and ingested from incoming/, as a PUT's are.
     */
    max_in_memory: { type: 'integer', default: 1024, min: 0, max: 100000 },
    /**
     * Bytes of decompressed run logs and inventories in flight at once, all of them together
     * (worker threads, the batch path, OCS and JSON inventories): past it a decompression waits,
     * then its file is retried later. At least limits.max_decompressed_size.
     */
    decompress_budget: { type: 'size', default: '256MiB', min: 1048576 },
    /**
     * A spooled file whose ingest was under way this many times when the server died (killed
     * out of memory, by the watchdog…) is moved to spool/quarantine/<kind>/ with a reason
     * instead of being ingested again; 0: never.
     */
    quarantine_after: { type: 'integer', default: 3, min: 0, max: 1000 },
    /** Threads that write uploads of up to 1 MiB to the spool (larger ones stream); 0: the event loop's pool. */
    writer_threads: { type: 'integer', default: 2, min: 0, max: 16 },
    /** Ingested files kept in spool/free/ to be overwritten by the next uploads (see relayd's [spool] recycle_files); 0: unlink. */
    recycle_files: { type: 'integer', default: 4096, min: 0, max: 1_000_000 },
    recycle_size: { type: 'size', default: '256MiB' },
    /** Threads reading inventories (decompress, parse, map, verify), started with the first one. */
    inventory_workers: { type: 'integer', default: 1, min: 1, max: 16 },
    /** Longest one inventory may take on its thread: past it ERR_INVENTORY_TOO_COSTLY (failed/). */
    inventory_time_limit: { type: 'duration', default: '10s', min: 100 },
    /** Heap of each inventory thread: past it ERR_INVENTORY_TOO_COSTLY. */
    inventory_memory: { type: 'size', default: '512MiB', min: 16777216 },
    /** Inventories waiting for a thread, accepted nodes' first: past it ERR_INVENTORY_BUSY (retried later). */
    inventory_queue: { type: 'integer', default: 64, min: 1, max: 100000 },
    /** Inventories up to this size decompressed are read on the event loop (a few ms), not handed to a thread; 0: none. */
    inventory_inline_size: { type: 'size', default: '256KiB', min: 0, max: 1048576 },
    ...RETRY_SCHEMA,
  },
  enrollment: {
    /** Comma-separated globs (`*`, `?`): nodes whose id matches are accepted on their first inventory. */
    auto_accept_node_ids: { type: 'string', default: '', optional: true },
    /** Comma-separated globs, case-insensitive, matched against the inventory's hostname. */
    auto_accept_hostnames: { type: 'string', default: '', optional: true },
    /** Shared secret an agent may carry in its inventory (`enrollment_secret`); at least 16 characters. */
    secret: { type: 'string', default: '', optional: true },
    /** Longest the answer to an agent's own inventory waits for it to be registered, to carry a newcomer's token; 0: at once. */
    token_wait: { type: 'duration', default: '5s', min: 0, max: 30000 },
  },
  lifecycle: {
    /** How often agents run: a node is unreachable after `missed_runs` of these without contact. */
    run_interval: { type: 'duration', default: '5m', min: 1000 },
    missed_runs: { type: 'integer', default: 3, min: 1, max: 10000 },
    /** Silence after which a node's state becomes `missing`. */
    missing_after: { type: 'duration', default: '1d', min: 1000 },
    /** Missing and terminated nodes are deleted this long after their last state change. */
    purge_after: { type: 'duration', default: '30d', min: 1000 },
    sweep_interval: { type: 'duration', default: '1m', min: 1000 },
    purge_batch_size: { type: 'integer', default: 50, min: 1, max: 10000 },
  },
  compliance: {
    /**
     * A node whose policy changed is `applying` until a run of the new policy arrives, for at most
     * one run interval plus this grace; after it, the last run is judged against the new policy.
     */
    applying_grace: { type: 'duration', default: '5m', min: 0 },
    /**
     * How often the fleet compliance counters move their time thresholds to now (nodes that went
     * silent or stopped applying change counters; on PostgreSQL the triggers' logs are folded in).
     * Reads are exact whatever it is; it keeps them fast.
     */
    kept_sweep_interval: { type: 'duration', default: '30s', min: 1000 },
    /** Most nodes a sweep moves per transaction (under the lock compliance writers wait for); more take several steps. */
    kept_sweep_step: { type: 'integer', default: KEPT_SWEEP_STEP, min: 1, max: 1000000 },
  },
  changes: {
    /** Most changes recorded per run log; one more entry says how many were left out. */
    max_per_run: { type: 'integer', default: 1000, min: 1, max: 100000 },
    /** Longest change message kept (characters); longer ones are cut. */
    max_message_length: { type: 'integer', default: 4096, min: 64, max: 1048576 },
    /** Largest diff kept per change (characters); a longer one is cut and marked truncated. */
    max_diff_length: { type: 'integer', default: 65536, min: 0, max: 16777216 },
  },
  retention: {
    /** Runs are kept this long after they started (whole UTC days). */
    runs: { type: 'duration', default: '7d', min: 86400000 },
    /** Lifecycle history entries are kept this long. */
    history: { type: 'duration', default: '90d', min: 86400000 },
    /** Changes (repairs, with their diffs) are kept this long: longer than runs. */
    changes: { type: 'duration', default: '90d', min: 86400000 },
    /** Events (GET /api/1/events) are kept this long, and the deliveries of them that are done (delivered or dead). */
    events: { type: 'duration', default: '30d', min: 86400000 },
    /** Closed findings are kept this long after they closed; open ones are kept while open. */
    findings: { type: 'duration', default: '90d', min: 86400000 },
    /** Audit records (every write through the admin API) are kept this long. */
    audit: { type: 'duration', default: '365d', min: 86400000 },
    /** At most this many audit records are kept: the oldest beyond it are deleted by the sweep (bounded space, about 300 bytes a record). */
    audit_max_rows: { type: 'integer', default: 1000000, min: 1000, max: 1000000000 },
    /** Rows deleted or updated per transaction by the sweep, so ingestion is never held up long. */
    batch_size: { type: 'integer', default: 1000, min: 1, max: 100000 },
  },
  identity: {
    /** Policy downloads (GET /policies/<node>/rules) need a valid token of that node; shared-folder downloads one of any node. */
    require_token: { type: 'boolean', default: true },
    /**
     * What only a relay may do (the remote-run link and its output posts, the providers
     * endpoints) needs the relay's own token: a node registered as a relay, naming the relay in
     * the path. false lets anyone who reaches the server act as any relay: only while relays too
     * old to send a token link here.
     */
    require_relay_token: { type: 'boolean', default: true },
    /** Lifetime of node identity tokens (no eternal tokens: 0 is refused). */
    token_ttl: { type: 'duration', default: '24h', min: 1000 },
    /** Per node group: comma-separated `group=duration` (e.g. `laptops=8h, dc1=72h`); first group of a node that has one wins. */
    group_ttls: { type: 'string', default: '', optional: true },
    /** Algorithm of new signing keys: EdDSA (Ed25519) or RS256. */
    key_alg: { type: 'string', default: 'EdDSA' },
    /** Clock difference allowed when the server checks a token's nbf/exp. */
    clock_skew: { type: 'duration', default: '60s' },
    /**
     * Secret sealing the signing keys kept in the database; empty → <data_dir>/identity.secret,
     * made at the first start. Every server sharing a database needs the same file.
     */
    secret_file: { type: 'string', default: '', optional: true },
  },
  policy: {
    /**
     * Files that file_from_shared_folder directives name, served to relays at
     * /rudder/relay-api/1/shared-folder/, and the templates file_from_template directives name by
     * `source`, rendered by the server for each node. Empty: none.
     */
    shared_folder: { type: 'string', default: '', optional: true },
    /**
     * Every node's policy is checked this often (unchanged nodes cost a read): group filters on
     * what no event announces (status, state, a provider's tags, another server's changes). 0: off.
     */
    regenerate_interval: { type: 'duration', default: '15m' },
    /** How often file_from_template's templates are checked (a stat each; an edited one regenerates its nodes). 0: off. */
    template_check_interval: { type: 'duration', default: '10s' },
    /**
     * Threads rendering nodes' policies with their data while the event loop writes the batch
     * before: -1, one per core but the event loop's (at most 4); 0, none (rendered in the event
     * loop). Used by a batch of 64 nodes or more rendered on their own.
     */
    render_threads: { type: 'integer', default: -1, min: -1, max: 16 },
    /** PostgreSQL: a generation's batches written at once, each on a pooled connection (SQLite: one at a time). */
    write_batches: { type: 'integer', default: 2, min: 1, max: 8 },
    /** How long a changed node (inventory, acceptance) waits for others to share its generation; 0: a turn of the event loop. */
    touch_window: { type: 'duration', default: '100ms', min: 0, max: 10000 },
    /**
     * The largest body of POST /api/1/policy/plan: a whole policy (every directive, group and
     * rule) in one request, where other admin bodies are one object (1 MiB). Within limits.max_body_size.
     */
    max_plan_size: { type: 'size', default: '16MiB', min: 1024 },
    /** Longest POST /api/1/policy/plan runs: past it ERR_PLAN_TIMEOUT (503). */
    plan_time_limit: { type: 'duration', default: '30s', min: 100 },
    /** Plans one caller (admin token or console user) may have running at once: past it ERR_PLAN_BUSY (429). */
    plan_concurrency: { type: 'integer', default: 1, min: 1, max: 64 },
    /** Plans running at once on this server, all callers together: past it ERR_PLAN_BUSY (429). */
    plan_concurrency_total: { type: 'integer', default: 2, min: 1, max: 256 },
    /** Bytes of node data, renderings and results one plan may hold (plan-memory.ts); past it 413 ERR_PLAN_TOO_LARGE. */
    plan_memory_limit: { type: 'size', default: '64MiB', min: 1024 },
    /**
     * Admin roles whose policy changes must go through a change request reviewed by another
     * admin (docs/policy.md, Change requests): their direct saves and deletes are refused.
     */
    review_roles: { type: 'strings', default: [] },
  },
  jobs: {
    /** A job's tasks not final after this long are aborted (reason timeout), unless the job sets its own `timeout`. */
    default_timeout: { type: 'duration', default: '1h', min: 1000 },
    /** Finished and cancelled jobs are deleted this long after they ended. */
    retention: { type: 'duration', default: '30d', min: 1000 },
    /** How often timed-out tasks are aborted, expired jobs deleted and pending tasks dispatched again. */
    sweep_interval: { type: 'duration', default: '5s', min: 100 },
    /** Output kept per task (keep_output); beyond it the output is cut. */
    max_output: { type: 'size', default: '1MiB', min: 1024 },
    /** Most nodes one job may target (static nodes and selectors together). */
    max_targets: { type: 'integer', default: 100000, min: 1 },
    /** A relay handed a run has this long to open its output stream, or its tasks fail (no_answer). */
    answer_wait: { type: 'duration', default: '30s', min: 100 },
    /** Linked relays get a heartbeat line this often (keeps NAT and proxies open). */
    heartbeat: { type: 'duration', default: '25s', min: 100 },
  },
  campaigns: {
    /** How often due patch campaigns are advanced (a running wave's job looked at, a window opened). */
    tick_interval: { type: 'duration', default: '5s', min: 100 },
    /** Campaigns without a window: how long a node that was not reached waits before its retry. */
    retry_delay: { type: 'duration', default: '15m', min: 1000 },
    /** Attempts per node when a campaign says none (a node offline in a window is retried in the next). */
    max_attempts: { type: 'integer', default: 3, min: 1, max: 100 },
  },
  bootstrap: {
    /** Run bootstrap jobs (agent installs over SSH, docs/bootstrap.md) from this server. */
    enabled: { type: 'boolean', default: true },
    /** Nodes bootstrapped at the same time by this process. */
    concurrency: { type: 'integer', default: 4, min: 1, max: 256 },
    /** TCP connect, SSH handshake and authentication, together. */
    connect_timeout: { type: 'duration', default: '20s', min: 100 },
    /** Longest one command (dpkg, the copy of the package) may take on the node. */
    command_timeout: { type: 'duration', default: '5m', min: 100 },
    /** After the install, the agent's first inventory (with the job's secret) must arrive within this. */
    enrol_timeout: { type: 'duration', default: '10m', min: 100 },
    /** How often the enrol step looks for that inventory. */
    enrol_poll: { type: 'duration', default: '2s', min: 10 },
    /** Folder holding capstan-agent_<version>_<arch>.deb (npm run package); empty: <data_dir>/packages. */
    package_dir: { type: 'string', default: '', optional: true },
    /** Instead: an agent package to download (http or https), used for every architecture it says. */
    package_url: { type: 'string', default: '', optional: true },
    /** sha256 (hex) the downloaded package must have; required with package_url. */
    package_sha256: { type: 'string', default: '', optional: true },
    /** Largest package downloaded from package_url. */
    max_package_size: { type: 'size', default: '256MiB', min: 1024 },
    /** The relay (or server) URL written into the agent's configuration when a job names none. */
    relay_url: { type: 'string', default: '', optional: true },
    /**
     * More relay URLs an operator's bootstrap job may name, beyond relay_url and the URLs whose
     * host is a registered relay's; any other needs the admin role (docs/bootstrap.md).
     */
    allowed_relay_urls: { type: 'strings', default: [] },
    /** Prefix of the privileged commands on the node; empty when the credential logs in as root. */
    sudo: { type: 'string', default: 'sudo -n', optional: true },
    /** Run with sudo after the install to start the agent; empty: start nothing. */
    start_command: { type: 'string', default: 'systemctl enable --now capstan-agent.timer', optional: true },
    /** Where the package and configuration are copied first (a private directory is made in it). */
    remote_tmp: { type: 'string', default: '/tmp' },
    /**
     * Advanced and tests: install into this directory on the node instead of / (dpkg --root,
     * maintainer scripts under $DPKG_ROOT); the agent's state directory is put under it too.
     */
    install_root: { type: 'string', default: '/' },
  },
  providers: {
    /** Poll the managers whose provider is `server` (cloud discovery from the server itself). */
    enabled: { type: 'boolean', default: true },
    /** How often the list of server-hosted managers is re-read (changes made through the API). */
    refresh_interval: { type: 'duration', default: '30s', min: 100 },
  },
  console: {
    /** Serve the web console at GET / (same listener as the API). false: / answers 404. */
    enabled: { type: 'boolean', default: true },
    /** A console sign-in lasts this long (its cookie's Max-Age and the expiry sealed inside it); then sign in again. */
    signin_ttl: { type: 'duration', default: '8h', min: 60000 },
    /**
     * Secret sealing the console's sign-in cookies; empty → <data_dir>/console.secret, made at the
     * first start. Servers sharing a database behind one address need the same file.
     */
    secret_file: { type: 'string', default: '', optional: true },
    /** How often global compliance is recorded for the console's compliance-over-time graph. 0: never. */
    history_interval: { type: 'duration', default: '10m' },
    /** Recorded compliance is kept this long. */
    history_retention: { type: 'duration', default: '30d', min: 86400000 },
  },
  events: {
    /** Longest a GET /api/1/events long-poll waits for an event (its `wait` is capped here). */
    max_wait: { type: 'duration', default: '60s', min: 1000 },
    /** How often waiting readers (long-polls, Server-Sent Events streams) look for new events. */
    poll_interval: { type: 'duration', default: '500ms', min: 50 },
    /** Readers waiting at once (long-polls and streams together); beyond it ERR_TOO_MANY_READERS. */
    max_readers: { type: 'integer', default: 100, min: 1, max: 10000 },
  },
  notifications: {
    /** Deliver events to subscriptions (webhooks, e-mail) from this server. */
    enabled: { type: 'boolean', default: true },
    /** How often new events are collected into messages and due messages are sent. */
    poll_interval: { type: 'duration', default: '1s', min: 50 },
    /** A webhook request (connect, send, answer) taking longer fails and is retried. */
    webhook_timeout: { type: 'duration', default: '10s', min: 100 },
    /** Attempts before a message is given up (dead: listed, retried by hand). */
    max_attempts: { type: 'integer', default: 10, min: 1, max: 1000 },
    /** The first retry waits this long, each next one twice as long, up to max_backoff (± 20 %). */
    min_backoff: { type: 'duration', default: '10s', min: 10 },
    max_backoff: { type: 'duration', default: '1h', min: 10 },
    /** A subscription's group window when it sets none: the first event of a message waits this long for others. */
    group_window: { type: 'duration', default: '30s', min: 0 },
    /** Most events in one message; a burst beyond it makes several. */
    max_events: { type: 'integer', default: 1000, min: 1, max: 10000 },
    /** Flap damping: a node with more than flap_threshold state changes within flap_window is held back. */
    flap_window: { type: 'duration', default: '1h', min: 1000 },
    flap_threshold: { type: 'integer', default: 6, min: 1, max: 10000 },
    /** Messages this server sends at the same time. */
    concurrency: { type: 'integer', default: 4, min: 1, max: 64 },
  },
  smtp: {
    /** The SMTP server e-mail subscriptions are sent through; empty: e-mail subscriptions are refused. */
    host: { type: 'string', default: '', optional: true },
    port: { type: 'integer', default: 587, min: 1, max: 65535 },
    /** true: TLS from the connection's start (port 465); false: STARTTLS when the server offers it. */
    secure: { type: 'boolean', default: false },
    /** Refuse to send unless the connection is encrypted (STARTTLS required when secure is false). */
    require_tls: { type: 'boolean', default: false },
    user: { type: 'string', default: '', optional: true },
    /** A file holding the password (its first line); empty: no password. */
    password_file: { type: 'string', default: '', optional: true },
    /** The messages' From address. */
    from: { type: 'string', default: 'capstan@localhost' },
    /** Connecting, and each SMTP command, taking longer fails the message (retried). */
    timeout: { type: 'duration', default: '30s', min: 100 },
  },
  vulnerabilities: {
    /** OSV feeds, each `name=source`: an http(s) URL fetched at each refresh, or a path (.json, .zip, directory) an admin keeps up to date. */
    feeds: { type: 'strings', default: [] },
    /** Checksum files, each `name=source` (a feed's name, `kev` or `epss`): sha256sum lines; the feed's file must match its line. */
    checksums: { type: 'strings', default: [] },
    /** CISA's KEV catalogue (URL or path); empty: none. */
    kev: { type: 'string', default: '', optional: true },
    /** FIRST's EPSS scores, .csv or .csv.gz (URL or path); empty: none. */
    epss: { type: 'string', default: '', optional: true },
    /** How often feeds are refreshed; 0: only on demand (POST /api/1/vulnerabilities/feeds/refresh). */
    interval: { type: 'duration', default: '6h' },
    /** A feed whose own date is older than this is reported stale. */
    stale_after: { type: 'duration', default: '3d', min: 60000 },
    /** One download's size (as sent). */
    max_download_size: { type: 'size', default: '2GiB', min: 1024 },
    /** A download (headers, then the body) taking longer fails. */
    fetch_timeout: { type: 'duration', default: '10m', min: 1000 },
    /** One advisory (a file or zip member, uncompressed). */
    max_entry_size: { type: 'size', default: '4MiB', min: 1024 },
    /** A whole OSV feed, uncompressed. */
    max_feed_size: { type: 'size', default: '8GiB', min: 1024 },
    /** Entries in one OSV feed. */
    max_entries: { type: 'integer', default: 2000000, min: 1 },
    /** Advisories changed by one refresh above which every node is matched again rather than those holding their packages. */
    rematch_all_above: { type: 'integer', default: 2000, min: 0 },
  },
  log: {
    level: { type: 'level', default: 'info' },
  },
} as const;

export type ServerConfig = ConfigOf<typeof SERVER_SCHEMA>;

/** Load, then the checks that span keys or need more than a type (exit 2 like any config error). */
export function loadServerConfig(opts: LoadConfigOptions): ServerConfig {
  const config = loadConfig(SERVER_SCHEMA, opts);
  checkListenerTlsConfig(config.tls, config.general.listen);
  checkHttpLimits(config.http);
  vulnSettings(config.vulnerabilities);
  enrollmentRules(config.enrollment);
  identitySettings(config.identity);
  const unreachableAfter = config.lifecycle.run_interval * config.lifecycle.missed_runs;
  if (config.lifecycle.missing_after < unreachableAfter) {
    throw capstanError('ERR_CONFIG', 'lifecycle.missing_after must be at least run_interval × missed_runs (a node is unreachable before it is missing)');
  }
  if ((config.bootstrap.package_url === '') !== (config.bootstrap.package_sha256 === '')) {
    throw capstanError('ERR_CONFIG', 'bootstrap.package_url and bootstrap.package_sha256 go together');
  }
  if (config.bootstrap.package_sha256 !== '' && !/^[0-9a-f]{64}$/i.test(config.bootstrap.package_sha256)) {
    throw capstanError('ERR_CONFIG', 'bootstrap.package_sha256 must be 64 hexadecimal digits');
  }
  if (config.bootstrap.package_url !== '' && !/^https?:\/\//.test(config.bootstrap.package_url)) {
    throw capstanError('ERR_CONFIG', 'bootstrap.package_url must be an http or https URL');
  }
  // A sign-in outliving a month is a credential nobody remembers handing out.
  if (config.console.signin_ttl > 30 * 86_400_000) throw capstanError('ERR_CONFIG', 'console.signin_ttl must be at most 30d');
  if (config.database.replicas.length > 0 && !/^postgres(ql)?:\/\//.test(config.database.url)) {
    throw capstanError('ERR_CONFIG', 'database.replicas need a PostgreSQL primary in database.url');
  }
  for (const r of config.database.replicas) {
    if (!/^postgres(ql)?:\/\/\S+$/.test(r)) throw capstanError('ERR_CONFIG', 'database.replicas: each is a postgres:// URL');
  }
  if (config.console.history_interval !== 0 && config.console.history_interval < 10_000) {
    throw capstanError('ERR_CONFIG', 'console.history_interval must be 0 (off) or at least 10s');
  }
  if (!config.bootstrap.install_root.startsWith('/')) throw capstanError('ERR_CONFIG', 'bootstrap.install_root must be an absolute path');
  const roles = ['admin', 'operator', 'viewer'];
  const wrong = config.policy.review_roles.find((r) => !roles.includes(r));
  if (wrong !== undefined) throw capstanError('ERR_CONFIG', `policy.review_roles: ${JSON.stringify(wrong)} is not a role (admin, operator, viewer)`);
  if (config.processing.decompress_budget < config.limits.max_decompressed_size) {
    throw capstanError('ERR_CONFIG', 'processing.decompress_budget must be at least limits.max_decompressed_size');
  }
  if (config.notifications.max_backoff < config.notifications.min_backoff) throw capstanError('ERR_CONFIG', 'notifications.max_backoff must be at least min_backoff');
  if (config.smtp.user !== '' && config.smtp.host === '') throw capstanError('ERR_CONFIG', 'smtp.user needs smtp.host');
  return config;
}
