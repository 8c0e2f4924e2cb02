/**
 * Hostile input against the real programs: a server and a relay in front of it (the agent has no
 * listener: `capstan-agent listen` holds an outbound connection), each sent a generated corpus
 * (fast-check, fixed seed) and a list of known-bad inputs, over bare sockets so that nothing is
 * normalised on the way: names, percent-encodings, request lines, headers, Content-Lengths and
 * chunks, JSON shapes, signatures and timestamps, to every endpoint.
 *
 * Every answer must be a success or the coded JSON error; each program must still answer after
 * the corpus; its spool must hold only whole files that it acknowledged (tmp/ drained, every file
 * in incoming/ and failed/ byte for byte an acknowledged upload); and its RSS must not grow by
 * more than RSS_GROWTH_MB across the corpus.
 */
import { createHash } from 'node:crypto';
import { existsSync } from 'node:fs';
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import fc from 'fast-check';
import t from 'tap';
import { BIN, startProgram, waitFor, type Running, programDir, serverAndRelay } from '../helpers/programs.js';
import { codeOf, rawHttp, type RawAnswer } from '../helpers/raw-http.js';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const RSS_GROWTH_MB = 96;
const SEED = 20261125;

/**
 * Inputs known to fail the assertions today, each fixed on another branch of the hardening
 * work (kept here so the suite is not weakened; an entry must be removed once it passes).
 * Matched by the label of the request.
 */
/**
 * Inputs known to get a wrong answer, reported as a comment instead of failing. Empty: 20,000
 * nested arrays posted to /api/1/managers answered 500 (a stack overflow) until bodies deeper than
 * `limits.max_json_depth` were refused with a coded 400 before parsing.
 */
const KNOWN_FAILING = new Set<string>([]);

interface Target {
  name: 'server' | 'relayd';
  run: Running;
  spool: string;
  /**
   * Upload name → sha256 of every body acknowledged with 201 under that name (one map for both:
   * the relay forwards what it acknowledged to the server, unchanged and under the same name).
   */
  acked: Map<string, Set<string>>;
}

interface Probe {
  label: string;
  /** The request bytes (request line, headers, body), sent as one piece or several. */
  pieces: Array<string | Buffer | number>;
  head?: boolean;
  upload?: { name: string; body: Buffer };
}

function request(method: string, path: string, opts: { headers?: Record<string, string>; body?: Buffer | string; token?: string } = {}): Array<string | Buffer> {
  const body = opts.body === undefined ? undefined : Buffer.isBuffer(opts.body) ? opts.body : Buffer.from(opts.body);
  const headers: Record<string, string> = { host: 'capstan', connection: 'close', ...opts.headers };
  if (opts.token) headers.authorization = `Bearer ${opts.token}`;
  if (body && headers['content-length'] === undefined && headers['transfer-encoding'] === undefined) headers['content-length'] = String(body.length);
  const head = `${method} ${path} HTTP/1.1\r\n${Object.entries(headers).map(([k, v]) => `${k}: ${v}\r\n`).join('')}\r\n`;
  return body ? [Buffer.concat([Buffer.from(head, 'latin1'), body])] : [head];
}

const sha = (b: Buffer) => createHash('sha256').update(b).digest('hex');

async function rssMb(pid: number): Promise<number | null> {
  const status = await readFile(`/proc/${pid}/status`, 'utf8').catch(() => null);
  const m = status && /^VmRSS:\s+(\d+) kB$/m.exec(status);
  return m ? Number(m[1]) / 1024 : null;
}

// ---------------------------------------------------------------- the corpus

