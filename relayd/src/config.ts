/**
 * relayd's configuration schema: every key, its type and its default (see
 * packaging/etc/capstan/relayd.toml, which lists them all commented at these defaults).
 * `checkRelaydConfig` adds the cross-field rules a schema cannot say.
 */
import { loadConfig, type ConfigOf, type LoadConfigOptions } from '@capstan/shared/config';
import { capstanError } from '@capstan/shared/errors';
import { DEFAULT_RELAYD_LISTEN, DEFAULT_SERVER_LISTEN } from '@capstan/shared/protocol';
import { checkHttpLimits, HTTP_LIMITS_SCHEMA } from '@capstan/toolkit/http/limits';
import { checkListenerTlsConfig, LISTENER_TLS_SCHEMA } from '@capstan/toolkit/http/tls';
import { RETRY_SCHEMA, SPOOL_SCHEMA } from '@capstan/toolkit/spool/schema';

export const RELAYD_SCHEMA = {
  general: {
    /** This relay's node id, answered by GET /uuid. */
    node_id: { type: 'string', default: 'root' },
    listen: { type: 'listen', default: DEFAULT_RELAYD_LISTEN },
    /** RUDDER's nodeslist.json: nodes below this relay. Empty → every node is forwarded. */
    nodes_list_file: { type: 'string', default: '', optional: true },
    /**
     * File holding a bearer token that opens system/* and remote-run/* to non-loopback clients.
     * Empty → those endpoints answer loopback only.
     */
    admin_token_file: { type: 'string', default: '', optional: true },
    /**
     * V8 grows its heap to (1 + this/100) × the live size before a full collection; 0 = V8's own
     * factor (up to 4×). 20 kept relayd's peak RSS at 134 MB instead of 213 MB under the bench's
     * upload burst with 10,000 agent connections, for a few more full collections.
     */
    heap_growing_percent: { type: 'integer', default: 20, min: 0, max: 400 },
  },
  nodes_sync: {
    /**
     * Fetch the accepted nodes from the upstream (GET /rudder/relay-api/1/nodes) and route by
     * them when no nodes_list_file is set (the file wins). Cached on disk for restarts.
     */
    enabled: { type: 'boolean', default: true },
    interval: { type: 'duration', default: '5m', min: 1000 },
    /**
     * Refuse for good (failed/, RUDDER's semantics) a run log from a node the synced list does
     * not know, once a list fetched after the file arrived confirms it. false: such files go up
     * and the upstream decides (it refuses unknown and pending nodes itself).
     */
    refuse_unknown: { type: 'boolean', default: false },
    /** A run log from a node the list does not know refreshes it, at most this often (refuse_unknown). */
    miss_refresh: { type: 'duration', default: '5s', min: 10 },
    /** Where the synced list is cached; empty → <spool.directory>/nodes-list.json. */
    cache_file: { type: 'string', default: '', optional: true },
  },
  /** The agent-facing listener's certificate; plain HTTP only on loopback unless allow_plaintext. */
  tls: LISTENER_TLS_SCHEMA,
  /** What one client may cost the listener: header timeout and size, upload pace, uploads per address. */
  http: HTTP_LIMITS_SCHEMA,
  spool: {
    directory: { type: 'string', default: '/var/spool/capstan/relayd' },
    /** Largest upload accepted by PUT /reports and /inventories. */
    max_file_size: { type: 'size', default: '64MiB', min: 1 },
    /** Refuse uploads (507) when the files waiting in incoming/ would exceed this; 0 = no quota. */
    max_size: { type: 'size', default: '0' },
    ...SPOOL_SCHEMA,
    /**
     * Threads that write uploads of up to 1 MiB to disk (larger ones stream); 0: the event loop's
     * pool. Off by default on relays: they take ~50 µs of event-loop time off each upload, but
     * they cost RSS, and a relay's uploads are bounded by the disk's journal commits before its
     * event loop (relay bench, 10,000 idle connections: same PUT/s; peak 141 MB without, 175 MB
     * with one thread, 180–193 MB with two).
     */
    writer_threads: { type: 'integer', default: 0, min: 0, max: 16 },
    /**
     * Forwarded files kept in free/ (at most this many, and recycle_size bytes) and overwritten by
     * the next uploads, instead of a create and an unlink per file: on ext4 that churn made inode
     * allocation the relay's largest kernel cost (relay bench: 117-126 µs of kernel CPU per file
     * instead of 283-1,059). 0: unlink. Released first when disk space runs short. Sized for the
     * bursts a relay takes (a backlog after an upstream outage, a fleet's runs arriving faster
     * than the upstream takes them): a burst larger than the pool creates files, and a pool too
     * small to take them back unlinks them, which is what makes the next creates slow.
     */
    recycle_files: { type: 'integer', default: 4096, min: 0, max: 1_000_000 },
    recycle_size: { type: 'size', default: '256MiB' },
  },
  upstream: {
    url: { type: 'url', default: `http://${DEFAULT_SERVER_LISTEN}` },
    /**
     * More upstreams, in order (several roots on one database, relays side by side): when the one
     * in use does not answer (no connection, a timeout, 502/503/504), the next takes over, and a
     * probe while down tries each in turn. They share the trust settings below.
     */
    fallback_urls: { type: 'strings', default: [] },
    timeout: { type: 'duration', default: '30s', min: 1 },
    /** Files forwarded at the same time (connections kept alive to the upstream). */
    concurrency: { type: 'integer', default: 8, min: 1, max: 256 },
    /**
     * Run logs sent up together in one request (`POST /batch/reports`), each connection carrying
     * a batch at a time: one request for many files instead of one each, where HTTP was most of
     * the relay's CPU per file. 1: one PUT per file, as RUDDER's relays send. An upstream that
     * does not take batches (an older relay or server) is sent PUTs.
     */
    batch_files: { type: 'integer', default: 64, min: 1, max: 65535 },
    /** Most bytes in one batch; a larger file goes up alone, by PUT. At most the upstream's [http] max_batch_size. */
    batch_size: { type: 'size', default: '4MiB', min: 1024 },
    /** How long a batch that is not full waits for more files while others are on their way up. */
    batch_wait: { type: 'duration', default: '5ms', min: 0 },
    /** https upstream: trust exactly this certificate (RUDDER's cert_pinning; host name not checked). */
    pinned_cert_file: { type: 'string', default: '', optional: true },
    /** https upstream: trust this CA bundle (host name checked). Empty with no pin → system CAs. */
    ca_file: { type: 'string', default: '', optional: true },
    /** While the upstream is unreachable, how often it is probed (files wait instead of retrying). */
    probe_interval: { type: 'duration', default: '2s', min: 10 },
  },
  processing: {
    ...RETRY_SCHEMA,
    /**
     * A RUDDER agent's OCS inventory and its `.sign` are two uploads forwarded as one pair: a half
     * still alone after this long goes to failed/ (ERR_OCS_UNPAIRED).
     */
    ocs_pair_wait: { type: 'duration', default: '10m', min: 1 },
    /** SIGTERM waits this long for forwards in flight before abandoning them (they stay spooled). */
    shutdown_grace: { type: 'duration', default: '10s' },
  },
  shared_files: {
    /** Where HEAD|PUT shared-files/<target>/<source>/<file> store; empty → the routes answer 404. */
    path: { type: 'string', default: '', optional: true },
    max_body_size: { type: 'size', default: '50MiB', min: 1 },
    /** Expired shared files are removed this often. */
    cleanup_interval: { type: 'duration', default: '10m', min: 1000 },
  },
  policies: {
    /** Where GET /policies/<node>/rules keeps each node's signed policy; empty → <spool.directory>/cache/policies. */
    cache_dir: { type: 'string', default: '', optional: true },
    /** A cached policy younger than this is served without asking the upstream; 0 → always revalidate (a 304 when unchanged). */
    max_age: { type: 'duration', default: '0' },
    /** Long-poll the upstream for the nodes whose policy changed, and revalidate those at once (push hints). */
    push_hints: { type: 'boolean', default: true },
    /** How long one hint poll waits upstream for a change (at most 60s). */
    hint_wait: { type: 'duration', default: '30s', min: 1000 },
  },
  shared_folder: {
    /** Root served by HEAD|GET shared-folder/<path>; empty → files come from the upstream (below), cached. */
    path: { type: 'string', default: '', optional: true },
    /** With path empty: fetch files from the upstream's shared folder and cache them; false → every file 404. */
    from_upstream: { type: 'boolean', default: true },
    /** Where upstream files are cached by sha256; empty → <spool.directory>/cache/shared-folder. */
    cache_dir: { type: 'string', default: '', optional: true },
    /** A cached file asked for without ?hash= is served without asking the upstream for this long. */
    max_age: { type: 'duration', default: '1m' },
    /** Upstream downloads at the same time (the governor); requests for one file share one download. */
    max_downloads: { type: 'integer', default: 8, min: 1, max: 1024 },
    /** Downloads waiting for a slot at most; beyond, 503 with Retry-After (agents retry with jitter). */
    max_queued: { type: 'integer', default: 1000, min: 0 },
    /** Largest file fetched from the upstream. */
    max_file_size: { type: 'size', default: '512MiB', min: 1 },
  },
  remote_run: {
    enabled: { type: 'boolean', default: true },
    /** A target not connected yet is waited for this long, then reported offline. */
    connect_wait: { type: 'duration', default: '2s' },
    /** A synchronous remote run is answered after this long at most (the runs go on). */
    max_duration: { type: 'duration', default: '10m', min: 1000 },
    /** Idle agent connections get a heartbeat line this often (keeps NAT and proxies open). */
    heartbeat: { type: 'duration', default: '25s', min: 100 },
    /** Agent connections held at most; more are refused with 503. */
    max_connections: { type: 'integer', default: 20000, min: 1 },
    /** Keep a connection to the upstream relay so that runs can be triggered from above. */
    link_upstream: { type: 'boolean', default: false },
  },
  identity: {
    /**
     * Require a valid node token (Authorization: Bearer, verified against the upstream's JWKS)
     * on policy and shared-folder downloads and on agents' remote-run connections. false only
     * for agents that send none (RUDDER agents fetching shared-folder files).
     */
    require_token: { type: 'boolean', default: true },
    /**
     * Require a relay's own token (`capstan_role: "relay"`, naming it) on sub-relays' remote-run
     * links (`/remote-run/listen/<id>?relay=1`) and their output posts, verified like agents'
     * tokens. false only while sub-relays too old to send one link here: anyone could then link
     * under any node id and take its runs.
     */
    require_relay_token: { type: 'boolean', default: true },
    /**
     * This relay's node key and UID=<general.node_id> certificate, made at the first start that
     * needs them (remote_run.link_upstream or providers.enabled) or by `capstan-relayd --identity`;
     * empty → <spool.directory>/relay.key (0600) and relay.cert. An admin registers the relay at
     * the server with that certificate (POST /api/1/nodes {id, hostname, certificate, relay: true}).
     */
    key_file: { type: 'string', default: '', optional: true },
    cert_file: { type: 'string', default: '', optional: true },
    /** RSA key size of the key made when key_file is absent. */
    key_bits: { type: 'integer', default: 2048, min: 2048, max: 8192 },
    /** This relay's own token (0600), renewed by signed request; empty → <spool.directory>/relay.token. */
    token_file: { type: 'string', default: '', optional: true },
    /** Clock difference allowed when checking a token's nbf/exp. */
    clock_skew: { type: 'duration', default: '60s' },
    /** Where the upstream's public keys are cached; empty → <spool.directory>/jwks.json. */
    jwks_cache_file: { type: 'string', default: '', optional: true },
    /** An unknown key id refetches the JWKS at most this often. */
    jwks_min_refresh: { type: 'duration', default: '10s' },
    /** The JWKS is refetched in the background when older than this. */
    jwks_max_age: { type: 'duration', default: '1h', min: 1000 },
  },
  providers: {
    /**
     * Host the discovery providers of the managers assigned to this relay (provider = this
     * node_id): fetch them from the upstream, poll each cloud from here, post what is found.
     * Off by default: this host's cloud credentials are used only when its admin says so.
     */
    enabled: { type: 'boolean', default: false },
    /** How often the assigned managers are fetched again from the upstream. */
    refresh_interval: { type: 'duration', default: '1m', min: 100 },
  },
  bootstrap: {
    /**
     * Run the bootstrap (agent install over SSH, docs/bootstrap.md) of the nodes whose manager
     * this relay hosts, from here: tasks are fetched from the upstream with their secrets sealed
     * to this relay's key, and every step is reported back. Off by default: outbound SSH from
     * this host happens only when its admin says so (the server then leaves those tasks pending).
     */
    enabled: { type: 'boolean', default: false },
    /** How often the upstream is asked for tasks. */
    poll_interval: { type: 'duration', default: '10s', min: 100 },
    /** Nodes bootstrapped at the same time by this relay. */
    concurrency: { type: 'integer', default: 4, min: 1, max: 64 },
    /**
     * The URL the bootstrapped agents reach this relay at (written as their `[agent] relay`);
     * empty: this relay's own address when it listens on a specific one, else the job's relay_url.
     */
    agent_url: { type: 'string', default: '', optional: true },
    /** Largest agent package downloaded (from the upstream or the server's package_url). */
    max_package_size: { type: 'size', default: '256MiB', min: 1 },
  },
  log: {
    level: { type: 'level', default: 'info' },
  },
} as const;

