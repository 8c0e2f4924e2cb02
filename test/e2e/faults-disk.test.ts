/**
 * Faults of the disk, with real programs each in a private mount namespace (`unshare -m`) on a
 * small file system made for the test, gone with the program: a full tmpfs under the relay's
 * spool and then under the server's data directory (real ENOSPC: no reserve), and a power loss
 * under the relay's spool, played on a loop-mounted ext4 image copied while the relay is frozen
 * (what reached the device survives; what sat in the page cache does not). After each, every run
 * log acknowledged is stored or delivered exactly once. Skipped with the reason when the machine
 * cannot mount (not root, no unshare, no loop devices). See docs/faults.md.
 */
import { execFileSync } from 'node:child_process';
import { closeSync, fsyncSync, openSync, writeSync } from 'node:fs';
import { mkdir, readdir, readFile, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BATCH_CONTENT_TYPE, encodeBatch, runLogFileName } from '@capstan/shared';
import { adminClient, BIN, programDir, requiredInCi, startProgram, waitFor, type Running } from '../helpers/programs.js';
import { CountingUpstream, freePort, sha256 } from '../relayd/helpers/upstream.js';
import {
  BlackHoleProxy, cannotMount, poll, powerLoss, q, compareStored, inNs, makeFleet, putAll, registerFleet, relayDrained, relayStatus, startInMountNs, storedRuns, storedTotal,
} from '../helpers/faults.js';

const why = requiredInCi(cannotMount());

const fleet = makeFleet('4', 4, 40);

/** Write `dir/filler` until the file system has no byte left (ENOSPC at every size). */
function fill(path: string): number {
  const fd = openSync(path, 'w');
  let bytes = 0;
  try {
    for (let size = 1 << 16; size >= 1; size >>= 2) {
      const chunk = Buffer.alloc(size, 0x5a);
      for (;;) {
        try {
          bytes += writeSync(fd, chunk);
        } catch (err) {
          if ((err as NodeJS.ErrnoException).code === 'ENOSPC') break;
          throw err;
        }
      }
    }
  } finally {
    closeSync(fd);
  }
  return bytes;
}


