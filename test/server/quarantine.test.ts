/**
 * Quarantine of files that kill the ingest: the attempt ledger counts handlings that started and
 * never ended across real process kills (SIGKILL, as the kernel's out-of-memory killer or the
 * watchdog stop the server); past `max` the spool processor moves the file to
 * quarantine/<kind>/ with a reason instead of handling it again, and a relay's batch entry is
 * answered `refused` (ERR_INGEST_QUARANTINED, 2xx: the relay stops sending it).
 */
import { spawn } from 'node:child_process';
import { mkdir, readFile, writeFile } from 'node:fs/promises';
import { join, resolve } from 'node:path';
import { pathToFileURL } from 'node:url';
import t from 'tap';
import { silentLogger } from '@capstan/shared';
import { Spool, SpoolProcessor, type ProcessedEvent } from '@capstan/toolkit';
import { AttemptLedger } from '@capstan/toolkit/spool/quarantine';
import { batchTaker } from '@capstan/server/ingest/batch';
import { loadServerConfig } from '@capstan/server/config';
import { programDir } from '../helpers/programs.js';

const LEDGER_JS = pathToFileURL(resolve(import.meta.dirname, '../../toolkit/dist/spool/quarantine.js')).href;

/** A process that opens the ledger, starts handling `name` and is killed (SIGKILL) meanwhile. */
function dieWhileHandling(ledgerPath: string, name: string): Promise<NodeJS.Signals | null> {
  const script = `const { AttemptLedger } = await import(${JSON.stringify(LEDGER_JS)});
    const l = new AttemptLedger(${JSON.stringify(ledgerPath)}, 3, '/nonexistent');
    l.open(); l.started(${JSON.stringify(name)}); process.kill(process.pid, 'SIGKILL');`;
  const child = spawn(process.execPath, ['--input-type=module', '-e', script], { stdio: 'ignore' });
  return new Promise((r) => child.on('exit', (_code, signal) => r(signal)));
}

t.test('the ledger counts handlings a real kill interrupted, and forgets a file handled to the end', async (t) => {
  const dir = programDir(t);
  const path = join(dir, 'attempts', 'reports.log');
  for (let i = 1; i <= 2; i++) {
    t.equal(await dieWhileHandling(path, 'a.log'), 'SIGKILL', `killed while handling (${i})`);
    const l = new AttemptLedger(path, 3, join(dir, 'q'));
    l.open();
    t.equal(l.crashesOf('a.log'), i, `${i} kill(s) remembered across restarts`);
    t.equal(l.exhausted('a.log'), false);
    l.close();
  }
  await dieWhileHandling(path, 'a.log');
  const l = new AttemptLedger(path, 3, join(dir, 'q'));
  l.open();
  t.equal(l.exhausted('a.log'), true, 'the third kill: quarantine it');
  t.match(await readFile(path, 'utf8'), /^C 3 a\.log\n$/, 'the ledger was compacted to what is still open');
  l.started('b.log');
  l.ended('b.log');
  l.close();
  const again = new AttemptLedger(path, 3, join(dir, 'q'));
  again.open();
  t.equal(again.crashesOf('b.log'), 0, 'a file handled to the end counts nothing');
  again.close();
  const never = new AttemptLedger(path, 0, join(dir, 'q'));
  never.open();
  t.equal(never.exhausted('a.log'), false, 'max 0: never quarantined');
  never.close();
});

t.test('the processor quarantines an exhausted file instead of handling it; others go on', async (t) => {
  const root = programDir(t);
  const spool = new Spool({ root, maxFileBytes: 1024 });
  await spool.init();
  const ledgerPath = join(root, 'attempts', 'reports.log');
  await mkdir(join(root, 'attempts'), { recursive: true });
  await writeFile(ledgerPath, 'C 3 poison.log\n');
  const ledger = new AttemptLedger(ledgerPath, 3, join(root, 'quarantine', 'reports'));
  ledger.open();
  t.teardown(() => ledger.close());
  await spool.acceptBuffer('reports', 'poison.log', Buffer.from('boom'));
  await spool.acceptBuffer('reports', 'fine.log', Buffer.from('ok'));
  const handled: string[] = [];
  const p = new SpoolProcessor({ kind: 'reports', spool, log: silentLogger, ledger, handle: async (_path, name) => void handled.push(name) });
  const events: ProcessedEvent[] = [];
  const both = new Promise<void>((r) => p.on('processed', (e: ProcessedEvent) => (events.push(e), events.length === 2 && r())));
  await p.start();
  t.teardown(() => p.stop());
  await both;
  t.same(handled, ['fine.log'], 'the poisoned file was never handled');
  t.match(events.find((e) => e.name === 'poison.log'), { outcome: 'failed' });
  t.same(await spool.list('reports'), [], 'incoming/ is empty');
  t.equal(await readFile(join(root, 'quarantine', 'reports', 'poison.log'), 'utf8'), 'boom', 'the bytes are kept in quarantine/');
  t.match(await readFile(join(root, 'quarantine', 'reports', 'poison.log.reason'), 'utf8'), /ERR_INGEST_QUARANTINED: handling it stopped the program 3 times/);
});

t.test('a relay\'s batch entry that killed the server is answered refused, not ingested again', async (t) => {
  const root = programDir(t);
  const spool = new Spool({ root, maxFileBytes: 1024 });
  await spool.init();
  const ledger = new AttemptLedger(join(root, 'attempts', 'reports.log'), 2, join(root, 'quarantine', 'reports'));
  ledger.open();
  ledger.started('n1@2026-01-01T00:00:00+00:00.log.zst'); // the run that died
  ledger.close();
  ledger.open();
  ledger.started('n1@2026-01-01T00:00:00+00:00.log.zst');
  ledger.close();
  ledger.open();
  t.teardown(() => ledger.close());
  const ingested: string[] = [];
  const runLogs = { pending: 0, ingest: async (_p: string, name: string) => (ingested.push(name), { runId: 1, inserted: true }) };
  const take = batchTaker({ spool, runLogs: runLogs as never, maxInMemory: 100, written: () => undefined, spooled: () => undefined, processed: () => undefined, log: silentLogger, ledger });
  const answer = await take('reports', [
    { name: 'n1@2026-01-01T00:00:00+00:00.log.zst', nodeId: 'n1', data: Buffer.from('poison') },
    { name: 'n2@2026-01-01T00:00:00+00:00.log.zst', nodeId: 'n2', data: Buffer.from('fine') },
  ]);
  t.match(answer[0], { status: 201, refused: { code: 'ERR_INGEST_QUARANTINED' } }, '2xx refused: the relay is done with it');
  t.same(answer[1], { file: 'n2@2026-01-01T00:00:00+00:00.log.zst', status: 201 });
  t.same(ingested, ['n2@2026-01-01T00:00:00+00:00.log.zst'], 'only the other entry was ingested');
  t.equal(await readFile(join(root, 'quarantine', 'reports', 'n1@2026-01-01T00:00:00+00:00.log.zst'), 'utf8'), 'poison');
});

t.test('[processing] quarantine_after: 3 by default, configurable, 0 turns it off', async (t) => {
  t.equal(loadServerConfig({}).processing.quarantine_after, 3);
  t.equal(loadServerConfig({ overrides: { 'processing.quarantine_after': 0 } }).processing.quarantine_after, 0);
  t.throws(() => loadServerConfig({ overrides: { 'processing.quarantine_after': -1 } }), { code: 'ERR_CONFIG' });
});
