/**
 * The agent's token keeper against a stand-in upstream that checks renewal requests the way the
 * server does (pinned certificate, fresh, never replayed) and issues real tokens: the token is
 * kept 0600, renewed when less than a third of its life is left and not before, kept while it has
 * life when a renewal fails and dropped once expired; a token handed over in the answer to an
 * inventory is kept only when it is this node's and valid, and only the inventory that asked gets
 * the request header.
 */
import { createServer, type IncomingMessage, type ServerResponse } from 'node:http';
import { stat, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { checkRenewRequest, generateSigningKey, HEADER_TOKEN_REQUEST, issueNodeToken, silentLogger } from '@capstan/shared';
import { ensureIdentity } from '@capstan/agent/identity/state';
import { TokenKeeper } from '@capstan/agent/identity/token';
import { Outbox } from '@capstan/agent/queue/outbox';
import { RelayClient } from '@capstan/agent/queue/upload';
import { programDir } from '../helpers/programs.js';

const key = generateSigningKey();
const claims = (token: string) => JSON.parse(Buffer.from(token.split('.')[1]!, 'base64url').toString()) as { jti: string; iat: number; exp: number; capstan_node_id: string };

async function body(req: IncomingMessage): Promise<Buffer> {
  const chunks: Buffer[] = [];
  for await (const c of req) chunks.push(c as Buffer);
  return Buffer.concat(chunks);
}

async function setup(t: Test) {
  const dir = programDir(t);
  const id = await ensureIdentity(join(dir, 'state'), 1024);
  const clock = { now: new Date('2026-11-22T12:00:00Z') };
  const seen = new Set<string>();
  const up = { down: false, ttl: 3000, renewals: 0, uploads: [] as Array<{ url: string; asked: boolean }>, answerToken: null as string | null };
  const server = createServer((req: IncomingMessage, res: ServerResponse) => {
    void (async () => {
      const data = await body(req);
      if (req.method === 'POST' && req.url === '/identity/renew') {
        up.renewals++;
        if (up.down) return res.writeHead(503).end('{"error":{"code":"ERR_UPSTREAM","message":"down"}}');
        try {
          await checkRenewRequest(data, id.certPem, id.nodeId, (n) => (seen.has(n) ? false : (seen.add(n), true)), clock.now);
        } catch (err) {
          return res.writeHead(401).end(JSON.stringify({ error: { code: (err as { code: string }).code } }));
        }
        const { token, claims: c } = await issueNodeToken({ key, nodeId: id.nodeId, group: 'default', ttlSeconds: up.ttl, now: clock.now });
        return res.writeHead(200, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { token, expires_at: new Date(c.exp * 1000).toISOString() } }));
      }
      if (req.method === 'PUT') {
        up.uploads.push({ url: req.url!, asked: req.headers[HEADER_TOKEN_REQUEST] === '1' });
        return res.writeHead(201, { 'content-type': 'application/json' }).end(JSON.stringify({ data: { file: req.url, ...(up.answerToken && { token: up.answerToken }) } }));
      }
      res.writeHead(404).end();
    })();
  });
  await new Promise<void>((r) => server.listen(0, '127.0.0.1', r));
  t.teardown(() => new Promise<void>((r) => server.close(() => r())));
  const url = `http://127.0.0.1:${(server.address() as { port: number }).port}`;
  const keeper = new TokenKeeper({ relay: url, stateDir: join(dir, 'state'), timeoutMs: 5000, id, log: silentLogger, clock: () => clock.now });
  const at = (s: number) => (clock.now = new Date(Date.parse('2026-11-22T12:00:00Z') + s * 1000));
  return { dir, id, clock, up, url, keeper, at, tokenFile: join(dir, 'state', 'identity.token') };
}

