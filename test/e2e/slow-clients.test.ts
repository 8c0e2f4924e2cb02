/**
 * What one slow or greedy client may cost relayd and the server ([http]): headers must come
 * within headers_timeout, an upload's body may not pause longer than body_timeout nor average
 * less than min_upload_rate after upload_rate_grace, at most max_uploads uploads are in progress,
 * and once half of them are, each address gets its fair share (never less than
 * max_uploads_per_client); until then one address (a NAT, a relay) takes what it needs. Before, a body trickled at a byte every few seconds
 * held its connection and temporary file for as long as the client liked (no body timeout at
 * all on the relay, none on uploads at the server), and one address could open any number of them.
 */
import { readdir, writeFile } from 'node:fs/promises';
import { connect, type Socket } from 'node:net';
import { join } from 'node:path';
import t, { type Test } from 'tap';
import { BIN, startProgram, waitFor, type Running, programDir } from '../helpers/programs.js';
import { codeOf, rawHttp } from '../helpers/raw-http.js';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';
const name = (i: number) => encodeURIComponent(`2026-11-25T10:00:${String(i).padStart(2, '0')}+00:00@${NODE}.log`);
const head = (path: string, length: number) => `PUT ${path} HTTP/1.1\r\nHost: capstan\r\nContent-Length: ${length}\r\n\r\n`;

interface Program { name: string; run: Running; spool: string }

