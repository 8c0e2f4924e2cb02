/**
 * A remote-run connection lives no longer than the node token it was opened with: the relay ends
 * it (`bye`, reason `token_expired`) and dispatches no run to it once the token has expired, and
 * `capstan-agent listen` renews its token while connected (a third of its life left) and reconnects
 * with the new one — or, when the relay ends the connection first, renews and comes straight back.
 * What used to go wrong: a connection opened with a token stayed open (and got runs) for as long
 * as the TCP connection lived, whatever happened to the token afterwards.
 */
import { readFile } from 'node:fs/promises';
import { request as httpRequest } from 'node:http';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { request } from 'undici';
import { issueNodeToken, generateSigningKey, silentLogger } from '@capstan/shared';
import { ensureIdentity } from '@capstan/agent/identity/state';
import { TokenKeeper } from '@capstan/agent/identity/token';
import { listen, type ListenAuth } from '@capstan/agent/remote-run/listen';
import { loadServerConfig } from '@capstan/server/config';
import { startServer } from '@capstan/server/server';
import { Hub, type PeerConn } from '@capstan/relayd/remote-run/listeners';
import { startTestRelay } from './helpers/relay.js';
import { testTokens } from './helpers/tokens.js';
import { until } from './helpers/upstream.js';
import { programDir } from '../helpers/programs.js';
import { jsonEvents } from '../helpers/http.js';
import { setAcceptance } from '../helpers/node-changes.js';

const claims = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { jti: string; iat: number; exp: number };

function memoryConn(): PeerConn & { lines: string[]; ended: boolean } {
  const lines: string[] = [];
  const closers: Array<() => void> = [];
  const c = {
    lines,
    ended: false,
    write: (l: string) => void lines.push(l),
    end: (l?: string) => {
      if (l) lines.push(l);
      c.ended = true;
      for (const fn of closers) fn();
    },
    destroy: () => {
      c.ended = true;
    },
    get closed() {
      return c.ended;
    },
    onClose: (fn: () => void) => void closers.push(fn),
  };
  return c;
}

t.test('hub: a peer past its token deadline gets no run and is ended with bye token_expired', async (t) => {
  const clock = { now: 1_000_000 };
  const hub = new Hub(3_600_000, 10, () => clock.now);
  t.teardown(() => hub.close());
  const short = memoryConn();
  const open = memoryConn();
  t.ok(hub.add({ id: 'short', relay: false, since: clock.now, conn: short, until: clock.now + 5000 }));
  t.ok(hub.add({ id: 'open', relay: false, since: clock.now, conn: open }));
  t.ok(hub.send('short', { type: 'run', id: 'r1' }), 'before its deadline it gets runs');
  clock.now += 5000;
  t.notOk(hub.send('short', { type: 'run', id: 'r2' }), 'at its deadline: no run');
  t.same(short.lines.map((l) => JSON.parse(l)), [{ type: 'run', id: 'r1' }, { type: 'bye', reason: 'token_expired' }]);
  t.notOk(hub.get('short'), 'and it is gone from the hub');
  t.equal(hub.endExpired(), 0, 'a connection without a deadline (no token required) is kept');
  t.ok(hub.send('open', { type: 'run', id: 'r3' }));
  const later = memoryConn();
  hub.add({ id: 'later', relay: false, since: clock.now, conn: later, until: clock.now + 1000 });
  clock.now += 1000;
  t.equal(hub.endExpired(), 1, 'the sweep ends it without a run being sent');
  t.same(later.lines.map((l) => JSON.parse(l)), [{ type: 'bye', reason: 'token_expired' }]);
});

/** Read JSON lines from a plain (streamed) listen connection until `stop` says so or it ends. */
async function readLines(url: string, token: string, stop: (ev: any) => boolean): Promise<{ events: any[]; ended: boolean }> {
  const ac = new AbortController();
  // reset: no keep-alive socket left behind to hold up the relay's close.
  const res = await request(url, { headers: { authorization: `Bearer ${token}` }, signal: ac.signal, bodyTimeout: 0, reset: true });
  const events: any[] = [];
  for await (const ev of jsonEvents(res.body)) {
    events.push(ev);
    if (stop(ev)) {
      ac.abort();
      return { events, ended: false };
    }
  }
  return { events, ended: true };
}