/** Run-log and inventory names: valid, near-valid and hostile (timestamps, ids, encodings). */
const NAMES = [
  `2026-11-25T10:00:00+00:00@${NODE}.log`, `2026-11-25T10:00:00Z@${NODE}.log.gz`, `${NODE}_2026-11-25T10:00:00Z.json`,
  'toto', 'bob.log', '.hidden.log', '..', '.', '../../etc/passwd', '..%2f..%2fetc%2fpasswd', '%2e%2e', 'a/b', 'a\\b',
  `2026-02-30T10:00:00+00:00@${NODE}.log`, `99999-11-25T10:00:00+00:00@${NODE}.log`, `2026-11-25T25:61:61+00:00@${NODE}.log`,
  `2026-11-25T10:00:00+99:99@${NODE}.log`, `-2026-11-25T10:00:00+00:00@${NODE}.log`, `2026-11-25T10:00:00+00:00@.log`,
  `2026-11-25T10:00:00+00:00@${'n'.repeat(300)}.log`, `${'x'.repeat(5000)}.log`, `2026-11-25T10:00:00+00:00@${NODE}.log.reason`,
  `2026-11-25T10:00:00+00:00@${NODE}.log\u0000`, `2026-11-25T10:00:00+00:00@nœud.log`, '\u202e.log', `${NODE}_2026-11-25T10:00:00Z.json.zst`,
];
const ENCODINGS = ['%', '%%', '%zz', '%E0%A4%A', '%C0%AF', '%FF%FE', '%00', '%u002e', '%2', '%ED%A0%80', '%F4%90%80%80'];