t.test('no token: renewed by signed request and kept 0600; renewed again only once less than a third of its life is left', async (t) => {
  const s = await setup(t);
  t.ok(await s.keeper.due(), 'no token: due');
  const first = await s.keeper.current();
  t.equal(s.up.renewals, 1);
  t.equal((await stat(s.tokenFile)).mode & 0o777, 0o600, 'kept 0600');
  t.equal((await readFile(s.tokenFile, 'utf8')).trim(), first);
  t.equal(claims(first!).capstan_node_id, s.id.nodeId);
  // Life 3000 s: at 1999 s, 1001 s are left (more than a third): kept.
  s.at(1999);
  t.notOk(await s.keeper.due());
  t.equal(await s.keeper.current(), first, 'kept while more than a third of its life is left');
  t.equal(s.up.renewals, 1, 'no request');
  t.equal(s.keeper.renewalDue(first!), (claims(first!).exp - 1000) * 1000 + 1, 'due just past two thirds of its life');
  s.at(2001);
  t.ok(await s.keeper.due());
  const second = await s.keeper.current();
  t.equal(s.up.renewals, 2, 'renewed once less than a third was left');
  t.not(claims(second!).jti, claims(first!).jti);
  t.equal((await stat(s.tokenFile)).mode & 0o777, 0o600);
});

t.test('a failed renewal keeps a token that still has life, and drops an expired one; never a lockout once the upstream is back', async (t) => {
  const s = await setup(t);
  const first = await s.keeper.current();
  s.up.down = true;
  s.at(2500);
  t.equal(await s.keeper.current(), first, 'due but not renewable: the token with life left is used');
  s.at(3001);
  t.equal(await s.keeper.current(), null, 'expired and not renewable: none');
  await t.rejects(s.keeper.renew(), { code: 'ERR_UPSTREAM' });
  s.up.down = false;
  const back = await s.keeper.current();
  t.ok(back && claims(back).exp > s.clock.now.getTime() / 1000, 'renewed by signed request whatever the old token\'s state');
  await writeFile(s.tokenFile, 'garbage\n');
  t.ok(await s.keeper.due(), 'an unreadable token is due');
  t.ok(await s.keeper.current());
});

t.test('a token handed over in an inventory answer: kept when it is this node\'s and valid; the header goes with that inventory only', async (t) => {
  const s = await setup(t);
  const mine = (await issueNodeToken({ key, nodeId: s.id.nodeId, group: 'default', ttlSeconds: 600, now: s.clock.now })).token;
  const theirs = (await issueNodeToken({ key, nodeId: 'someone-else', group: 'default', ttlSeconds: 600, now: s.clock.now })).token;
  const old = (await issueNodeToken({ key, nodeId: s.id.nodeId, group: 'default', ttlSeconds: 60, now: new Date(s.clock.now.getTime() - 3600_000) })).token;
  await t.rejects(s.keeper.accept(theirs), { code: 'ERR_TOKEN_INVALID' });
  await t.rejects(s.keeper.accept(old), { code: 'ERR_TOKEN_INVALID' });
  await t.rejects(s.keeper.accept('not.a.token'), { code: 'ERR_TOKEN_INVALID' });
  await stat(s.tokenFile).then(() => t.fail('nothing kept'), () => t.pass('nothing kept'));

  const outbox = new Outbox(join(s.dir, 'outbox'), silentLogger);
  await outbox.init();
  await outbox.add('reports', `2026-11-22T12:00:00+00:00@${s.id.nodeId}.log.zst`, Buffer.from('r'));
  const inv = `${s.id.nodeId}_2026-11-22T12:00:00+00:00.json.zst`;
  await outbox.add('inventories', inv, Buffer.from('i'));
  s.up.answerToken = mine;
  const flushed = await outbox.flush(new RelayClient(s.url, 5000, { file: inv, onToken: (tok) => s.keeper.accept(tok) }));
  t.match(flushed, { sent: 2, remaining: 0 });
  t.same(s.up.uploads.map((u) => [u.url.split('/')[1], u.asked]), [['inventories', true], ['reports', false]], 'the header goes with the inventory that asked only');
  t.equal((await readFile(s.tokenFile, 'utf8')).trim(), mine, 'kept');
  t.equal((await stat(s.tokenFile)).mode & 0o777, 0o600);
  t.equal(await s.keeper.current(), mine, 'and used: no renewal needed');
  t.equal(s.up.renewals, 0);

  // An answer with another node's token (a confused upstream) changes nothing and fails nothing.
  s.up.answerToken = theirs;
  await outbox.add('inventories', inv, Buffer.from('i'));
  t.match(await outbox.flush(new RelayClient(s.url, 5000, { file: inv, onToken: (tok) => s.keeper.accept(tok) })), { sent: 1, rejected: 0 });
  t.equal((await readFile(s.tokenFile, 'utf8')).trim(), mine);
});
