/**
 * The node list synced from the upstream, against a stand-in upstream that serves
 * `GET /rudder/relay-api/1/nodes`: conditional fetches, the file-wins rule, what happens to a
 * file from a node the list does not know (forwarded by default; with refuse_unknown, refused for
 * good only by a list fetched after the file arrived), and the disk cache when the upstream is
 * down. The real server's endpoint is covered by test/e2e/relay-nodes-sync.test.ts.
 */
import { createServer, type Server } from 'node:http';
import { createHash } from 'node:crypto';
import { readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { put, startTestRelay } from './helpers/relay.js';
import { runName, until } from './helpers/upstream.js';
import { programDir } from '../helpers/programs.js';
import { listenOn } from '../helpers/ports.js';

const NODES = '/rudder/relay-api/1/nodes';

/** An upstream serving a node list (mutable) with ETags, and taking PUTs. */
class ListUpstream {
  nodes: Record<string, { hostname: string; 'policy-server': string }> = {};
  full = 0;
  notModified = 0;
  received: string[] = [];
  private server: Server | null = null;
  port = 0;

  body(): string {
    return JSON.stringify({ data: { nodes: this.nodes }, result: 'success', action: 'getNodesList' });
  }

  add(id: string): void {
    this.nodes[id] = { hostname: `${id}.example`, 'policy-server': 'root' };
  }

  async start(port = this.port): Promise<this> {
    this.server = createServer((req, res) => {
      if (this.isDown) {
        req.socket.destroy();
        return;
      }
      const path = decodeURIComponent((req.url ?? '/').split('?')[0]!);
      if (req.method === 'GET' && path === NODES) {
        const body = this.body();
        const etag = `"${createHash('sha256').update(body).digest('hex').slice(0, 16)}"`;
        if (req.headers['if-none-match'] === etag) {
          this.notModified++;
          res.writeHead(304, { etag }).end();
          return;
        }
        this.full++;
        res.writeHead(200, { etag, 'content-type': 'application/json' }).end(body);
        return;
      }
      if (req.method === 'GET') {
        res.writeHead(200).end('upstream\n');
        return;
      }
      // Takes PUTs only, as a relay or server without upload batches: the relay falls back to them.
      if (req.method !== 'PUT') {
        req.resume();
        res.writeHead(404, { 'content-type': 'application/json' }).end('{"error":{"code":"ERR_NOT_FOUND","message":"no route"}}');
        return;
      }
      req.resume();
      req.on('end', () => {
        this.received.push(path);
        res.writeHead(201, { 'content-type': 'application/json' }).end('{}');
      });
    });
    this.server.on('connection', (socket) => {
      if (this.isDown) {
        this.resets++;
        socket.destroy();
      }
    });
    this.port = await listenOn(this.server, port);
    return this;
  }

  /**
   * Down while still holding its port: every connection is reset at once. Closing the listener
   * instead would free the port for any other test's server to take, and the relay would then
   * forward to that one.
   */
  set down(down: boolean) {
    this.isDown = down;
    if (down) this.server?.closeAllConnections();
  }

  private isDown = false;
  /** Connections reset while down (the relay's attempts). */
  resets = 0;

  async stop(): Promise<void> {
    this.server?.closeAllConnections();
    await new Promise((r) => this.server?.close(r));
    this.server = null;
  }

  get url(): string {
    return `http://127.0.0.1:${this.port}`;
  }
}

async function status(url: string) {
  const s = (await (await fetch(`${url}/rudder/relay-api/1/system/status`)).json()) as {
    data: { nodes_list: { configured: boolean; nodes: number; synced?: { synced: boolean; nodes?: number; confirmed_at?: string; error?: string } } };
  };
  return s.data.nodes_list;
}

t.test('the list is fetched at start and revalidated with If-None-Match on reload', async (t) => {
  const up = await new ListUpstream().start();
  t.teardown(() => up.stop());
  up.add('node-a');
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  await until(async () => ((await status(r.url)).synced?.confirmed_at ? true : undefined), 'the first sync');
  t.equal((await status(r.url)).nodes, 1);
  t.equal(up.full, 1);

  await r.handle.reload();
  t.equal(up.notModified, 1, 'an unchanged list costs a 304');
  up.add('node-b');
  await r.handle.reload();
  t.equal(up.full, 2, 'a changed one is fetched whole');
  t.equal((await status(r.url)).nodes, 2);
  const cached = JSON.parse(await readFile(join(r.spool, 'nodes-list.json'), 'utf8')) as { body: string };
  t.equal(cached.body, up.body(), 'cached on disk as received');
});

t.test('by default a file from a node the synced list does not know goes up: the upstream decides', async (t) => {
  const up = await new ListUpstream().start();
  t.teardown(() => up.stop());
  up.add('node-a');
  const r = await startTestRelay(t, { 'upstream.url': up.url });
  await until(async () => ((await status(r.url)).synced?.confirmed_at ? true : undefined), 'the first sync');
  t.equal((await put(r.url, 'reports', runName('stranger', 1), 'x')).status, 201);
  await until(() => (up.received.length === 1 ? true : undefined), 'the file forwarded');
  t.match(up.received[0], /stranger/);
});

t.test('nodes_list_file wins over the synced list', async (t) => {
  const up = await new ListUpstream().start();
  t.teardown(() => up.stop());
  up.add('node-b');
  const dir = programDir(t);
  await writeFile(join(dir, 'nodeslist.json'), JSON.stringify({ 'node-a': { hostname: 'a', 'policy-server': 'root' } }));
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'general.nodes_list_file': join(dir, 'nodeslist.json'), 'nodes_sync.refuse_unknown': true }, { dir });
  await until(async () => ((await status(r.url)).synced?.confirmed_at ? true : undefined), 'the sync (for sub-relays)');
  t.equal((await status(r.url)).nodes, 1, 'routing by the file');
  t.equal((await put(r.url, 'reports', runName('node-b', 1), 'x')).status, 201);
  const reason = await until(() => readFile(join(r.spool, 'failed', 'reports', `${runName('node-b', 1)}.reason`), 'utf8').catch(() => undefined), 'node-b refused');
  t.match(reason, /ERR_NODE_UNKNOWN: node node-b is not in this relay's nodes list/);
  t.same(up.received, [], 'nothing from node-b went up');
});

