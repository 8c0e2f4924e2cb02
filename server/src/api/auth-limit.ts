/**
 * Failed authentication, counted by caller address: a bad or unknown bearer token on the admin
 * API, a console cookie that does not open, a sign-in with a wrong token (each answered 401).
 * From `[limits] auth_failures` failures in `auth_failure_window`, the address is answered 429
 * ERR_AUTH_RATE_LIMITED (with Retry-After) on the admin API and the console's sign-in until that
 * window ends, whatever it sends: guessing tokens costs a window per few guesses. The first
 * failure of an address's window and the moment it is limited are written to the audit log
 * (`auth.failed` — unless the request is an admin API write, recorded as itself already — and
 * `auth.rate_limited`, no admin) and logged; the failures between are counted only, so that a
 * flood does not fill the audit log.
 *
 * At most `maxAddresses` addresses are tracked; past it the oldest window is forgotten first.
 */
import type { FastifyInstance, FastifyRequest } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import type { Logger } from '@capstan/shared/log';
import type { AuditLog } from '../audit/log.js';

export interface AuthFailureOptions {
  /** Failures of one address in a window before it is refused; 0 turns the limit off. */
  limit: number;
  windowMs: number;
  maxAddresses?: number;
  now?: () => number;
}

interface Window {
  start: number;
  failures: number;
}

export class AuthFailures {
  private readonly windows = new Map<string, Window>();
  private readonly maxAddresses: number;
  private readonly now: () => number;

  constructor(private readonly opts: AuthFailureOptions) {
    this.maxAddresses = opts.maxAddresses ?? 10_000;
    this.now = opts.now ?? Date.now;
  }

  /** Milliseconds until `address` may try again; 0 when it may now. */
  blockedFor(address: string): number {
    const w = this.current(address);
    if (!w || this.opts.limit <= 0 || w.failures < this.opts.limit) return 0;
    return w.start + this.opts.windowMs - this.now();
  }

  /** Count a failure: `first` of its window, `limited` when it reaches the limit, else `counted`. */
  fail(address: string): 'first' | 'limited' | 'counted' {
    let w = this.current(address);
    if (!w) {
      if (this.windows.size >= this.maxAddresses) this.windows.delete(this.windows.keys().next().value!);
      w = { start: this.now(), failures: 0 };
      this.windows.set(address, w);
    }
    w.failures++;
    if (w.failures === 1) return 'first';
    return this.opts.limit > 0 && w.failures === this.opts.limit ? 'limited' : 'counted';
  }

  /** Addresses tracked (for tests and metrics). */
  get size(): number {
    return this.windows.size;
  }

  private current(address: string): Window | undefined {
    const w = this.windows.get(address);
    if (w && this.now() - w.start >= this.opts.windowMs) {
      this.windows.delete(address);
      return undefined;
    }
    return w;
  }
}

/** The requests the limit covers: the admin API and the console's sign-in. */
const covered = (req: FastifyRequest) => req.url.startsWith('/api/1/') || req.url.split('?')[0] === '/console/sign-in';

export function installAuthLimit(app: FastifyInstance, deps: { failures: AuthFailures; audit: AuditLog; log: Logger }): void {
  const { failures, audit, log } = deps;
  app.addHook('onRequest', async (req, reply) => {
    if (!covered(req)) return;
    const wait = failures.blockedFor(req.ip);
    if (wait > 0) {
      reply.header('retry-after', String(Math.ceil(wait / 1000)));
      throw capstanError('ERR_AUTH_RATE_LIMITED', 'too many failed authentications from this address: try again later');
    }
  });
  app.addHook('onResponse', async (req, reply) => {
    if (reply.statusCode !== 401 || !covered(req)) return;
    const step = failures.fail(req.ip);
    if (step === 'counted') return;
    const action = step === 'first' ? 'auth.failed' : 'auth.rate_limited';
    const path = req.url.length > 2048 ? req.url.slice(0, 2048) : req.url;
    log.warn({ address: req.ip, method: req.method, path }, step === 'first' ? 'failed authentication' : 'failed authentications limited for this address');
    // An admin API write is in the audit log already, refused or not (access.ts): not twice.
    if (step === 'first' && req.method !== 'GET' && req.method !== 'HEAD' && req.url.startsWith('/api/1/')) return;
    await audit.write({ kind: 'admin', name: '', request: { method: req.method, path, address: req.ip } }, { action, target: null }, step === 'first' ? 401 : 429,
      step === 'first' ? 'ERR_UNAUTHORIZED' : 'ERR_AUTH_RATE_LIMITED').catch((err: Error) => log.warn({ err }, 'a failed authentication was not recorded'));
  });
}
