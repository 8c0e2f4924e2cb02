/**
 * The agent-facing upload step both relayd and server run for `PUT /reports/<file>` and
 * `PUT /inventories/<file>`: check the name, demand a Content-Length (411 without one, as RUDDER
 * answers), refuse a body over the limit before reading it (413), and spool it durably.
 */
import type { IncomingMessage } from 'node:http';
import { capstanError } from '@capstan/shared/errors';
import { parseInventoryName, parseRunInfo } from '@capstan/shared/runlog/name';
import type { SpoolKind } from '@capstan/shared/protocol';
import type { AcceptOptions, Accepted, Spool } from './spool.js';

/** Validate an upload's file name for its kind; throws ERR_RUNINFO_NAME / ERR_INVENTORY_NAME. */
export function checkUploadName(kind: SpoolKind, name: string): { nodeId: string } {
  if (kind === 'reports') return { nodeId: parseRunInfo(name).nodeId };
  return { nodeId: parseInventoryName(name).nodeId };
}

/** Whether a name is one an upload of this kind may carry (the processors take only those). */
export function isUploadName(kind: SpoolKind, name: string): boolean {
  try {
    checkUploadName(kind, name);
    return true;
  } catch {
    return false;
  }
}

export async function receiveUpload(
  spool: Spool, kind: SpoolKind, name: string, req: IncomingMessage, maxBytes: number, opts: AcceptOptions = {},
  /** The body as read (e.g. paced: see http/limits.ts); default the request itself. */
  body: AsyncIterable<Buffer> = req,
): Promise<Accepted & { nodeId: string }> {
  const { nodeId } = checkUploadName(kind, name);
  const header = req.headers['content-length'];
  if (header === undefined) throw capstanError('ERR_LENGTH_REQUIRED', 'Content-Length is required');
  if (!/^\d{1,15}$/.test(header)) throw capstanError('ERR_BAD_REQUEST', 'Content-Length is not a number');
  const length = Number(header);
  if (length > maxBytes) throw capstanError('ERR_BODY_TOO_LARGE', `body of ${length} bytes exceeds the limit of ${maxBytes}`);
  if (length === 0) throw capstanError('ERR_BAD_REQUEST', 'empty body');
  const accepted = await spool.accept(kind, name, body, length, opts);
  return { ...accepted, nodeId };
}