t.test('refuse_unknown: a node accepted after the last sync is asked for, an unknown one refused, inventories always go up', async (t) => {
  const up = await new ListUpstream().start();
  t.teardown(() => up.stop());
  up.add('node-a');
  const r = await startTestRelay(t, { 'upstream.url': up.url, 'nodes_sync.refuse_unknown': true, 'nodes_sync.miss_refresh': '20ms' });
  await until(async () => ((await status(r.url)).synced?.confirmed_at ? true : undefined), 'the first sync');
  up.add('node-new'); // accepted upstream after the relay's sync
  t.equal((await put(r.url, 'reports', runName('node-new', 1), 'x')).status, 201);
  await until(() => (up.received.some((p) => p.includes('node-new')) ? true : undefined), "the new node's file forwarded after a refresh");
  t.equal((await status(r.url)).nodes, 2);

  t.equal((await put(r.url, 'reports', runName('stranger', 1), 'y')).status, 201);
  const reason = await until(() => readFile(join(r.spool, 'failed', 'reports', `${runName('stranger', 1)}.reason`), 'utf8').catch(() => undefined), 'the stranger refused');
  t.match(reason, /ERR_NODE_UNKNOWN: node stranger is not in the nodes list synced from the upstream/);
  t.equal((await put(r.url, 'inventories', 'stranger_2026-01-01T00:00:00Z.json', '{}')).status, 201);
  await until(() => (up.received.some((p) => p.startsWith('/inventories/stranger')) ? true : undefined), 'the inventory forwarded');
});