async function start(t: Test, http: string): Promise<Program[]> {
  const dir = programDir(t);
  await writeFile(join(dir, 'c.toml'), `[http]\n${http}`);
  const [server, relay] = await Promise.all([
    startProgram(BIN.server, ['serve', '--config', join(dir, 'c.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(dir, 'server'), '--log-level', 'warn']),
    startProgram(BIN.relayd, ['--config', join(dir, 'c.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'warn']),
  ]);
  t.teardown(() => Promise.all([server.stop(), relay.stop()]));
  return [
    { name: 'server', run: server, spool: join(dir, 'server', 'spool') },
    { name: 'relayd', run: relay, spool: join(dir, 'relay') },
  ];
}

/** Nothing of a refused upload left: tmp/ empty and no such file in incoming/reports. */
async function nothingKept(p: Program): Promise<boolean | undefined> {
  const tmp = await readdir(join(p.spool, 'tmp'));
  const incoming = await readdir(join(p.spool, 'incoming', 'reports'));
  return tmp.length === 0 && incoming.length === 0 ? true : undefined;
}

t.test('slow headers, a paused body and a trickled body are cut off with 408, nothing kept', async (t) => {
  const programs = await start(t, 'headers_timeout = "400ms"\nbody_timeout = "400ms"\nmin_upload_rate = 200\nupload_rate_grace = "500ms"\n');
  for (const p of programs) {
    const url = p.run.url;
    // Headers never finished.
    const slowHead = await rawHttp(url, [`PUT /reports/${name(1)} HTTP/1.1\r\nHost: capstan\r\n`, 'Content-Le'], 8000);
    t.equal(slowHead.status, 408, `${p.name}: headers too slow → 408`);
    t.equal(codeOf(slowHead), 'ERR_REQUEST_TIMEOUT', `${p.name}: coded (${slowHead.body})`);
    t.ok(slowHead.ms < 5000, `${p.name}: cut after ${slowHead.ms} ms`);

    // Body stops half-way: the pause exceeds body_timeout.
    const paused = await rawHttp(url, [head(`/reports/${name(2)}`, 100), 'x'.repeat(50)], 8000);
    t.equal(paused.status, 408, `${p.name}: paused body → 408`);
    t.equal(codeOf(paused), 'ERR_REQUEST_TIMEOUT');
    t.match(paused.body, /body_timeout/);
    t.equal(paused.headers.connection, 'close', 'the rest of the body is not read as a next request');
    t.ok(paused.ms < 5000, `${p.name}: cut after ${paused.ms} ms`);

    // A byte every 100 ms: never a pause of body_timeout, but 10 bytes/s where 200 are asked for.
    const trickle: Array<string | number> = [head(`/reports/${name(3)}`, 400)];
    for (let i = 0; i < 400; i++) trickle.push('x', 100);
    const slow = await rawHttp(url, trickle, 10_000);
    t.equal(slow.status, 408, `${p.name}: trickled body → 408`);
    t.match(slow.body, /min_upload_rate/);
    t.ok(slow.ms < 5000, `${p.name}: cut after ${slow.ms} ms (the whole body would take 40 s)`);

    // A JSON body read whole (a renewal request) follows the same pace.
    const renew = await rawHttp(url, ['POST /identity/renew HTTP/1.1\r\nHost: capstan\r\nContent-Type: application/json\r\nContent-Length: 200\r\n\r\n{"node_id":'], 8000);
    t.equal(renew.status, 408, `${p.name}: paused JSON body → 408`);
    t.equal(codeOf(renew), 'ERR_REQUEST_TIMEOUT');

    await waitFor(() => nothingKept(p), `${p.name}: nothing left of the refused uploads`, 5000);
    // Still up, and a client at a normal pace is served.
    const ok = await rawHttp(url, [head(`/reports/${name(4)}`, 5), 'hello']);
    t.equal(ok.status, 201, `${p.name}: a normal upload still works`);
  }
});

/** An upload held open half-way from `from` (an address of 127/8), on its own connection. */
async function holdUpload(t: Test, base: string, i: number, from: string): Promise<Socket> {
  const url = new URL(base);
  const s = connect({ host: url.hostname, port: Number(url.port), localAddress: from });
  s.on('error', () => {});
  t.teardown(() => s.destroy());
  await new Promise<void>((res) => s.once('connect', () => res()));
  s.write(head(`/reports/${name(i)}`, 100) + 'x'.repeat(10));
  return s;
}

/** A whole upload from `from`: its answer. */
const upload = (base: string, i: number, from: string) => rawHttp(base, [head(`/reports/${name(i)}`, 5), 'hello'], 10_000, from);

t.test('one address (a NAT, a relay) takes what it needs while the listener has room', async (t) => {
  const programs = await start(t, 'max_uploads = 13\nmax_uploads_per_client = 2\nbody_timeout = "20s"\nmin_upload_rate = 0\n');
  for (const p of programs) {
    // 13 uploads in progress from one address, six times max_uploads_per_client.
    const held: Socket[] = [];
    let answered = 0;
    for (let i = 0; i < 13; i++) {
      const s = await holdUpload(t, p.run.url, 10 + i, '127.0.0.1');
      s.on('data', () => answered++);
      held.push(s);
    }
    // Counted, all of them: the listener is full…
    const full = await waitFor(async () => {
      const a = await upload(p.run.url, 30, '127.0.0.1');
      return a.status === 503 ? a : undefined;
    }, `${p.name}: the listener full with 13 uploads of one address`, 8000);
    t.equal(codeOf(full), 'ERR_BUSY', `${p.name}: max_uploads reached: 503 ERR_BUSY`);
    // …and none of them was refused for its address.
    t.equal(answered, 0, `${p.name}: none of the 13 uploads of one address was answered with a refusal`);
    // One ends: the same address, 12 in progress, is served.
    held.pop()!.destroy();
    const more = await waitFor(async () => {
      const a = await upload(p.run.url, 31, '127.0.0.1');
      return a.status === 201 || a.status === 429 ? a : undefined;
    }, `${p.name}: an upload beside 12 in progress`, 8000);
    t.equal(more.status, 201, `${p.name}: one address with 12 uploads in progress is served (${more.body})`);
    held.forEach((s) => s.destroy());
  }
});

t.test('a contended listener: each address its fair share (429), and max_uploads in all (503)', async (t) => {
  const programs = await start(t, 'max_uploads = 8\nmax_uploads_per_client = 1\nbody_timeout = "20s"\nmin_upload_rate = 0\n');
  for (const p of programs) {
    // A (127.0.0.1) holds 7, B (127.0.0.2) holds 1: the listener is full.
    const a = [];
    for (let i = 0; i < 7; i++) a.push(await holdUpload(t, p.run.url, 10 + i, '127.0.0.1'));
    const b = await holdUpload(t, p.run.url, 20, '127.0.0.2');
    const full = await waitFor(async () => {
      const x = await upload(p.run.url, 21, '127.0.0.3');
      return x.status === 503 ? x : undefined;
    }, `${p.name}: a ninth upload refused`, 8000);
    t.equal(codeOf(full), 'ERR_BUSY', `${p.name}: max_uploads reached: 503 ERR_BUSY`);
    t.ok(Number(full.headers['retry-after']) > 0, 'with Retry-After');
    // Other requests are not uploads: not counted.
    t.equal((await rawHttp(p.run.url, ['GET /uuid HTTP/1.1\r\nHost: capstan\r\nConnection: close\r\n\r\n'])).status, 200);

    // One of A's ends: A (6 in progress) is over its share of 8 between two addresses…
    a.pop()!.destroy();
    const over = await waitFor(async () => {
      const x = await upload(p.run.url, 22, '127.0.0.1');
      return x.status === 429 ? x : undefined;
    }, `${p.name}: A refused its share`, 8000);
    t.equal(codeOf(over), 'ERR_TOO_MANY_UPLOADS', `${p.name}: A past its share: 429 (${over.body})`);
    t.ok(Number(over.headers['retry-after']) > 0, 'with Retry-After');
    // …and B, under its share, is served.
    const fair = await upload(p.run.url, 23, '127.0.0.2');
    t.equal(fair.status, 201, `${p.name}: B under its share is served (${fair.body})`);
    b.destroy();
    a.forEach((s) => s.destroy());
    // Once the uploads end, A is served again.
    const after = await waitFor(async () => {
      const x = await upload(p.run.url, 24, '127.0.0.1');
      return x.status === 201 ? x : undefined;
    }, `${p.name}: slots freed when uploads end`, 8000);
    t.equal(after.status, 201);
  }
});

t.test('max_uploads = 0: max_uploads_per_client is a fixed limit per address', async (t) => {
  const programs = await start(t, 'max_uploads = 0\nmax_uploads_per_client = 2\nbody_timeout = "20s"\nmin_upload_rate = 0\n');
  for (const p of programs) {
    const held = [await holdUpload(t, p.run.url, 10, '127.0.0.1'), await holdUpload(t, p.run.url, 11, '127.0.0.1')];
    const third = await waitFor(async () => {
      const a = await upload(p.run.url, 12, '127.0.0.1');
      return a.status === 429 ? a : undefined;
    }, `${p.name}: the third upload refused`, 8000);
    t.equal(codeOf(third), 'ERR_TOO_MANY_UPLOADS', `${p.name}: coded`);
    t.equal((await upload(p.run.url, 13, '127.0.0.2')).status, 201, `${p.name}: another address is served`);
    held[0]!.destroy();
    const after = await waitFor(async () => {
      const a = await upload(p.run.url, 14, '127.0.0.1');
      return a.status === 201 ? a : undefined;
    }, `${p.name}: a slot freed when an upload ends`, 8000);
    t.equal(after.status, 201);
    held[1]!.destroy();
  }
});
