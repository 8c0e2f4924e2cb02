/**
 * What the relay deletes on its own: files in failed/ and partial uploads past their retention,
 * and shared files past their `expires`. One pass at start, then one every interval; a pass that
 * fails is logged and the next one tries again.
 */
import type { Logger } from '@capstan/shared/log';
import { startSpoolCleanup } from '@capstan/toolkit/spool/housekeeping';
import type { Spool } from '@capstan/toolkit/spool/spool';
import { SharedFilesStore } from './cache/shared-files.js';
import type { RelaydConfig } from './config.js';

export interface Retention {
  stop(): void;
}

export async function startRetention(config: RelaydConfig, spool: Spool, log: Logger): Promise<Retention> {
  const sweepTimer = await startSpoolCleanup(spool, {
    failedRetention: config.spool.failed_retention, tmpRetention: config.spool.tmp_retention, interval: config.spool.cleanup_interval, log,
  });
  const sharedFiles = config.shared_files.path ? new SharedFilesStore(config.shared_files.path) : null;
  const sharedTimer = sharedFiles
    ? setInterval(() => {
        sharedFiles.cleanup().then(
          (n) => n > 0 && log.info({ removed: n }, 'expired shared files removed'),
          (err: unknown) => log.warn({ err }, 'shared files clean-up failed'),
        );
      }, config.shared_files.cleanup_interval)
    : null;
  sharedTimer?.unref();
  if (sharedFiles) await sharedFiles.cleanup().catch((err: unknown) => log.warn({ err }, 'shared files clean-up failed'));
  return {
    stop() {
      clearInterval(sweepTimer);
      if (sharedTimer) clearInterval(sharedTimer);
    },
  };
}
