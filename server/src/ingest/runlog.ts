/**
 * Run-log ingest at the root: name → node → decompress → S/MIME verify against the node's pinned
 * certificate → parse → summary → one transactional insert. Every refusal is a coded, permanent
 * error (the spool processor moves the file to failed/ with it); a database outage is transient.
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import {
  capstanError, compressSync, decompress, isCompleteRun, parseRunInfo, parseRunLog, verifySmime, type RunLog,
} from '@capstan/shared';
import type { EnrollmentRules } from '../registry/enrollment.js';
import { summarize } from '../registry/summary.js';
import type { NodeRecord, Store } from '../store/store.js';

export interface IngestLimits {
  maxDecompressedBytes: number;
  maxReports: number;
  maxLineBytes: number;
}

export interface IngestDeps {
  store: Store;
  limits: IngestLimits;
  now?: () => Date;
  /** Auto-accept rules applied to inventories of new or pending nodes; none: every node waits for an admin. */
  enrollment?: EnrollmentRules;
}

/** The node must be known and accepted, with a pinned certificate, before its run logs count. */
export function requireAccepted(node: NodeRecord | null, nodeId: string): NodeRecord & { certificate: string } {
  if (!node) throw capstanError('ERR_NODE_UNKNOWN', `node ${nodeId} is unknown`);
  if (node.accepted === 'pending') throw capstanError('ERR_NODE_PENDING', `node ${nodeId} is pending acceptance`);
  if (node.accepted === 'refused') throw capstanError('ERR_NODE_REFUSED', `node ${nodeId} was refused`);
  if (!node.certificate) throw capstanError('ERR_CERTIFICATE', `node ${nodeId} has no pinned certificate`);
  return node as NodeRecord & { certificate: string };
}

/** The run's start: the control start report's start time, else the first report's. */
export function runStart(log: RunLog): string {
  const start = log.reports.find((r) => r.event_type === 'control' && r.component === 'start');
  return (start ?? log.reports[0]!).start_datetime;
}

export async function ingestRunLog(deps: IngestDeps, path: string, name: string): Promise<{ inserted: boolean; runId: number }> {
  const info = parseRunInfo(name);
  const node = requireAccepted(await deps.store.getNode(info.nodeId), info.nodeId);
  const raw = await readFile(path);
  const signed = await decompress(raw, info.compression, { maxBytes: deps.limits.maxDecompressedBytes });
  const verified = verifySmime(signed, [node.certificate], { maxBytes: deps.limits.maxDecompressedBytes });
  const log = parseRunLog(verified.content, { node_id: info.nodeId, timestamp: info.timestamp }, {
    maxBytes: deps.limits.maxDecompressedBytes,
    maxReports: deps.limits.maxReports,
    maxLineBytes: deps.limits.maxLineBytes,
  });
  const { counts, outcomes } = summarize(log.reports);
  const result = await deps.store.insertRun({
    node_id: info.nodeId,
    started_at: runStart(log),
    config_id: log.config_id,
    complete: isCompleteRun(log),
    report_count: log.reports.length,
    counts,
    outcomes,
    file_name: name,
    sha256: createHash('sha256').update(raw).digest('hex'),
    log_compressed: compressSync(verified.content, 'zstd'),
    received_at: (deps.now?.() ?? new Date()).toISOString(),
  });
  return { inserted: result.inserted, runId: result.id };
}