t.test('a full disk under the relay, then under the server: coded refusals, nothing acknowledged lost', { skip: why }, async (t) => {
  const dir = programDir(t);
  const relayMnt = join(dir, 'relay-fs');
  const serverMnt = join(dir, 'server-fs');
  await mkdir(relayMnt);
  await mkdir(serverMnt);
  // No reserve: the refusals come from the file system itself (ENOSPC), as on a disk that filled up.
  await writeFile(join(dir, 'server.toml'), '[spool]\nmin_free_space = "0"\n[lifecycle]\nsweep_interval = "1h"\n');
  await writeFile(join(dir, 'relayd.toml'), ['[spool]', 'min_free_space = "0"', '[upstream]', 'batch_files = 16', 'concurrency = 2', 'probe_interval = "100ms"', 'timeout = "5s"',
    '[processing]', 'retry_min = "100ms"', 'retry_max = "1s"', 'catchup_interval = "500ms"', ''].join('\n'));
  const server = await startInMountNs(`mount -t tmpfs -o size=24m tmpfs ${q(serverMnt)}`, BIN.server,
    ['serve', '--config', join(dir, 'server.toml'), '--listen', '127.0.0.1:0', '--data-dir', join(serverMnt, 'data'), '--log-level', 'warn'], 90_000);
  t.teardown(() => server.stop());
  const api = adminClient(server.url, (await readFile(inNs(server, join(serverMnt, 'data', 'admin.token')), 'utf8')).trim());
  await registerFleet(api, fleet);
  const relay = await startInMountNs(`mount -t tmpfs -o size=2m tmpfs ${q(relayMnt)}`, BIN.relayd,
    ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(relayMnt, 'spool'), '--upstream', server.url, '--log-level', 'warn']);
  t.teardown(() => relay.stop());
  const half = fleet.files.length / 2;
  const acked: string[] = [];

  // 1. The relay's file system is full: uploads are refused with a code, and taken again once it has room.
  const relayFiller = inNs(relay, join(relayMnt, 'filler'));
  t.ok(fill(relayFiller) > 1 << 20, 'the relay\'s file system filled');
  const refusedAtRelay = await putAll(relay.url, fleet.files.slice(0, half));
  acked.push(...refusedAtRelay.acked);
  t.ok(refusedAtRelay.refused.length > 0, `${refusedAtRelay.refused.length} uploads refused on a full spool, ${refusedAtRelay.acked.length} taken`);
  t.same([...new Set(refusedAtRelay.refused.map((r) => `${r.status} ${r.code}`))], ['507 ERR_SPOOL_FULL'], 'each refusal a 507 ERR_SPOOL_FULL');
  t.equal(refusedAtRelay.errors, 0, 'no connection dropped');
  t.same(await readdir(inNs(relay, join(relayMnt, 'spool', 'tmp'))), [], 'nothing partial left in tmp/');
  t.match((await relayStatus(relay.url)).spool, { status: 'error' }, 'system/status shows the full spool');
  await rm(relayFiller);
  const retried = await putAll(relay.url, fleet.files.filter((f) => refusedAtRelay.refused.some((r) => r.name === f.name)));
  t.same(retried.refused, [], 'with room again, the refused uploads are taken');
  acked.push(...retried.acked);
  await waitFor(() => relayDrained(relay.url), 'the relay to drain', 30_000);

  // 2. The server's file system is full: the relay keeps what it took and sends it again later.
  const before = await storedTotal(api, fleet);
  const serverFiller = inNs(server, join(serverMnt, 'filler'));
  t.ok(fill(serverFiller) > 1 << 20, 'the server\'s file system filled');
  const second = await putAll(relay.url, fleet.files.slice(half));
  t.same(second.refused, [], 'the relay takes the second half');
  acked.push(...second.acked);
  const refusedMetric = async () => {
    const text = await (await fetch(`${server.url}/metrics`)).text();
    let n = 0;
    for (const m of text.matchAll(/^capstan_server_refused_uploads_total\{kind="reports",code="(ERR_SPOOL_FULL|ERR_STORE|ERR_BUSY)"\} (\d+)$/gm)) n += Number(m[2]);
    return n;
  };
  const refusals = await waitFor(async () => {
    const n = await refusedMetric();
    return n > 0 ? n : undefined;
  }, 'the server to refuse run logs on a full disk', 30_000).catch(() => 0);
  t.ok(refusals > 0, `the server refused ${refusals} run logs with a code while full`);
  // A batch sent to the full server: answered file by file with the code, not failed whole.
  // Under a name of its own: the relay may be sending the fleet's files again at this moment, and
  // one of the same name would meet that upload instead (409, being received already).
  const last = fleet.files[fleet.files.length - 1]!;
  const name = runLogFileName(last.node, new Date(), 'zstd');
  const direct = await fetch(`${server.url}/batch/reports`, { method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE }, body: encodeBatch([{ name, body: last.body }]) });
  const answer = await direct.json() as any;
  t.same([direct.status, answer.data?.files?.map((f: any) => [f.status, f.error?.code])], [200, [[507, 'ERR_SPOOL_FULL']]], 'a batch to the full server: its file refused 507 ERR_SPOOL_FULL');
  t.equal((await api('GET', '/api/1/nodes?per_page=1')).status, 200, 'the server still answers its API');
  t.ok((await relayStatus(relay.url)).spool.incoming.reports > 0, 'the relay keeps them');
  t.same(await readdir(inNs(relay, join(relayMnt, 'spool', 'failed', 'reports'))), [], 'nothing given up at the relay');
  t.ok((await storedTotal(api, fleet)) < before + second.acked.length, 'not all stored while full');
  await rm(serverFiller);
  await waitFor(() => relayDrained(relay.url), 'the relay to drain once the server has room', 40_000);
  await poll(async () => ((await storedTotal(api, fleet)) >= acked.length ? true : undefined), 'every run stored', 20_000);

  const stored = await storedRuns(api, fleet);
  const { missing, twice, unknown } = compareStored(stored, acked, fleet);
  t.equal(acked.length, fleet.files.length, 'every run log was acknowledged in the end');
  t.same(missing, [], `all ${acked.length} acknowledged run logs stored`);
  t.same(twice, [], 'none twice');
  t.same(unknown, [], 'nothing unknown');
  t.same(await readdir(inNs(server, join(serverMnt, 'data', 'spool', 'failed', 'reports'))), [], 'nothing failed at the server');
  for (const [name, p] of [['server', server], ['relay', relay]] as const) {
    t.notMatch(p.stderr.join(''), /\n\s+at /, `no stack trace in the ${name}'s log`);
  }
  t.equal(await relay.stop(), 0, 'the relay stops cleanly');
  t.equal(await server.stop(), 0, 'the server stops cleanly');
});

