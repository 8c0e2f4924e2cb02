/**
 * Notifications: the subscriptions admins make, and the loop that delivers events from the
 * durable outbox to webhooks and by e-mail, beside ingest (a slow or failing receiver never slows
 * it: notify/dispatch.ts).
 */
import type { Logger } from '@capstan/shared/log';
import type { ServerConfig } from '../config.js';
import type { Domain } from '../domain.js';
import type { NodeIdentity } from '../identity/service.js';
import { Dispatcher } from '../notify/dispatch.js';
import { smtpMailer } from '../notify/senders.js';
import { SubscriptionService } from '../notify/service.js';
import type { Store } from '../store/store.js';

export interface Notifications {
  subscriptions: SubscriptionService;
  /** The delivery loop (absent: [notifications] enabled = false). */
  dispatcher: Dispatcher | null;
  start(): void;
  stop(): Promise<void>;
}

export async function notifications(config: ServerConfig, log: Logger, store: Store, domain: Domain, identity: NodeIdentity): Promise<Notifications> {
  const mailer = await smtpMailer(config.smtp);
  const subscriptions = new SubscriptionService({
    store, sealer: identity.keySealer, audit: domain.audit, smtpConfigured: mailer !== null, defaultWindowMs: config.notifications.group_window,
  });
  const n = config.notifications;
  const dispatcher = n.enabled
    ? new Dispatcher({
      store, sealer: identity.keySealer, mailer, log,
      settings: {
        pollMs: n.poll_interval, webhookTimeoutMs: n.webhook_timeout, maxAttempts: n.max_attempts, minBackoffMs: n.min_backoff,
        maxBackoffMs: n.max_backoff, maxEvents: n.max_events, flapWindowMs: n.flap_window, flapThreshold: n.flap_threshold, concurrency: n.concurrency,
      },
    })
    : null;
  return {
    subscriptions,
    dispatcher,
    start: () => dispatcher?.start(),
    async stop() {
      await dispatcher?.stop();
      mailer?.close();
    },
  };
}
