/**
 * The audit log as the domain writes it: one record per change, with who acted (audit/actor.ts),
 * what and on which object, and the object before and after. The store keeps it (GET
 * /api/1/audit) and the journal gets the same record as one JSON line with `audit: true`.
 */
import { isCapstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { AdminStore, AuditInsert, WriteOptions } from '../store/store.js';
import type { Actor } from './actor.js';

/** The largest before or after kept in one record (its JSON); a larger one keeps a note instead. */
export const MAX_AUDIT_STATE_BYTES = 64 * 1024;

export interface AuditChange {
  /** A stable dotted name: `node.accept`, `directive.update`, `node.state` (by the sweep). */
  action: string;
  /** The object's id (a node id, a directive id, an admin's name). */
  target: string | null;
  before?: unknown;
  after?: unknown;
}

/** A value kept in the record: as it is when small enough, else a note of its size. */
function bounded(v: unknown): unknown {
  if (v === undefined || v === null) return null;
  const text = JSON.stringify(v);
  return text.length <= MAX_AUDIT_STATE_BYTES ? v : { truncated: true, bytes: text.length };
}

export class AuditLog {
  private readonly now: () => Date;

  constructor(private readonly deps: {
    admins: Pick<AdminStore, 'insertAudit'>;
    log: Logger;
    now?: () => Date;
    /** Told of each record once stored (the event stream's admin actions). */
    onRecord?: (rec: AuditInsert) => void | Promise<void>;
  }) {
    this.now = deps.now ?? (() => new Date());
  }

  /**
   * Record a change made by `actor`. A record that cannot be stored is logged as an error and
   * the change stands: the journal line written first is then the record.
   */
  async record(actor: Actor, change: AuditChange, opts: WriteOptions = {}): Promise<void> {
    // An HTTP request's changes are written by the API's hook, with the answer's status.
    if (actor.pending) {
      actor.pending.push(change);
      return;
    }
    await this.write(actor, change, 200, null, opts);
  }

  /** Write one record now: the change, who made it and, for a request, its status and error code. */
  async write(actor: Actor, change: AuditChange, status: number, error: string | null, opts: WriteOptions = {}): Promise<void> {
    const req = actor.request;
    const rec: AuditInsert = {
      at: this.now().toISOString(),
      admin: actor.kind === 'admin' && actor.name ? actor.name : null,
      role: actor.kind === 'admin' ? (actor.role ?? null) : null,
      actor_kind: actor.kind,
      actor: actor.name || null,
      action: change.action,
      target: change.target,
      method: req?.method ?? '',
      path: req?.path ?? '',
      address: req?.address ?? '',
      status,
      error,
      before: bounded(change.before),
      after: bounded(change.after),
    };
    this.deps.log.info({ audit: true, ...rec }, 'audit');
    try {
      await this.deps.admins.insertAudit(rec, opts);
    } catch (err) {
      this.deps.log.error({ err: isCapstanError(err) ? { code: err.code, message: err.message } : err }, 'cannot store audit record');
      return;
    }
    await this.deps.onRecord?.(rec);
  }
}