/** The same over `Upgrade: capstan-remote-run`. */
function readUpgraded(relay: string, path: string, token: string): Promise<{ events: any[]; ended: boolean }> {
  const u = new URL(relay);
  return new Promise((resolve, reject) => {
    const req = httpRequest({ host: u.hostname, port: u.port, path, headers: { connection: 'Upgrade', upgrade: 'capstan-remote-run', authorization: `Bearer ${token}` } });
    req.on('upgrade', (_res, socket, head: Buffer) => {
      let text = head.toString();
      socket.on('data', (d: Buffer) => (text += d.toString()));
      socket.on('end', () => socket.destroy());
      socket.on('close', () => resolve({ events: text.split('\n').filter(Boolean).map((l) => JSON.parse(l)), ended: true }));
    });
    req.on('response', (res) => reject(new Error(`answered ${res.statusCode}`)));
    req.on('error', reject);
    req.end();
  });
}

t.test('by default the relay requires a token; it ends a remote-run connection when its token expires (plain and upgraded); a longer token keeps it', async (t) => {
  const dir = programDir(t);
  const keys = testTokens(join(dir, 'keys'));
  const r = await startTestRelay(t, { ...keys.overrides, 'identity.clock_skew': '0s', 'remote_run.heartbeat': '100ms' }, { dir: join(dir, 'relay') });
  // Tokens are required by default (no identity.require_token given): none → 401 on every protected path.
  for (const path of ['/remote-run/listen/node-a', '/policies/node-a/rules', '/rudder/relay-api/1/shared-folder/motd']) {
    const res = await request(`${r.url}${path}`, { reset: true });
    t.equal(res.statusCode, 401, `${path} without a token`);
    await res.body.dump();
  }
  const started = Date.now();
  const shortToken = await keys.token('node-a', 2);
  const exp = claims(shortToken).exp;
  const plain = readLines(`${r.url}/remote-run/listen/node-a`, shortToken, (ev) => ev.type === 'bye');
  const upgraded = readUpgraded(r.url, '/remote-run/listen/node-b', await keys.token('node-b', 2));
  const long = readLines(`${r.url}/remote-run/listen/node-c`, await keys.token('node-c', 3600), () => Date.now() / 1000 > exp + 1);
  const p = await plain;
  t.equal(p.events[0]?.type, 'hello');
  t.same(p.events.at(-1), { type: 'bye', reason: 'token_expired' }, 'ended with bye, reason token_expired');
  t.ok(Date.now() / 1000 >= exp, 'not before the token expired');
  t.ok(Date.now() - started < 10_000, 'ended within a few heartbeats of the expiry');
  const u = await upgraded;
  t.same(u.events.at(-1), { type: 'bye', reason: 'token_expired' }, 'the upgraded connection too');
  const l = await long;
  t.notOk(l.events.some((e) => e.type === 'bye'), 'a connection whose token is still valid stays');
  t.equal(r.handle.context.remoteRun.hub.get('node-a'), undefined);
});

/** A real server (3 s tokens) and a real relay in front of it, and a node accepted with an agent identity. */
async function serverRelayAgent(t: Test) {
  const dir = programDir(t);
  const srv = await startServer(loadServerConfig({ overrides: {
    'general.data_dir': join(dir, 'server'), 'general.listen': '127.0.0.1:0', 'log.level': 'silent', 'identity.token_ttl': '3s',
  } }), silentLogger);
  t.teardown(() => srv.close());
  const stateDir = join(dir, 'agent');
  const id = await ensureIdentity(stateDir, 1024);
  await srv.store.createNode({ id: id.nodeId, hostname: 'listener.test', certificate: id.certPem });
  await setAcceptance(srv.store, id.nodeId, 'accepted', new Date().toISOString());
  const relay = await startTestRelay(t, {
    'upstream.url': srv.url, 'identity.clock_skew': '0s', 'identity.jwks_min_refresh': '0s', 'remote_run.heartbeat': '100ms',
  }, { dir: join(dir, 'relay') });
  const keeper = new TokenKeeper({ relay: relay.url, stateDir, timeoutMs: 5000, id, log: silentLogger, clock: () => new Date() });
  const ac = new AbortController();
  t.teardown(() => ac.abort());
  const tokenFile = join(stateDir, 'identity.token');
  return { srv, relay, id, keeper, ac, tokenFile };
}

