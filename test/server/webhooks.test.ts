/**
 * Webhooks and e-mail, with the whole server in process and receivers on loopback: each event
 * reaches a receiver once per id, signed with the documented recipe (a wrong secret fails it); a
 * receiver answering 500 gets the message again after a backoff; one that never answers has its
 * message given up (dead), listed and retried by hand; a burst of 500 silent nodes behind one
 * relay is one message, and a flapping node is held back; e-mail goes through an SMTP server
 * written here (smtp-server), one message for the burst.
 */
import { createHmac, timingSafeEqual } from 'node:crypto';
import { createServer, type IncomingMessage, type Server, type ServerResponse } from 'node:http';
import type { AddressInfo } from 'node:net';
import t, { type Test } from 'tap';
import { SMTPServer } from 'smtp-server';
import type { EventInsert, Store } from '@capstan/server/store/index';
import { serverWithApi } from '../helpers/admin-app.js';
import { waitFor } from '../helpers/programs.js';

interface Received {
  headers: IncomingMessage['headers'];
  body: string;
  json: { delivery: number; subscription: string; events: Array<{ id: number; type: string; node_id: string | null; data: Record<string, unknown> }>; held?: Record<string, number> };
}

/** A webhook receiver on loopback; `answer` decides each request's fate (a status, or never to answer). */
async function receiver(t: Test, answer: (n: number) => number | 'never' = () => 200) {
  const got: Received[] = [];
  let n = 0;
  const hanging: ServerResponse[] = [];
  const server: Server = createServer((req, res) => {
    const chunks: Buffer[] = [];
    req.on('data', (c: Buffer) => chunks.push(c));
    req.on('end', () => {
      const body = Buffer.concat(chunks).toString('utf8');
      const a = answer(n++);
      if (a === 'never') {
        hanging.push(res);
        return;
      }
      if (a >= 200 && a < 300) got.push({ headers: req.headers, body, json: JSON.parse(body) });
      res.writeHead(a).end();
    });
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => {
    for (const res of hanging) res.destroy();
    server.closeAllConnections();
    server.close(() => r());
  }));
  return { url: `http://127.0.0.1:${(server.address() as AddressInfo).port}/hook`, got, attempts: () => n };
}

/** The recipe of docs/events.md, written out as a receiver would: HMAC-SHA256 of `<timestamp>.<body>`. */
function recipeVerifies(secret: string, r: Received, nowS = Math.floor(Date.now() / 1000)): boolean {
  const ts = String(r.headers['capstan-timestamp']);
  if (Math.abs(nowS - Number(ts)) > 300) return false;
  const expected = `v1=${createHmac('sha256', secret).update(`${ts}.${r.body}`).digest('hex')}`;
  const given = String(r.headers['capstan-signature']);
  return given.length === expected.length && timingSafeEqual(Buffer.from(given), Buffer.from(expected));
}

const FAST = {
  'notifications.poll_interval': '50ms', 'notifications.min_backoff': '100ms', 'notifications.max_backoff': '400ms',
  'notifications.webhook_timeout': '500ms', 'notifications.group_window': '0s',
};

const noAnswer = (node: string, relay = 'relay-1', at = new Date().toISOString()): EventInsert =>
  ({ at, type: 'node.no_answer', severity: 'warning', node_id: node, data: { hostname: node, relay } });

const idsOf = (got: Received[]) => got.flatMap((r) => r.json.events.map((e) => e.id));

async function subscribe(api: Awaited<ReturnType<typeof serverWithApi>>['api'], body: Record<string, unknown>) {
  const res = await api('POST', '/api/1/subscriptions', body);
  if (res.status !== 201) throw new Error(`subscription: ${res.status} ${JSON.stringify(res.json)}`);
  return res.json.data as { id: string; secret?: string };
}

t.test('each event reaches the webhook once, signed with the documented recipe; a wrong secret fails it', async (t) => {
  const { server, api } = await serverWithApi(t, FAST);
  const rx = await receiver(t);
  const secret = 'a shared secret, 32 characters!!';
  const sub = await subscribe(api, { id: 'ops', kind: 'webhook', url: rx.url, secret, types: ['node.*'] });
  t.equal(sub.secret, secret, 'the answer that creates it shows the secret, once');
  const shown = await api('GET', '/api/1/subscriptions/ops');
  t.notOk('secret' in shown.json.data, 'never again');
  t.equal(shown.json.data.has_secret, true);
  const store: Store = server.store;
  const ids = await store.insertEvents([noAnswer('n1'), { ...noAnswer('n2'), type: 'job.finished', node_id: null }, noAnswer('n3')]);
  await waitFor(async () => (idsOf(rx.got).length >= 2 ? true : undefined), 'two node events delivered');
  // A little longer: nothing more comes (the job event is not this subscription's, and nothing twice).
  await waitFor(async () => ((await api('GET', '/api/1/deliveries?state=pending')).json.total === 0 ? true : undefined), 'nothing pending');
  t.same(idsOf(rx.got).sort((a, b) => a - b), [ids[0], ids[2]]);
  const r = rx.got[0]!;
  t.equal(r.headers['content-type'], 'application/json');
  t.equal(r.json.subscription, 'ops');
  t.equal(String(r.json.delivery), r.headers['capstan-delivery']);
  t.ok(recipeVerifies(secret, r), 'the recipe verifies it');
  t.notOk(recipeVerifies('another secret, 32 characters!!!', r), 'a wrong secret does not');
  t.notOk(recipeVerifies(secret, { ...r, body: r.body.replace('n1', 'n9') }), 'an altered body does not');
  t.notOk(recipeVerifies(secret, r, Math.floor(Date.now() / 1000) + 3600), 'an hour later, a replay is refused');
  const d = await api('GET', `/api/1/deliveries/${r.json.delivery}`);
  t.match(d.json.data, { state: 'delivered', attempts: 1, last_status: 200, events: [{ type: 'node.no_answer' }] });
});