export type RelaydConfig = ConfigOf<typeof RELAYD_SCHEMA>;

/** Rules across keys: TLS needs both files and a non-loopback listener needs TLS; a pin and a CA are exclusive; retry bounds ordered. */
export function checkRelaydConfig(c: RelaydConfig): RelaydConfig {
  checkListenerTlsConfig(c.tls, c.general.listen);
  checkHttpLimits(c.http);
  if (c.upstream.pinned_cert_file !== '' && c.upstream.ca_file !== '') {
    throw capstanError('ERR_CONFIG', 'upstream.pinned_cert_file and upstream.ca_file are exclusive');
  }
  const urls = [c.upstream.url, ...c.upstream.fallback_urls];
  for (const u of c.upstream.fallback_urls) {
    if (!/^https?:\/\/\S+$/.test(u) || !URL.canParse(u)) throw capstanError('ERR_CONFIG', `upstream.fallback_urls: ${JSON.stringify(u)} is not an http(s) URL`);
  }
  if ((c.upstream.pinned_cert_file !== '' || c.upstream.ca_file !== '') && !urls.every((u) => u.startsWith('https:'))) {
    throw capstanError('ERR_CONFIG', 'upstream.pinned_cert_file and upstream.ca_file need https:// upstreams (upstream.url and every fallback_urls)');
  }
  if (c.processing.retry_min > c.processing.retry_max) {
    throw capstanError('ERR_CONFIG', 'processing.retry_min must not exceed processing.retry_max');
  }
  if (c.bootstrap.agent_url !== '' && !/^https?:\/\/\S+$/.test(c.bootstrap.agent_url)) {
    throw capstanError('ERR_CONFIG', 'bootstrap.agent_url must be an http or https URL');
  }
  if (!/^[A-Za-z0-9][A-Za-z0-9._-]*$/.test(c.general.node_id)) {
    throw capstanError('ERR_CONFIG', 'general.node_id must be letters, digits, ".", "_" or "-"');
  }
  return c;
}

export function loadRelaydConfig(opts: LoadConfigOptions): RelaydConfig {
  return checkRelaydConfig(loadConfig(RELAYD_SCHEMA, opts));
}