t.test('power loss under the relay: every acknowledged upload survives and is delivered once', { skip: why }, async (t) => {
  const dir = programDir(t);
  const mnt = join(dir, 'mnt');
  await mkdir(mnt);
  const image = join(dir, 'spool.img');
  const after = join(dir, 'after.img');
  execFileSync('truncate', ['-s', '64M', image]);
  execFileSync('mkfs.ext4', ['-q', '-F', image]);
  // commit=600: the journal is committed by fsyncs only, not every 5 s, so what is not fsync'd
  // stays in the page cache (dirty pages are written back after 30 s; this test takes less).
  const mount = (img: string) => `mount -o loop,commit=600 ${q(img)} ${q(mnt)}`;
  await writeFile(join(dir, 'relayd.toml'), '[spool]\nmin_free_space = "0"\n[http]\nmax_uploads_per_client = 0\n[upstream]\nprobe_interval = "100ms"\n[processing]\nretry_min = "100ms"\nretry_max = "1s"\n');
  const port = await freePort();
  const args = ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(mnt, 'spool'), '--upstream', `http://127.0.0.1:${port}`, '--log-level', 'error'];
  const first = await startInMountNs(mount(image), BIN.relayd, args);
  t.teardown(() => first.signal('SIGKILL'));

  // Uploads 16 at a time with the upstream down; the power goes when half are acknowledged.
  const files = fleet.files;
  const acked: string[] = [];
  let next = 0;
  let cut = false;
  const uploads = Promise.all(Array.from({ length: 16 }, async () => {
    while (next < files.length && !cut) {
      const f = files[next++]!;
      const res = await fetch(`${first.url}/reports/${encodeURIComponent(f.name)}`, { method: 'PUT', body: f.body }).catch(() => undefined);
      await res?.text().catch(() => undefined);
      if (res && res.status === 201) acked.push(f.name);
    }
  }));
  await waitFor(async () => (acked.length >= files.length / 2 ? true : undefined), 'half the uploads acknowledged', 30_000);
  // The fault model, checked: a file written without fsync just before the power goes is lost; one fsync'd is kept.
  const control = Buffer.from('written, never fsync\'d\n');
  await writeFile(inNs(first, join(mnt, 'unsynced')), control);
  const fd = openSync(inNs(first, join(mnt, 'synced')), 'w');
  writeSync(fd, control);
  fsyncSync(fd);
  closeSync(fd);
  await powerLoss(first, image, after);
  cut = true;
  await uploads;
  const ackedAtLoss = acked.length;
  t.ok(ackedAtLoss < files.length, `power lost with ${ackedAtLoss} of ${files.length} uploads acknowledged`);

  // The disk as it came back, under a new relay; then the upstream returns.
  const up = new CountingUpstream();
  t.teardown(() => up.stop());
  const second = await startInMountNs(mount(after), BIN.relayd, args);
  t.teardown(() => second.stop());
  const unsynced = await readFile(inNs(second, join(mnt, 'unsynced'))).catch(() => Buffer.alloc(0));
  t.notSame(unsynced, control, `the file written without fsync was lost (${unsynced.length} bytes after the power loss): the loss is real`);
  t.same(await readFile(inNs(second, join(mnt, 'synced'))), control, 'the fsync\'d one was kept');
  await up.start(port);
  await waitFor(() => relayDrained(second.url), 'the restored spool to drain', 30_000);

  const bySha = new Map(files.map((f) => [sha256(f.body), f.name]));
  const arrived = new Map<string, number>();
  for (const [sha, n] of up.counts) arrived.set(bySha.get(sha) ?? `unknown ${sha}`, n);
  const { missing, twice, unknown } = compareStored(arrived, acked, fleet);
  t.same(missing, [], `all ${acked.length} acknowledged uploads delivered after the power loss`);
  t.same(twice, [], 'none twice');
  t.same(unknown, [], 'nothing partial or unknown delivered');
  t.same(await readdir(inNs(second, join(mnt, 'spool', 'failed', 'reports'))), [], 'nothing failed');
  t.comment(`${arrived.size - acked.length} uploads not acknowledged before the power loss were delivered whole as well`);
  t.equal(await second.stop(), 0, 'the restored relay stops cleanly');
});

