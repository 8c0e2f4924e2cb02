/**
 * A three-level tree with the real programs: edge relay → middle relay → capstan-server. 1,000
 * signed run logs of an accepted node enter at the edge; every one is stored at the root as a run
 * whose recorded sha256 is that of the bytes the agent sent (relays forward bytes unchanged).
 */
import { createHash } from 'node:crypto';
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { Pool } from 'undici';
import { createNodeIdentity, runLogFileName, signSmime } from '@capstan/shared';
import { adminClient, BIN, startProgram, waitFor, programDir, startServer } from '../helpers/programs.js';

const NODE = '5a1e5c2e-0000-4000-8000-000000000001';
const FILES = 1000;

function runLog(i: number, at: Date): Buffer {
  const ts = at.toISOString().replace(/\.\d{3}Z$/, '+00:00');
  const start = ts.replace('T', ' ');
  const line = (type: string, component: string, key: string, msg: string) =>
    `${ts} R: @@Common@@${type}@@rule-${type === 'control' ? 'rudder' : '1'}@@run@@0@@${component}@@${key}@@${start}##${NODE}@#${msg}`;
  return Buffer.from(
    `${[
      line('control', 'start', 'cfg-1', 'Start execution'),
      line('result_success', 'Check', 'None', `check ${i} passed`),
      line('control', 'end', 'cfg-1', 'End execution'),
    ].join('\n')}\n`,
  );
}

t.test(`relay → relay → server delivers ${FILES} files with identical sha256 at the root`, async (t) => {
  const dir = programDir(t);
  const { server } = await startServer(t, join(dir, 'server'));
  const middle = await startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'middle'), '--upstream', server.url, '--node-id', 'middle', '--log-level', 'warn']);
  t.teardown(() => middle.stop());
  const edge = await startProgram(BIN.relayd, ['--listen', '127.0.0.1:0', '--spool-dir', join(dir, 'edge'), '--upstream', middle.url, '--node-id', 'edge', '--log-level', 'warn']);
  t.teardown(() => edge.stop());

  const api = adminClient(server.url, (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim());
  const id = createNodeIdentity(NODE);
  const created = await api('POST', '/api/1/nodes', { id: NODE, hostname: 'tree-node', certificate: id.certPem });
  t.equal(created.status, 201, 'the node is registered with its certificate (accepted)');

  // Distinct start seconds: the server identifies a run by (node, start time).
  const base = Date.UTC(2026, 0, 1);
  const sent = new Map<string, string>();
  const files = Array.from({ length: FILES }, (_, i) => {
    const at = new Date(base + i * 1000);
    const body = signSmime(runLog(i, at), id);
    const name = runLogFileName(NODE, at, 'none');
    sent.set(createHash('sha256').update(body).digest('hex'), name);
    return { name, body };
  });

  const pool = new Pool(edge.url, { connections: 16 });
  t.teardown(() => pool.close());
  let next = 0;
  const statuses = new Map<number, number>();
  await Promise.all(
    Array.from({ length: 16 }, async () => {
      while (next < files.length) {
        const f = files[next++]!;
        const res = await pool.request({ method: 'PUT', path: `/reports/${encodeURIComponent(f.name)}`, body: f.body, headers: { 'content-length': String(f.body.length) } });
        await res.body.dump();
        statuses.set(res.statusCode, (statuses.get(res.statusCode) ?? 0) + 1);
      }
    }),
  );
  t.same([...statuses], [[201, FILES]], 'the edge accepted every file');

  await waitFor(async () => {
    const r = await api('GET', `/api/1/nodes/${NODE}/runs?per_page=1`);
    return r.json.total === FILES ? true : undefined;
  }, `${FILES} runs stored at the root`, 55_000);

  const stored = new Map<string, string>();
  for (let page = 1; page <= FILES / 200; page++) {
    const r = await api('GET', `/api/1/nodes/${NODE}/runs?per_page=200&page=${page}`);
    for (const run of r.json.data as Array<{ sha256: string; file_name: string }>) stored.set(run.sha256, run.file_name);
  }
  t.equal(stored.size, FILES, 'one run per file');
  t.same(stored, sent, 'the root holds each file with the sha256 the agent sent, under its name');

  const status = async (url: string) => ((await (await fetch(`${url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  const [e, m] = [await status(edge.url), await status(middle.url)];
  t.same(e.spool.incoming, { reports: 0, inventories: 0 }, 'the edge spool is empty');
  t.same(m.spool.incoming, { reports: 0, inventories: 0 }, 'the middle spool is empty');
});
