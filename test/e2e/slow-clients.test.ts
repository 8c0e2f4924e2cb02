/**
 * What one slow or greedy client may cost relayd and the server ([http]): headers must come
 * within headers_timeout, an upload's body may not pause longer than body_timeout nor average
 * less than min_upload_rate after upload_rate_grace, and one address may have at most
 * max_uploads_per_client uploads in progress. Before, a body trickled at a byte every few seconds
 * held its connection and temporary file for as long as the client liked (no body timeout at
 * all on the relay, none on uploads at the server), and one address could open any number of them.
 */
import { readdir, writeFile } from 'node:fs/promises';
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

t.test('one address has at most max_uploads_per_client uploads in progress (429, Retry-After)', async (t) => {
  const programs = await start(t, 'max_uploads_per_client = 2\nbody_timeout = "20s"\nmin_upload_rate = 0\n');
  for (const p of programs) {
    const url = new URL(p.run.url);
    // Two uploads held open half-way, on their own connections.
    const { connect } = await import('node:net');
    const held = [10, 11].map((i) => {
      const s = connect({ host: url.hostname, port: Number(url.port) });
      s.on('error', () => {});
      s.write(head(`/reports/${name(i)}`, 100) + 'x'.repeat(10));
      return s;
    });
    t.teardown(() => held.forEach((s) => s.destroy()));
    // The third is refused at once, until one of the two ends.
    const third = await waitFor(async () => {
      const a = await rawHttp(p.run.url, [head(`/reports/${name(12)}`, 5), 'hello']);
      return a.status === 429 ? a : undefined;
    }, `${p.name}: the third upload refused`, 8000);
    t.equal(codeOf(third), 'ERR_TOO_MANY_UPLOADS', `${p.name}: coded`);
    t.ok(Number(third.headers['retry-after']) > 0, 'with Retry-After');
    // Other requests are not uploads: not counted.
    t.equal((await rawHttp(p.run.url, ['GET /uuid HTTP/1.1\r\nHost: capstan\r\nConnection: close\r\n\r\n'])).status, 200);
    held[0]!.destroy();
    const after = await waitFor(async () => {
      const a = await rawHttp(p.run.url, [head(`/reports/${name(13)}`, 5), 'hello']);
      return a.status === 201 ? a : undefined;
    }, `${p.name}: a slot freed when an upload ends`, 8000);
    t.equal(after.status, 201);
    held[1]!.destroy();
  }
});