t.test('power loss under the server (SQLite) mid-backlog: every run log the relay gave up is stored once', { skip: why }, async (t) => {
  const dir = programDir(t);
  const mnt = join(dir, 'mnt');
  await mkdir(mnt);
  const image = join(dir, 'data.img');
  const after = join(dir, 'after.img');
  execFileSync('truncate', ['-s', '96M', image]);
  execFileSync('mkfs.ext4', ['-q', '-F', image]);
  const mount = (img: string) => `mount -o loop,commit=600 ${q(img)} ${q(mnt)}`;
  await writeFile(join(dir, 'server.toml'), '[spool]\nmin_free_space = "0"\n[lifecycle]\nsweep_interval = "1h"\n');
  await writeFile(join(dir, 'relayd.toml'), ['[upstream]', 'batch_files = 16', 'concurrency = 2', 'probe_interval = "100ms"', 'timeout = "5s"',
    '[processing]', 'retry_min = "100ms"', 'retry_max = "1s"', 'catchup_interval = "500ms"', ''].join('\n'));
  const port = await freePort();
  const serverArgs = ['serve', '--config', join(dir, 'server.toml'), '--listen', `127.0.0.1:${port}`, '--data-dir', join(mnt, 'data'), '--log-level', 'warn'];
  const first = await startInMountNs(mount(image), BIN.server, serverArgs, 90_000);
  t.teardown(() => first.signal('SIGKILL'));
  const api = adminClient(first.url, (await readFile(inNs(first, join(mnt, 'data', 'admin.token')), 'utf8')).trim());
  await registerFleet(api, fleet);
  // The server as after a while in service: what it wrote so far is on the disk.
  execFileSync('sync', ['-f', inNs(first, join(mnt, 'data'))]);

  // A backlog at the relay (its upstream refusing connections), then sent up in batches; the power goes among them.
  const gate = new BlackHoleProxy(port);
  await gate.start();
  t.teardown(() => gate.stop());
  gate.refuse();
  const relay = await startProgram(BIN.relayd, ['--config', join(dir, 'relayd.toml'), '--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'relay'),
    '--upstream', `http://127.0.0.1:${gate.port}`, '--log-level', 'error']);
  t.teardown(() => relay.stop());
  const sent = await putAll(relay.url, fleet.files);
  t.equal(sent.acked.length, fleet.files.length, `the relay took all ${fleet.files.length} run logs`);
  gate.heal();
  const atLoss = await poll(async () => {
    const n = await storedTotal(api, fleet);
    return n >= 20 ? n : undefined;
  }, 'the first batches stored', 30_000);
  const control = Buffer.from('written, never fsync\'d\n');
  await writeFile(inNs(first, join(mnt, 'unsynced')), control);
  await powerLoss(first, image, after);
  t.ok(atLoss < fleet.files.length, `power lost with ${atLoss} of ${fleet.files.length} stored`);

  const second = await startInMountNs(mount(after), BIN.server, serverArgs, 90_000);
  t.teardown(() => second.stop());
  const unsynced = await readFile(inNs(second, join(mnt, 'unsynced'))).catch(() => Buffer.alloc(0));
  t.notSame(unsynced, control, `a file written without fsync was lost (${unsynced.length} bytes after the power loss): the loss is real`);
  await waitFor(() => relayDrained(relay.url), 'the relay to drain', 40_000);
  await poll(async () => ((await storedTotal(api, fleet)) >= fleet.files.length ? true : undefined), 'every run stored', 20_000).catch(() => undefined);
  const stored = await storedRuns(api, fleet);
  const { missing, twice, unknown } = compareStored(stored, sent.acked, fleet);
  t.same(missing, [], `all ${sent.acked.length} run logs stored after the power loss`);
  t.same(twice, [], 'none twice');
  t.same(unknown, [], 'nothing unknown');
  t.same(await readdir(join(dir, 'relay', 'failed', 'reports')), [], 'nothing failed at the relay');
  t.same(await readdir(inNs(second, join(mnt, 'data', 'spool', 'failed', 'reports'))), [], 'nothing failed at the server');
  t.notMatch(second.stderr.join(''), /\n\s+at /, 'no stack trace in the restarted server\'s log');
  t.equal(await second.stop(), 0, 'the restarted server stops cleanly');
});