t.test('a receiver answering 500 then 200 gets the message after a retry', async (t) => {
  const { server, api } = await serverWithApi(t, FAST);
  const rx = await receiver(t, (n) => (n === 0 ? 500 : 200));
  await subscribe(api, { id: 'flaky', kind: 'webhook', url: rx.url, types: ['node.*'] });
  const [id] = await server.store.insertEvents([noAnswer('n1')]);
  await waitFor(async () => (rx.got.length > 0 ? true : undefined), 'delivered after the retry');
  t.equal(rx.attempts(), 2, 'one failure, then the retry');
  t.same(idsOf(rx.got), [id]);
  const list = (await api('GET', '/api/1/deliveries?subscription=flaky')).json.data;
  t.match(list, [{ state: 'delivered', attempts: 2, last_status: 200 }]);
});

t.test('a receiver that never answers: retried, given up, listed dead, and retried by hand', async (t) => {
  const { server, api } = await serverWithApi(t, { ...FAST, 'notifications.max_attempts': 2, 'notifications.webhook_timeout': '200ms' });
  let answering = false;
  const rx = await receiver(t, () => (answering ? 200 : 'never'));
  await subscribe(api, { id: 'dead-end', kind: 'webhook', url: rx.url, types: ['node.*'] });
  const [id] = await server.store.insertEvents([noAnswer('n1')]);
  const dead = await waitFor(async () => {
    const r = await api('GET', '/api/1/deliveries?state=dead');
    return r.json.total === 1 ? r.json.data[0] : undefined;
  }, 'the message given up');
  t.match(dead, { subscription_id: 'dead-end', attempts: 2, last_status: null, last_error: /no answer within 200 ms/ });
  answering = true;
  t.equal((await api('POST', `/api/1/deliveries/${dead.id}/retry`)).status, 200);
  await waitFor(async () => (rx.got.length > 0 ? true : undefined), 'delivered once retried');
  t.same(idsOf(rx.got), [id]);
  t.equal((await api('POST', `/api/1/deliveries/${dead.id}/retry`)).json.error.code, 'ERR_CONFLICT', 'only a dead message is retried');
  t.equal((await api('POST', '/api/1/deliveries/999999/retry')).status, 404);
  const audit = (await api('GET', '/api/1/audit')).json.data.filter((a: { action: string }) => a.action === 'delivery.retry');
  t.same(audit.map((a: { target: string; status: number }) => `${a.target} ${a.status}`).sort(), [`${dead.id} 200`, `${dead.id} 409`, "999999 404"], "every retry recorded, with its answer");
});

t.test('500 nodes going silent behind one relay are one message; a flapping node is held back', async (t) => {
  const { server, api } = await serverWithApi(t, { ...FAST, 'notifications.flap_threshold': 3 });
  const rx = await receiver(t);
  await subscribe(api, { id: 'burst', kind: 'webhook', url: rx.url, group_window_ms: 500, types: ['node.*', 'finding.*'] });
  const ids = await server.store.insertEvents(Array.from({ length: 500 }, (_, i) => noAnswer(`node-${i}`, 'relay-7')));
  await waitFor(async () => (rx.got.length > 0 ? true : undefined), 'the burst delivered');
  await waitFor(async () => ((await api('GET', '/api/1/deliveries?state=pending')).json.total === 0 ? true : undefined), 'nothing pending');
  t.equal(rx.got.length, 1, 'one message');
  t.same(idsOf(rx.got), ids);
  // A node whose findings open and close run after run: three go out, the rest are held back and counted.
  rx.got.length = 0;
  const flaps = Array.from({ length: 8 }, (_, i): EventInsert => ({
    at: new Date().toISOString(), type: i % 2 ? 'finding.closed' : 'finding.opened', severity: 'warning', node_id: 'flappy', data: {},
  }));
  for (const e of flaps) await server.store.insertEvents([e]);
  await waitFor(async () => (rx.got.length > 0 && (await api('GET', '/api/1/deliveries?state=pending')).json.total === 0 ? true : undefined), 'delivered');
  const sent = idsOf(rx.got).length;
  const held = rx.got.reduce((s, r) => s + (r.json.held?.flappy ?? 0), 0);
  t.ok(sent <= 3, `at most the threshold's worth sent (${sent})`);
  t.equal(sent + held, 8, 'every event either sent or counted as held');
});