t.test('refuse_unknown with the upstream down: the cached list routes, and an unknown node waits instead of being refused', async (t) => {
  const up = await new ListUpstream().start();
  up.add('node-a');
  const dir = programDir(t);
  const first = await startTestRelay(t, { 'upstream.url': up.url, 'nodes_sync.refuse_unknown': true }, { dir });
  await until(async () => ((await status(first.url)).synced?.confirmed_at ? true : undefined), 'the first sync');
  await first.handle.close();
  up.down = true;
  t.teardown(() => up.stop());

  const r = await startTestRelay(t, { 'upstream.url': up.url, 'nodes_sync.refuse_unknown': true, 'nodes_sync.miss_refresh': '20ms' }, { dir });
  const s = await status(r.url);
  t.equal(s.nodes, 1, 'the cached list');
  t.notOk(s.synced?.confirmed_at);
  t.equal((await put(r.url, 'reports', runName('node-a', 1), 'a')).status, 201);
  t.equal((await put(r.url, 'reports', runName('node-late', 1), 'b')).status, 201);
  // node-late is unknown to a list older than its file: it is retried, never moved to failed/.
  // Both wait in incoming/, none refused, once the relay has tried the upstream (a connection it
  // reset). Whether a file is queued, in flight or backing off at a given instant is the
  // processor's business: on a loaded machine the gate may pause it with either in any state.
  const incoming = join(r.spool, 'incoming', 'reports');
  await until(async () => {
    const waiting = await readdir(incoming).catch(() => [] as string[]);
    const refused = await readdir(join(r.spool, 'failed', 'reports')).catch(() => [] as string[]);
    if (refused.length > 0) throw new Error(`refused while the upstream was down: ${refused.join(', ')}`);
    return up.resets > 0 && [runName('node-a', 1), runName('node-late', 1)].every((n) => waiting.includes(n)) ? true : undefined;
  }, 'both files waiting after an attempt upstream');
  up.add('node-late');
  up.down = false;
  await until(() => (up.received.length === 2 ? true : undefined), 'both files forwarded once the upstream is back', 30_000);
  t.same((await readdir(join(r.spool, 'failed', 'reports'))).length, 0, 'nothing refused');
});

t.test('a list that marks relays says which nodes are registered relays; one that marks none says nothing', async (t) => {
  const { NodesList } = await import('@capstan/relayd/data/nodes');
  const marked = NodesList.parse('top', JSON.stringify({
    top: { hostname: 'top', 'policy-server': 'root', relay: true },
    sub: { hostname: 'sub', 'policy-server': 'top', relay: true },
    agent: { hostname: 'a', 'policy-server': 'sub' },
    odd: { hostname: 'o', 'policy-server': 'top', relay: 'yes' },
  }));
  t.equal(marked.isRelay('sub'), true);
  t.equal(marked.isRelay('agent'), false);
  t.equal(marked.isRelay('odd'), false, 'only a JSON true counts');
  t.equal(marked.isRelay('unknown'), false, 'not in the list: not a relay');
  const rudder = NodesList.parse('top', JSON.stringify({ sub: { hostname: 'sub', 'policy-server': 'top' } }));
  t.equal(rudder.isRelay('sub'), null, 'RUDDER\'s format: unknown either way');
  t.equal(NodesList.empty('top').isRelay('sub'), null);
  const forced = NodesList.parse('top', JSON.stringify({
    a: { hostname: 'a', 'policy-server': 'top', 'tokens-after': 1764000000 },
    b: { hostname: 'b', 'policy-server': 'top', 'tokens-after': -5 },
    c: { hostname: 'c', 'policy-server': 'top', 'tokens-after': '1764000000' },
  }));
  t.equal(forced.tokensAfter('a'), 1764000000, 'a forced renewal time');
  t.equal(forced.tokensAfter('b'), 0, 'nonsense is ignored');
  t.equal(forced.tokensAfter('c'), 0);
  t.equal(forced.tokensAfter('nobody'), 0);
});
