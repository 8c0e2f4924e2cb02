/**
 * What the dear reads of the admin API may cost the server at once, whatever the caller's role:
 * a filter expression (`q=`, evaluated over the whole fleet) and an export (`format=csv`, or
 * `Accept: text/csv`, streamed over every row). Each caller (an admin or token by name) may have
 * `[limits] expensive_reads_per_caller` of them in progress, the server `expensive_reads_total`;
 * one more is answered 429 ERR_READ_BUSY with Retry-After at once, before any work is done. A
 * place is given back when the answer is finished or its connection closed, so a slow client
 * reading a long export holds its own place, not someone else's.
 *
 * Plans have their own budget with a time limit (plan-budget.ts): their work runs in loops that
 * check a deadline. A filter or an export is one database statement (or a stream of pages) that
 * cannot be cut in the middle on SQLite, so its bound is how many run at once.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';

export interface ReadLimits {
  perCaller: number;
  total: number;
}

/** A dear read: a non-empty `q`, or an answer in CSV. */
export function isExpensiveRead(req: FastifyRequest): boolean {
  if (req.method !== 'GET') return false;
  const q = (req.query ?? {}) as Record<string, unknown>;
  if (typeof q.q === 'string' && q.q.trim() !== '') return true;
  if (q.format === 'csv') return true;
  return q.format === undefined && /\btext\/csv\b/.test(req.headers.accept ?? '');
}

export class ReadBudget {
  private readonly byCaller = new Map<string, number>();
  private running = 0;

  constructor(readonly limits: ReadLimits) {}

  /** A place for `caller`, or ERR_READ_BUSY; the function returned gives it back (once). */
  take(caller: string): () => void {
    const mine = this.byCaller.get(caller) ?? 0;
    if (this.limits.perCaller > 0 && mine >= this.limits.perCaller) {
      throw capstanError('ERR_READ_BUSY', `${mine} filtered or exported read(s) of yours are in progress ([limits] expensive_reads_per_caller ${this.limits.perCaller}): retry when one has answered`);
    }
    if (this.limits.total > 0 && this.running >= this.limits.total) {
      throw capstanError('ERR_READ_BUSY', `${this.running} filtered or exported reads are in progress on this server ([limits] expensive_reads_total ${this.limits.total}): retry shortly`);
    }
    this.byCaller.set(caller, mine + 1);
    this.running++;
    let given = false;
    return () => {
      if (given) return;
      given = true;
      this.running--;
      const left = (this.byCaller.get(caller) ?? 1) - 1;
      if (left > 0) this.byCaller.set(caller, left);
      else this.byCaller.delete(caller);
    };
  }

  /** Places held now, for the tests and the metrics. */
  get inProgress(): number {
    return this.running;
  }
}

/** The hook, after authentication: dear reads take a place for the caller until the answer is done. */
export function installReadBudget(admin: FastifyInstance, budget: ReadBudget): void {
  admin.addHook('onRequest', async (req, reply) => {
    if (!isExpensiveRead(req)) return;
    const p = req.principal;
    let release: () => void;
    try {
      release = budget.take(p ? `${p.role}:${p.name}` : `address:${req.ip}`);
    } catch (err) {
      reply.header('retry-after', '2');
      throw err;
    }
    reply.raw.once('close', release);
    reply.raw.once('finish', release);
  });
}
