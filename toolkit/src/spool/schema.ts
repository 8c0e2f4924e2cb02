/**
 * The configuration keys of a spool that relayd and the server read alike (their [spool] and
 * [processing] sections): what the spool keeps free and for how long it keeps refused files, and
 * how a file that failed for a transient reason is retried. One declaration, so the two programs
 * cannot drift apart in a default or a bound; each program's own keys sit beside these.
 */

/** Room the spool keeps, and the clean-up of failed/ and tmp/ (startSpoolCleanup). */
export const SPOOL_SCHEMA = {
  /** Refuse uploads (507 ERR_SPOOL_FULL) when the spool's file system would keep less than this free. */
  min_free_space: { type: 'size', default: '256MiB' },
  /** Partial uploads older than this are removed. */
  tmp_retention: { type: 'duration', default: '1h' },
  /** Files refused for good are kept in failed/ this long for an admin to look at. */
  failed_retention: { type: 'duration', default: '7d' },
  /** At most this many files and bytes in failed/: past either, the oldest go first (0: no bound). */
  failed_max_files: { type: 'integer', default: 10000, min: 0 },
  failed_max_size: { type: 'size', default: '1GiB' },
  /** How often failed/ and tmp/ are cleaned. */
  cleanup_interval: { type: 'duration', default: '1h', min: 1000 },
} as const;

/** The spool processor's catch-up listing and the backoff of a transient failure (SpoolProcessor). */
export const RETRY_SCHEMA = {
  /** How often the spool is listed to catch what inotify missed and retries that are due. */
  catchup_interval: { type: 'duration', default: '10s', min: 10 },
  /** A transient failure is retried after retry_min, doubling up to retry_max. */
  retry_min: { type: 'duration', default: '1s', min: 1 },
  retry_max: { type: 'duration', default: '5m', min: 1 },
} as const;