t.test('e-mail: one message for a burst, through an SMTP server', async (t) => {
  const mails: string[] = [];
  const smtp = new SMTPServer({
    authOptional: true, disabledCommands: ['STARTTLS'], logger: false,
    onData(stream, _session, cb) {
      let text = '';
      stream.on('data', (c: Buffer) => (text += c.toString('utf8')));
      stream.on('end', () => {
        mails.push(text);
        cb();
      });
    },
  });
  await new Promise<void>((r) => smtp.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => smtp.close(() => r())));
  const port = (smtp.server.address() as AddressInfo).port;
  const { server, api } = await serverWithApi(t, { ...FAST, 'smtp.host': '127.0.0.1', 'smtp.port': port, 'smtp.from': 'capstan@example.com' });
  const res = await api('POST', '/api/1/subscriptions', { id: 'mail', kind: 'email', to: ['ops@example.com', 'oncall@example.com'], group_window_ms: 300, types: ['node.*'] });
  t.equal(res.status, 201);
  t.notOk('secret' in res.json.data);
  await server.store.insertEvents(Array.from({ length: 40 }, (_, i) => noAnswer(`node-${i}`, 'relay-9')));
  await waitFor(async () => (mails.length > 0 ? true : undefined), 'the mail');
  await waitFor(async () => ((await api('GET', '/api/1/deliveries?state=pending')).json.total === 0 ? true : undefined), 'nothing pending');
  t.equal(mails.length, 1, 'one message');
  const mail = mails[0]!.replace(/=\r?\n/g, '');
  t.match(mail, /^Subject: \[Capstan warning\] node\.no_answer: 40 nodes behind relay relay-9\s*$/m);
  t.match(mail, /^To: ops@example\.com, oncall@example\.com/m);
  t.match(mail, /node-0, node-1, .* and 30 more/);
});

t.test('subscriptions are checked at the door, and written down in the audit log', async (t) => {
  const { api } = await serverWithApi(t, FAST);
  const bad = async (body: Record<string, unknown>) => (await api('POST', '/api/1/subscriptions', body)).json.error.code;
  t.equal(await bad({ id: 'x', kind: 'webhook', url: 'ftp://example.com/' }), 'ERR_SUBSCRIPTION_TARGET');
  t.equal(await bad({ id: 'x', kind: 'webhook', url: 'https://user:pw@example.com/' }), 'ERR_SUBSCRIPTION_TARGET');
  t.equal(await bad({ id: 'x', kind: 'email', to: ['ops@example.com'] }), 'ERR_SUBSCRIPTION_TARGET', 'no SMTP host configured');
  t.equal(await bad({ id: 'x', kind: 'webhook', url: 'https://example.com/', types: ['node.exploded'] }), 'ERR_BAD_REQUEST');
  t.equal(await bad({ id: 'x', kind: 'webhook', url: 'https://example.com/', filter: 'hostname =' }), 'ERR_FILTER_SYNTAX');
  t.equal(await bad({ id: 'x', kind: 'webhook', url: 'https://example.com/', secret: 'short' }), 'ERR_BAD_REQUEST');
  t.equal(await bad({ id: 'a b', kind: 'webhook', url: 'https://example.com/' }), 'ERR_BAD_REQUEST');
  t.equal(await bad({ id: 'x', kind: 'webhook', url: 'https://example.com/', colour: 'red' }), 'ERR_BAD_REQUEST', 'an unknown field');
  for (const body of [null, [], 'text', 42]) {
    const r = await api('POST', '/api/1/subscriptions', body);
    t.equal(r.json?.error?.code, 'ERR_BAD_REQUEST', `a body of ${JSON.stringify(body)}`);
  }
  t.equal((await api('GET', '/api/1/deliveries/abc')).status, 404);
  t.equal((await api('GET', '/api/1/deliveries?state=lost')).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await api('POST', '/api/1/subscriptions', { id: 'ok', kind: 'webhook', url: 'https://example.com/h', min_severity: 'error' })).status, 201);
  t.equal(await bad({ id: 'ok', kind: 'webhook', url: 'https://example.com/' }), 'ERR_CONFLICT');
  t.match((await api('PATCH', '/api/1/subscriptions/ok', { enabled: false })).json.data, { enabled: false, min_severity: 'error' });
  t.equal((await api('PATCH', '/api/1/subscriptions/ok', { secret: 'x'.repeat(20) })).json.error.code, 'ERR_BAD_REQUEST');
  t.equal((await api('DELETE', '/api/1/subscriptions/ok')).status, 204);
  t.equal((await api('DELETE', '/api/1/subscriptions/ok')).status, 404);
  const audit = (await api('GET', '/api/1/audit')).json.data.filter((a: { target: string; status: number }) => a.target === 'ok' && a.status < 300);
  t.same(audit.map((a: { action: string }) => a.action).sort(), ['subscription.create', 'subscription.delete', 'subscription.update']);
  t.notMatch(JSON.stringify(audit), /sealed|v1\./, 'the sealed secret is in no record');
});