function knownBad(token: string): Probe[] {
  const p: Probe[] = [];
  const add = (label: string, pieces: Array<string | Buffer | number>, extra: Partial<Probe> = {}) => p.push({ label, pieces, ...extra });
  for (const kind of ['reports', 'inventories']) {
    for (const n of NAMES) {
      const body = Buffer.from(`hostile body for ${n}`);
      add(`name ${kind} ${JSON.stringify(n.slice(0, 40))}`, request('PUT', `/${kind}/${encodeURIComponent(n)}`, { body }), { upload: { name: n, body } });
      // Unencoded, as a careless client sends it (ASCII only: other characters cannot be one byte).
      const raw = n.replace(/[\s\u0000-\u001f]/g, '_');
      if (/^[\x21-\x7e]*$/.test(raw)) add(`raw name ${kind} ${JSON.stringify(n.slice(0, 40))}`, request('PUT', `/${kind}/${raw}`, { body }), { upload: { name: raw, body } });
    }
    for (const e of ENCODINGS) add(`encoding ${kind} ${e}`, request('PUT', `/${kind}/a${e}b.log`, { body: 'x' }));
    const name = encodeURIComponent(`2026-11-25T11:00:00+00:00@${NODE}.log`);
    add(`${kind} chunked upload`, request('PUT', `/${kind}/${name}`, { headers: { 'transfer-encoding': 'chunked' }, body: '5\r\nhello\r\n0\r\n\r\n' }));
    add(`${kind} empty body`, request('PUT', `/${kind}/${name}`, { headers: { 'content-length': '0' } }));
    add(`${kind} negative length`, request('PUT', `/${kind}/${name}`, { headers: { 'content-length': '-1' }, body: 'x' }));
    add(`${kind} length not a number`, request('PUT', `/${kind}/${name}`, { headers: { 'content-length': '12abc' }, body: 'x' }));
    add(`${kind} length huge`, request('PUT', `/${kind}/${name}`, { headers: { 'content-length': '99999999999999999999' }, body: 'x' }));
    add(`${kind} two lengths`, [`PUT /${kind}/${name} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nContent-Length: 5\r\n\r\nabcde`]);
    add(`${kind} length and chunked`, [`PUT /${kind}/${name} HTTP/1.1\r\nHost: x\r\nContent-Length: 3\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n`]);
    add(`${kind} bad chunk size`, [`PUT /${kind}/${name} HTTP/1.1\r\nHost: x\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\nabc\r\n0\r\n\r\n`]);
    add(`${kind} body shorter than length`, [`PUT /${kind}/${encodeURIComponent(`2026-11-25T12:00:00+00:00@${NODE}.log`)} HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\nshort`]);
    add(`${kind} gzip garbage`, request('PUT', `/${kind}/${encodeURIComponent(`2026-11-25T13:00:00+00:00@${NODE}.log.gz`)}`, { body: Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff]) }), { upload: { name: `2026-11-25T13:00:00+00:00@${NODE}.log.gz`, body: Buffer.from([0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 3, 0xff, 0xff]) } });
    const smime = Buffer.from('MIME-Version: 1.0\r\nContent-Type: multipart/signed; protocol="application/x-pkcs7-signature"; micalg="sha-256"; boundary="b"\r\n\r\n--b\r\nContent-Type: text/plain\r\n\r\n2026-11-25T10:00:00+00:00 R: @@x@@result_success@@r@@d@@0@@c@@k@@2026-11-25 10:00:00+00:00##n@#m\r\n--b\r\nContent-Type: application/x-pkcs7-signature\r\n\r\nAAAA\r\n--b--\r\n');
    add(`${kind} forged signature`, request('PUT', `/${kind}/${encodeURIComponent(`2026-11-25T14:00:00+00:00@${NODE}.log`)}`, { body: smime }), { upload: { name: `2026-11-25T14:00:00+00:00@${NODE}.log`, body: smime } });
  }
  // Below the routes: request lines, headers, the parser.
  add('header too large', [`GET /uuid HTTP/1.1\r\nHost: x\r\nX-Big: ${'a'.repeat(20_000)}\r\n\r\n`]);
  add('many headers', [`GET /uuid HTTP/1.1\r\nHost: x\r\n${Array.from({ length: 3000 }, (_, i) => `X-${i}: y\r\n`).join('')}\r\n`]);
  add('garbage request line', ['HELLO\r\n\r\n']);
  add('bad method', ['G@T /uuid HTTP/1.1\r\nHost: x\r\n\r\n']);
  add('unknown method', ['BREW /uuid HTTP/1.1\r\nHost: x\r\n\r\n']);
  add('http/2.0 line', ['GET /uuid HTTP/2.0\r\nHost: x\r\n\r\n']);
  add('http/0.9 line', ['GET /uuid\r\n\r\n']);
  add('header without colon', ['GET /uuid HTTP/1.1\r\nHost: x\r\nnocolon\r\n\r\n']);
  add('NUL in header', ['GET /uuid HTTP/1.1\r\nHost: x\r\nX-A: a\u0000b\r\n\r\n']);
  add('obs-fold header', ['GET /uuid HTTP/1.1\r\nHost: x\r\nX-A: a\r\n b\r\n\r\n']);
  add('bare LF lines', ['GET /uuid HTTP/1.1\nHost: x\n\n']);
  add('absolute-form target', ['GET http://evil.example/uuid HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
  add('asterisk target', ['OPTIONS * HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n']);
  add('space in target', ['GET /u id HTTP/1.1\r\nHost: x\r\n\r\n']);
  add('very long path', [`GET /${'a'.repeat(60_000)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`]);
  add('long path segment', [`GET /api/1/nodes/${'a'.repeat(5000)} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n`]);
  add('upgrade on a plain route', ['GET /uuid HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: websocket\r\n\r\n']);
  add('upgrade remote-run bad id', ['GET /remote-run/listen/%zz HTTP/1.1\r\nHost: x\r\nConnection: Upgrade\r\nUpgrade: capstan-remote-run\r\n\r\n']);
  add('expect continue', [`PUT /reports/${encodeURIComponent(`2026-11-25T15:00:00+00:00@${NODE}.log`)} HTTP/1.1\r\nHost: x\r\nExpect: 100-continue\r\nContent-Length: 4\r\nConnection: close\r\n\r\n`, 50, 'body'], {
    upload: { name: `2026-11-25T15:00:00+00:00@${NODE}.log`, body: Buffer.from('body') },
  });
  add('unsupported expect', ['GET /uuid HTTP/1.1\r\nHost: x\r\nExpect: teapot\r\nConnection: close\r\n\r\n']);
  for (const e of ENCODINGS) {
    add(`path encoding ${e}`, request('GET', `/api/1/nodes/${e}`, { token }));
    add(`policy path encoding ${e}`, request('GET', `/policies/${e}/rules`));
  }
  // JSON shapes on every JSON endpoint.
  const deep = (n: number) => '['.repeat(n) + ']'.repeat(n);
  const shapes: Array<[string, string | Buffer]> = [
    ['not json', '{'], ['empty object', '{}'], ['array', '[]'], ['string', '"x"'], ['null', 'null'], ['number', '1e309'],
    ['proto', '{"__proto__":{"admin":true},"constructor":{"prototype":{"x":1}}}'], ['huge string', JSON.stringify({ id: 'x'.repeat(100_000) })],
    ['invalid utf8', Buffer.from([0x7b, 0x22, 0x69, 0x64, 0x22, 0x3a, 0x22, 0xc3, 0x28, 0x22, 0x7d])], ['bom', '\ufeff{"id":"a"}'],
    ['wrong types', '{"id":1,"hostname":[],"certificate":{},"state":false,"nodes":"x","directives":7}'],
    ['nested 64', deep(64)], ['nested 20000', deep(20_000)],
  ];
  const jsonRoutes: Array<[string, string, boolean]> = [
    ['POST', '/api/1/nodes', true], ['PATCH', `/api/1/nodes/${NODE}`, true], ['POST', '/api/1/directives', true], ['POST', '/api/1/groups', true],
    ['POST', '/api/1/rules', true], ['POST', '/api/1/jobs', true], ['POST', '/api/1/managers', true], ['PUT', '/api/1/directives/d1', true],
    ['POST', '/identity/renew', false], ['POST', '/rudder/relay-api/1/providers/r1/managers/m1/discovery', false],
  ];
  for (const [label, body] of shapes) {
    for (const [method, path, admin] of jsonRoutes) {
      add(`json ${label} ${method} ${path}`, request(method, path, { body, token: admin ? token : undefined, headers: { 'content-type': 'application/json' } }));
    }
  }
  // Tokens and signatures.
  for (const auth of ['Bearer', 'Bearer ', 'Bearer x', `Bearer ${'a'.repeat(9000)}`, 'Basic YWRtaW46YWRtaW4=', 'Bearer eyJhbGciOiJub25lIn0.eyJzdWIiOiJ4In0.', `Bearer ${token}x`]) {
    add(`auth ${auth.slice(0, 20)} admin`, request('GET', '/api/1/nodes', { headers: { authorization: auth } }));
    add(`auth ${auth.slice(0, 20)} policy`, request('GET', `/policies/${NODE}/rules`, { headers: { authorization: auth } }));
  }
  // Query parameters.
  for (const q of ['page=-1', 'page=abc', 'per_page=100000000', 'per_page=0', 'status=%zz', 'since=x', 'since=-1', 'wait=999999999', 'page=1&page=2', 'a[b]=c']) {
    add(`query ${q} nodes`, request('GET', `/api/1/nodes?${q}`, { token }));
    add(`query ${q} changes`, request('GET', `/rudder/relay-api/1/policies/changes?${q}`));
  }
  // The relay API.
  for (const path of ['/rudder/relay-api/1/shared-files/x/y/z', '/rudder/relay-api/1/shared-files/%2e%2e/y/z', '/rudder/relay-api/1/shared-folder/../../etc/passwd', '/rudder/relay-api/1/shared-folder/%2e%2e/x']) {
    add(`relay api PUT ${path}`, request('PUT', `${path}?ttl=1d`, { body: 'hash_value=zz\n\ncontent' }));
    add(`relay api HEAD ${path}`, request('HEAD', `${path}?hash=zz&hash_type=md5`), { head: true });
    add(`relay api GET ${path}`, request('GET', path));
  }
  add('remote-run bad form', request('POST', '/rudder/relay-api/1/remote-run/nodes', { body: 'nodes=%zz&conditions=a~b', headers: { 'content-type': 'application/x-www-form-urlencoded' } }));
  add('remote-run output garbage', request('POST', '/remote-run/output/nope', { body: '{"type":\n' }));
  add('system reload with body', request('POST', '/rudder/relay-api/1/system/reload', { body: '{"x":1}' }));
  return p;
}

function generated(token: string): Probe[] {
  const p: Probe[] = [];
  const seed = SEED;
  // Names: any string, percent-encoded or sent with raw bytes escaped as %XX of arbitrary bytes.
  const names = fc.sample(fc.oneof(fc.string({ unit: 'binary', maxLength: 80 }), fc.stringMatching(/^[0-9T:+_.@a-z%-]{1,80}$/)), { seed, numRuns: 120 });
  names.forEach((n, i) => {
    const kind = i % 2 ? 'reports' : 'inventories';
    const body = Buffer.from(`generated ${i}`);
    const path = i % 3 === 0 ? [...Buffer.from(n)].map((b) => `%${b.toString(16).padStart(2, '0')}`).join('') : encodeURIComponent(n);
    p.push({ label: `gen name ${i}`, pieces: request('PUT', `/${kind}/${path}`, { body }), upload: { name: n, body } });
  });
  // Run-log names around the valid form: timestamps and ids drawn at random.
  const stamps = fc.sample(fc.record({
    y: fc.integer({ min: -1, max: 100_000 }), mo: fc.integer({ min: 0, max: 13 }), d: fc.integer({ min: 0, max: 32 }),
    h: fc.integer({ min: 0, max: 25 }), off: fc.constantFrom('Z', '+00:00', '-23:59', '+24:00', '', '+0000'),
    id: fc.oneof(fc.constant(NODE), fc.stringMatching(/^[a-zA-Z0-9._-]{0,70}$/)), sep: fc.constantFrom(':', '_'), ext: fc.constantFrom('', '.gz', '.zip', '.zst', '.bz2'),
  }), { seed: seed + 1, numRuns: 80 });
  stamps.forEach((s, i) => {
    const two = (n: number) => String(n).padStart(2, '0');
    const name = `${s.y}-${two(s.mo)}-${two(s.d)}T${two(s.h)}${s.sep}00${s.sep}00${s.off}@${s.id}.log${s.ext}`;
    const body = Buffer.from(`stamp ${i}`);
    p.push({ label: `gen stamp ${i}`, pieces: request('PUT', `/reports/${encodeURIComponent(name)}`, { body }), upload: { name, body } });
  });
  // JSON documents of any shape to the JSON endpoints, with the admin token where they need it.
  const docs = fc.sample(fc.oneof(fc.json({ maxDepth: 6 }), fc.string({ maxLength: 60 })), { seed: seed + 2, numRuns: 120 });
  const routes: Array<[string, string, boolean]> = [
    ['POST', '/api/1/nodes', true], ['PATCH', `/api/1/nodes/${NODE}`, true], ['POST', '/api/1/directives', true], ['POST', '/api/1/groups', true],
    ['POST', '/api/1/rules', true], ['POST', '/api/1/jobs', true], ['POST', '/api/1/managers', true], ['POST', '/identity/renew', false],
  ];
  docs.forEach((d, i) => {
    const [method, path, admin] = routes[i % routes.length]!;
    p.push({ label: `gen json ${i} ${method} ${path}`, pieces: request(method, path, { body: d, token: admin ? token : undefined, headers: { 'content-type': 'application/json' } }) });
  });
  // Header values and query strings of arbitrary bytes.
  const values = fc.sample(fc.string({ unit: 'binary', maxLength: 40 }), { seed: seed + 3, numRuns: 80 });
  values.forEach((v, i) => {
    const safe = v.replace(/[\r\n]/g, ' ');
    const q = encodeURIComponent(v);
    const targets = ['/api/1/nodes', '/rudder/relay-api/1/policies/changes', `/policies/${NODE}/rules`, '/rudder/relay-api/1/system/status'];
    p.push({
      label: `gen header/query ${i}`,
      pieces: request('GET', `${targets[i % targets.length]}?${i % 2 ? 'page' : 'since'}=${q}&per_page=${q}`, { token, headers: { 'content-type': safe, 'x-capstan-version': safe, 'if-none-match': safe } }),
    });
  });
  return p;
}

// ---------------------------------------------------------------- checks

function judge(a: RawAnswer, probe: Probe): string | null {
  if (probe.head) return a.status === 0 ? 'no answer' : null;
  if (a.status === 0) return 'closed without an answer';
  if (a.status < 400) return null;
  if (codeOf(a) === undefined) return `status ${a.status} without a coded JSON error: ${a.body.slice(0, 120)}`;
  if (a.status === 500) return `500: ${a.body.slice(0, 120)}`;
  return null;
}

/** Every file in incoming/ and failed/ is, byte for byte, a body acknowledged under its name; tmp/ drains. */
async function wholeFilesOnly(target: Target): Promise<string[]> {
  const problems: string[] = [];
  await waitFor(async () => ((await readdir(join(target.spool, 'tmp'))).length === 0 ? true : undefined), `${target.name}: tmp/ drained`, 15_000)
    .catch(() => problems.push('tmp/ still holds partial uploads'));
  for (const where of ['incoming', 'failed']) {
    for (const kind of ['reports', 'inventories']) {
      const dir = join(target.spool, where, kind);
      if (!existsSync(dir)) continue;
      for (const n of await readdir(dir)) {
        if (n.endsWith('.reason')) continue;
        const body = await readFile(join(dir, n)).catch(() => null);
        if (!body) continue; // processed meanwhile
        // A refused file never replaces one kept under its name in failed/: it is kept as `<name>~<8 hex>`.
        const name = where === 'failed' ? n.replace(/~[0-9a-f]{8}$/, '') : n;
        if (!target.acked.get(name)?.has(sha(body))) problems.push(`${where}/${kind}/${n}: not a body acknowledged under that name`);
      }
    }
  }
  return problems;
}

t.test('hostile input: coded answers, programs up, whole files only, bounded memory', async (t) => {
  const dir = programDir(t);
  const { server, relay, token } = await serverAndRelay(t, dir, { logLevel: 'fatal' });
  const acked = new Map<string, Set<string>>();
  const targets: Target[] = [
    { name: 'server', run: server, spool: join(dir, 'server', 'spool'), acked },
    { name: 'relayd', run: relay, spool: join(dir, 'relay'), acked },
  ];
  const corpus = [...knownBad(token), ...generated(token)];
  t.comment(`corpus: ${corpus.length} requests to each program`);

  const send = async (target: Target, probe: Probe) => {
    let a: RawAnswer;
    try {
      a = await rawHttp(target.run.url, probe.pieces, 15_000);
    } catch (err) {
      return `${(err as Error).message}`;
    }
    if (probe.upload && a.status === 201) {
      const set = target.acked.get(probe.upload.name) ?? new Set<string>();
      set.add(sha(probe.upload.body));
      target.acked.set(probe.upload.name, set);
    }
    return judge(a, probe);
  };

  // A first pass warms both programs up (JIT, pools, caches) before memory is sampled.
  for (const target of targets) for (const probe of corpus.slice(0, 60)) await send(target, probe);
  const before = await Promise.all(targets.map((x) => rssMb(x.run.proc.pid!)));

  const failures: string[] = [];
  const knownSeen: string[] = [];
  for (const target of targets) {
    // A few at a time, as several clients would.
    const queue = [...corpus];
    await Promise.all(Array.from({ length: 4 }, async () => {
      for (let probe = queue.shift(); probe; probe = queue.shift()) {
        const problem = await send(target, probe);
        if (!problem) continue;
        if (KNOWN_FAILING.has(probe.label)) knownSeen.push(`${target.name}: ${probe.label}`);
        else failures.push(`${target.name}: ${probe.label}: ${problem}`);
      }
    }));
  }
  t.same(failures, [], 'every answer a success or a coded JSON error');
  if (knownSeen.length) t.comment(`known failing (fixed elsewhere): ${knownSeen.join('; ')}`);

  for (const target of targets) {
    const alive = await rawHttp(target.run.url, request('GET', '/uuid'));
    t.equal(alive.status, 200, `${target.name} still answers`);
    t.equal(target.run.proc.exitCode, null, `${target.name} still running`);
    t.same(await wholeFilesOnly(target), [], `${target.name}: only whole, acknowledged files in its spool`);
  }

  const after = await Promise.all(targets.map((x) => rssMb(x.run.proc.pid!)));
  targets.forEach((x, i) => {
    const b = before[i];
    const a = after[i];
    if (b === null || b === undefined || a === null || a === undefined) {
      if (process.env.CI === 'true') t.fail('/proc/<pid>/status is needed to sample RSS in CI');
      else t.comment(`skipping the memory bound for ${x.name}: no /proc/<pid>/status here`);
      return;
    }
    t.comment(`${x.name} RSS: ${b.toFixed(1)} MB before, ${a.toFixed(1)} MB after the corpus`);
    t.ok(a - b < RSS_GROWTH_MB, `${x.name}: RSS grew by ${(a - b).toFixed(1)} MB, less than ${RSS_GROWTH_MB}`);
  });
});
