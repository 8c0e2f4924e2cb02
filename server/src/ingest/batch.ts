/**
 * What the server does with an upload batch's files (`POST /batch/<kind>`, sent by relays).
 *
 * Run logs are ingested straight from the batch's memory: a file's 2xx is the commit of its run,
 * which is as durable as a spooled file and spares the spool's write, fsync, rename, watch and
 * removal per run log. What cannot be ingested at once still ends where a PUT's file would:
 * - refused for good (bad signature, unknown node, …): kept in failed/ with the reason, as the
 *   spool processor keeps a PUT's file, and answered 2xx with `refused` (the relay's part is done);
 * - worth a retry (database down, a worker lost), or more run logs in memory than
 *   `[processing] max_in_memory`: spooled, and retried from incoming/ as a PUT's file would be.
 * Inventories are spooled (their ingest waits on an OCS pair, and they are few).
 */
import type { BatchResult } from '@capstan/shared/batch';
import { isCapstanError, isTransient } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { SpoolKind } from '@capstan/shared/protocol';
import { batchResultOf, type BatchUpload } from '@capstan/toolkit/http/batch';
import type { ProcessedEvent } from '@capstan/toolkit/spool/processor';
import type { Spool } from '@capstan/toolkit/spool/spool';
import type { AttemptLedger } from '@capstan/toolkit/spool/quarantine';
import type { RunLogIngest } from './runlog.js';

export interface BatchTakerDeps {
  spool: Spool;
  runLogs: RunLogIngest;
  /** Most run logs being ingested from memory at once; past it a batch's run logs are spooled. */
  maxInMemory: number;
  /** A run log spooled from a batch, in memory for its ingest (as a PUT's is), before it appears in incoming/. */
  written: (name: string, data: Buffer) => void;
  /** A file was spooled: its processor takes it now. */
  spooled: (kind: SpoolKind, name: string) => void;
  /** A run log ingested or refused here, as the spool processor reports its files. */
  processed: (e: ProcessedEvent) => void;
  log: Logger;
  /**
   * The run logs' attempt ledger (toolkit spool/quarantine.ts): a run log whose ingest from a
   * batch was under way when the server died too often is quarantined and answered `refused`
   * (ERR_INGEST_QUARANTINED), so the relay stops sending it.
   */
  ledger?: AttemptLedger;
}

export function batchTaker(d: BatchTakerDeps): (kind: SpoolKind, files: BatchUpload[]) => Promise<BatchResult[]> {
  /** Spooled as its PUT would have been; the processor ingests it later. */
  const spool = async (kind: SpoolKind, f: BatchUpload): Promise<BatchResult> => {
    try {
      await d.spool.accept(kind, f.name, [f.data], f.data.length, {
        keepBytes: kind === 'reports' ? 1024 * 1024 : 0,
        onWritten: (data) => d.written(f.name, data),
      });
      d.spooled(kind, f.name);
      return { file: f.name, status: 201 };
    } catch (err) {
      return batchResultOf(f.name, err);
    }
  };

  const ingest = async (f: BatchUpload): Promise<BatchResult> => {
    if (d.ledger?.exhausted(f.name)) {
      const message = d.ledger.reasonFor(f.name);
      try {
        await d.ledger.quarantine(null, f.name, f.data);
      } catch (err) {
        return batchResultOf(f.name, err);
      }
      d.log.error({ file: f.name, code: 'ERR_INGEST_QUARANTINED', reason: message }, 'file quarantined');
      d.processed({ kind: 'reports', name: f.name, outcome: 'failed', error: new Error(message), ms: 0 });
      return { file: f.name, status: 201, refused: { code: 'ERR_INGEST_QUARANTINED', message } };
    }
    d.ledger?.started(f.name);
    try {
      return await ingestOne(f);
    } finally {
      d.ledger?.ended(f.name);
    }
  };

  const ingestOne = async (f: BatchUpload): Promise<BatchResult> => {
    const started = Date.now();
    try {
      // Below spool.min_free_space a PUT is refused: so is a batch's run log bound for the database.
      await d.spool.keepReserve(f.data.length);
    } catch (err) {
      return batchResultOf(f.name, err);
    }
    try {
      const r = await d.runLogs.ingest('', f.name, f.data);
      d.log.info({ file: f.name, runId: r.runId, duplicate: !r.inserted }, r.inserted ? 'run stored' : 'run already stored');
      d.processed({ kind: 'reports', name: f.name, outcome: 'done', ms: Date.now() - started });
      return { file: f.name, status: 201 };
    } catch (err) {
      if (isTransient(err)) {
        d.log.warn({ file: f.name, err }, 'ingest from a batch failed, spooled to retry');
        return spool('reports', f);
      }
      const code = isCapstanError(err) ? err.code : 'ERR_INTERNAL';
      const message = err instanceof Error ? err.message : String(err);
      try {
        await d.spool.failBuffer('reports', f.name, f.data, `${code}: ${message}`);
      } catch (failErr) {
        // Not kept: the relay keeps its copy and sends it again.
        return batchResultOf(f.name, failErr);
      }
      d.log.warn({ file: f.name, code, reason: message }, 'file refused, moved to failed/');
      d.processed({ kind: 'reports', name: f.name, outcome: 'failed', error: err, ms: Date.now() - started });
      return { file: f.name, status: 201, refused: { code, message } };
    }
  };

  return (kind, files) => Promise.all(files.map((f) =>
    kind === 'reports' && d.runLogs.pending < d.maxInMemory ? ingest(f) : spool(kind, f)));
}
