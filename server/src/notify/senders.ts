/**
 * How a message leaves: a webhook POST (signed, bounded in time, no redirects followed) or an
 * e-mail through the configured SMTP server (nodemailer). Each answers delivered or not, with
 * the status and why; the dispatcher decides what follows (dispatch.ts).
 */
import { readFile } from 'node:fs/promises';
// nodemailer is loaded when an SMTP host is configured.
import type { Transporter } from 'nodemailer';
import { capstanError } from '@capstan/shared/errors';
import type { DeliveryRecord, EventRecord, SubscriptionRecord } from '../store/store.js';
import { mailText, webhookBody } from './message.js';
import { sign } from './signature.js';

export type SendResult = { ok: true; status: number | null } | { ok: false; status: number | null; error: string };

/** Most bytes of a receiver's answer read (and dropped): the status is what counts. */
const MAX_ANSWER_BYTES = 64 * 1024;

export async function postWebhook(sub: SubscriptionRecord, secret: string, d: DeliveryRecord, events: EventRecord[], timeoutMs: number, now: Date): Promise<SendResult> {
  const body = webhookBody(sub, d, events, now.toISOString());
  const ts = Math.floor(now.getTime() / 1000);
  try {
    const res = await fetch(sub.target, {
      method: 'POST',
      redirect: 'manual',
      signal: AbortSignal.timeout(timeoutMs),
      headers: {
        'content-type': 'application/json',
        'user-agent': 'capstan-server',
        'capstan-delivery': String(d.id),
        'capstan-timestamp': String(ts),
        'capstan-signature': sign(secret, ts, body),
      },
      body,
    });
    await drain(res);
    if (res.status >= 200 && res.status < 300) return { ok: true, status: res.status };
    return { ok: false, status: res.status, error: `HTTP ${res.status}` };
  } catch (err) {
    const e = err as Error & { cause?: { code?: string } };
    const why = e.name === 'TimeoutError' ? `no answer within ${timeoutMs} ms` : (e.cause?.code ?? e.message);
    return { ok: false, status: null, error: why };
  }
}

async function drain(res: Response): Promise<void> {
  if (!res.body) return;
  let n = 0;
  try {
    for await (const chunk of res.body) {
      n += (chunk as Uint8Array).byteLength;
      if (n > MAX_ANSWER_BYTES) break;
    }
  } catch {
    // The answer's status is in; a body cut short changes nothing.
  }
  await res.body.cancel().catch(() => undefined);
}

export interface SmtpSettings {
  host: string;
  port: number;
  secure: boolean;
  require_tls: boolean;
  user: string;
  password_file: string;
  from: string;
  timeout: number;
}

/** An SMTP mailer for e-mail subscriptions; null when no host is configured. */
export async function smtpMailer(s: SmtpSettings): Promise<Mailer | null> {
  if (!s.host) return null;
  let pass: string | undefined;
  if (s.password_file) {
    try {
      pass = (await readFile(s.password_file, 'utf8')).split('\n')[0]!.trim();
    } catch (err) {
      throw capstanError('ERR_CONFIG', `smtp.password_file ${s.password_file}: ${(err as Error).message}`);
    }
  }
  const { default: nodemailer } = await import('nodemailer');
  const transport = nodemailer.createTransport({
    host: s.host, port: s.port, secure: s.secure, requireTLS: s.require_tls,
    connectionTimeout: s.timeout, greetingTimeout: s.timeout, socketTimeout: s.timeout,
    ...(s.user && { auth: { user: s.user, ...(pass !== undefined && { pass }) } }),
  });
  return new Mailer(transport, s.from);
}

export class Mailer {
  constructor(private readonly transport: Transporter, private readonly from: string) {}

  async send(sub: SubscriptionRecord, d: DeliveryRecord, events: EventRecord[]): Promise<SendResult> {
    const { subject, text } = mailText(sub, d, events);
    try {
      await this.transport.sendMail({
        from: this.from, to: sub.target.split(',').map((a) => a.trim()), subject, text,
        headers: { 'X-Capstan-Delivery': String(d.id) },
      });
      return { ok: true, status: null };
    } catch (err) {
      const e = err as Error & { responseCode?: number; code?: string };
      return { ok: false, status: e.responseCode ?? null, error: e.code ? `${e.code}: ${e.message}` : e.message };
    }
  }

  close(): void {
    this.transport.close();
  }
}