/**
 * The agent's token keeper as a listener's auth, counting the renewals the listener asks for
 * (after a 401 or a bye). Without renewalDue it is an agent that never renews on its own.
 */
function keeperAuth(keeper: TokenKeeper, renewals: number[], o: { renewsOnItsOwn: boolean }): ListenAuth {
  return {
    current: () => keeper.current(),
    renew: async () => {
      renewals.push(Date.now());
      return keeper.renew();
    },
    ...(o.renewsOnItsOwn && { renewalDue: (token: string) => keeper.renewalDue(token) }),
  };
}

t.test('capstan-agent listen renews its token while connected and reconnects with the new one, before the relay ends it', async (t) => {
  const s = await serverRelayAgent(t);
  const connections: string[] = [];
  const renewals: number[] = [];
  const auth = keeperAuth(s.keeper, renewals, { renewsOnItsOwn: true });
  const byes: unknown[] = [];
  const info = ((o: unknown, msg?: string) => void (msg === 'identity token renewed; reconnecting with it' && byes.push(o))) as typeof silentLogger.info;
  const log = { ...silentLogger, info };
  void listen({
    relay: s.relay.url, nodeId: s.id.nodeId, log, auth, signal: s.ac.signal, run: async () => 0,
    onConnected: () => void readFile(s.tokenFile, 'utf8').then((tok) => connections.push(claims(tok.trim()).jti)),
  });
  await until(() => (connections.length >= 3 ? true : undefined), 'two renewals while connected', 20_000);
  t.equal(new Set(connections.slice(0, 3)).size, 3, 'each connection was opened with a newer token');
  t.equal(renewals.length, 0, 'never refused: the renewals were the due ones (current()), not a 401 or a bye');
  t.ok(byes.length >= 2, 'the listener said why it reconnected');
  const peer = s.relay.handle.context.remoteRun.hub.get(s.id.nodeId);
  t.ok(peer && peer.until! > Date.now(), 'the relay holds a connection whose token is valid');
});

t.test('a listener that does not renew on its own is ended at expiry, renews by signed request and comes straight back', async (t) => {
  const s = await serverRelayAgent(t);
  const tokens: string[] = [];
  const renewals: number[] = [];
  // No renewalDue: like an agent whose clock runs behind, it would keep the token until the relay says.
  const auth = keeperAuth(s.keeper, renewals, { renewsOnItsOwn: false });
  void listen({
    relay: s.relay.url, nodeId: s.id.nodeId, log: silentLogger, auth, signal: s.ac.signal, run: async () => 0,
    onConnected: () => void readFile(s.tokenFile, 'utf8').then((tok) => tokens.push(tok.trim())),
  });
  await until(() => (tokens.length >= 2 ? true : undefined), 'a second connection after the relay ended the first', 20_000);
  t.equal(renewals.length, 1, 'one signed renewal, asked for by the bye');
  const [first, second] = tokens.map(claims);
  t.not(second!.jti, first!.jti);
  t.ok(renewals[0]! / 1000 >= first!.exp, 'renewed once the first token had expired at the relay');
  const rogue = await issueNodeToken({ key: generateSigningKey(), nodeId: s.id.nodeId, group: 'default', ttlSeconds: 60 });
  const refused = await request(`${s.relay.url}/remote-run/listen/${s.id.nodeId}`, { headers: { authorization: `Bearer ${rogue.token}` } });
  t.equal(refused.statusCode, 401, 'the relay still checks every new connection');
  await refused.body.dump();
});
