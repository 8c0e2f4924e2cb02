/**
 * `capstan-server`'s admin verbs are `capstan`'s (admin-cli/), run in process: this opens the
 * registry of the configuration given (`--config`, `--data-dir`, `--database`), composes the
 * domain and builds the server's own HTTP app around it, without listening, and sends each of
 * the verb's requests with fastify's `inject` as the bootstrap admin. A change made on the server
 * host thus goes through the same routes, checks, domain and audit record as through the API, and
 * works with the server stopped too (a running server sees it in the shared database).
 */
import { randomBytes } from 'node:crypto';
import { join } from 'node:path';
import type { FastifyInstance } from 'fastify';
import { isCapstanError } from '@capstan/shared/errors';
import { silentLogger } from '@capstan/shared/log';
import { Spool } from '@capstan/toolkit/spool/spool';
import { buildApp } from '../api/app.js';
import { COMMAND_LINE_ADDRESS } from '../audit/actor.js';
import { answerOf, ApiFailure, BaseTransport, callHeaders, queryString, type ApiAnswer, type CallOptions } from '../admin-cli/transport.js';
import { CredentialService } from '../bootstrap/service.js';
import { composeDomain } from '../domain.js';
import { NodeIdentity } from '../identity/service.js';
import { identitySettings } from '../identity/settings.js';
import { JobService, jobLimits } from '../jobs/service.js';
import { ensurePolicyKey } from '../policy/key.js';
import { lifecyclePolicy } from '../registry/lifecycle.js';
import { openRegistry } from '../registry/open.js';
import type { Store } from '../reads.js';
import { loadHostConfig, type CommonFlags } from './common.js';

/** Requests to the app in memory, as the admin with the token the app was built with. */
export class InjectClient extends BaseTransport {
  constructor(private readonly app: FastifyInstance, private readonly token: string, private readonly closing: () => Promise<void>) {
    super();
  }

  async call<T = any>(method: string, path: string, opts: CallOptions = {}): Promise<ApiAnswer<T>> {
    const res = await this.app.inject({
      method: method as 'GET',
      url: `${path}${queryString(opts.query)}`,
      headers: callHeaders(this.token, opts),
      ...(opts.body !== undefined && { payload: JSON.stringify(opts.body) }),
      remoteAddress: COMMAND_LINE_ADDRESS,
    });
    return answerOf<T>(method, path, res.statusCode, res.headers['content-type'], res.body);
  }

  close(): Promise<void> {
    return this.closing();
  }
}

/** What could not be opened: no answer from "the server", exit 3 as for an unreachable one. */
const unopened = (what: string, err: unknown) =>
  new ApiFailure(isCapstanError(err) ? err.code : 'ERR_STORE', `cannot open ${what}: ${(err as Error).message}`, 0);

/** The server's admin API in this process, over the configured registry. */
export async function openServerHost(flags: CommonFlags): Promise<InjectClient> {
  const config = loadHostConfig(flags);
  const dataDir = config.general.data_dir;
  let store: Store;
  try {
    store = await openRegistry(config.database.url ? { databaseUrl: config.database.url } : { sqlitePath: join(dataDir, 'capstan.db') });
  } catch (err) {
    throw unopened('the store', err);
  }
  let identity: NodeIdentity | undefined;
  try {
    const key = await ensurePolicyKey(dataDir).catch((err: unknown) => {
      throw unopened('the policy key', err);
    });
    const domain = composeDomain({ store, log: silentLogger, key, sharedFolder: config.policy.shared_folder });
    // Its rotations, deletions and forced renewals are recorded like the API's (audit/log.ts).
    identity = await NodeIdentity.open({ dataDir, secretFile: config.identity.secret_file, store, log: silentLogger, ...identitySettings(config.identity), audit: domain.audit }).catch((err: unknown) => {
      throw unopened('the identity keyring', err);
    });
    // The admin of this process only: a token that exists in memory, never on disk or on the wire.
    const token = randomBytes(32).toString('base64url');
    const app = buildApp({
      config, store, domain, log: silentLogger, adminToken: token,
      // No upload reaches this app: its spool is never initialised or written.
      spool: new Spool({ root: join(dataDir, 'spool'), maxFileBytes: config.limits.max_body_size, writerThreads: 0, recycleFiles: 0 }),
      // A running server's spool and counters are its own: no verb asks this app for them.
      status: async () => ({}),
      lifecycle: { policy: lifecyclePolicy(config), last: () => null },
      identity,
      policy: { key, maxPlanBytes: config.policy.max_plan_size },
      // The running server takes a new job's tasks at its next jobs sweep.
      jobs: { store, service: new JobService({ store, audit: domain.audit, limits: jobLimits(config), kick: { run: () => undefined } }) },
      bootstrap: { credentials: new CredentialService({ store, sealer: identity.keySealer, audit: domain.audit }) },
    });
    await app.ready();
    const opened = identity;
    return new InjectClient(app, token, async () => {
      await app.close();
      // A node change regenerates policies after its answer: finish that before the store closes.
      await domain.generator.settled();
      await store.close();
      opened.close();
    });
  } catch (err) {
    identity?.close();
    await store.close().catch(() => undefined);
    throw err;
  }
}
