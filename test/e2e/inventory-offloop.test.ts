/**
 * No inventory freezes the server: costly but legal OCS inventories (each a few kB gzip'd,
 * hundreds of thousands of elements once expanded) are read on the inventory worker thread
 * while another client's GET /uuid keeps being answered within a bound, and a newcomer's
 * ordinary inventory sent after them is still stored. Before, three such inventories held the
 * event loop for seconds each (GET /uuid waited 6.4 s).
 */
import { readdir, readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { adminClient, BIN, startProgram, waitFor, programDir } from '../helpers/programs.js';
import { ocsName, ocsXml, rudderNode, signOcs } from '../helpers/ocs.js';

// Loose for a loaded CI host (an idle server here showed 0.5 s hiccups); before, 6.4 s.
const BOUND_MS = 1500;

t.test('costly inventories are read off the event loop; GET /uuid stays quick', async (t) => {
  const dir = programDir(t, { 'server.toml': '[processing]\ninventory_time_limit = "300ms"\ninventory_workers = 1\n[lifecycle]\nsweep_interval = "1h"\n' });
  const server = await startProgram(BIN.server, ['serve', '--config', join(dir, 'server.toml'), '--listen', '127.0.0.1:0',
    '--data-dir', join(dir, 'server'), '--log-level', 'error']);
  t.teardown(() => server.stop());
  const api = adminClient(server.url, (await readFile(join(dir, 'server', 'admin.token'), 'utf8')).trim());

  const put = async (name: string, body: Buffer) => {
    const res = await fetch(`${server.url}/inventories/${encodeURIComponent(name)}`, { method: 'PUT', body });
    t.equal(res.status, 201, name);
  };
  const costly = ['a', 'b', 'c'].map((c) => rudderNode(`0ff1009${c}-0000-4000-8000-00000000000${c}`));
  const plain = rudderNode('0ff10090-0000-4000-8000-000000000000');
  const xmls: Array<[typeof plain, Buffer]> = costly.map((node) => {
    const xml = ocsXml(node).toString();
    const at = xml.indexOf('<VERSIONCLIENT>');
    return [node, Buffer.from(`${xml.slice(0, at)}${'<X><Y/></X>'.repeat(450_000)}${xml.slice(at)}`)];
  });
  xmls.push([plain, ocsXml(plain)]);
  // Made before the clock runs: signing blocks this process (openssl is run synchronously).
  const past = new Date(Date.now() - 60_000);
  const uploads = xmls.map(([node, xml]) => ({ name: ocsName(node.id, past), gz: gzipSync(xml), sign: signOcs(xml, node) }));

  let slowest = 0;
  let stop = false;
  const poll = (async () => {
    while (!stop) {
      const s = performance.now();
      t.equal((await fetch(`${server.url}/uuid`)).status, 200);
      slowest = Math.max(slowest, performance.now() - s);
      await new Promise((r) => setTimeout(r, 20));
    }
  })();
  for (const u of uploads) {
    await put(`${u.name}.gz`, u.gz);
    await put(`${u.name}.sign`, u.sign);
  }
  const incoming = join(dir, 'server', 'spool', 'incoming', 'inventories');
  await waitFor(async () => ((await readdir(incoming)).length === 0 ? true : undefined), 'every inventory to be taken', 120_000);
  const pending = await waitFor(async () => {
    const r = await api('GET', '/api/1/nodes/pending');
    return r.json.data.some((n: { id: string }) => n.id === plain.id) ? r.json.data as Array<{ id: string }> : undefined;
  }, 'the ordinary newcomer to be pending');
  stop = true;
  await poll;
  const failed = join(dir, 'server', 'spool', 'failed', 'inventories');
  const reasons = await readdir(failed).catch(() => [] as string[]);
  const refused = (await Promise.all(reasons.map((f) => readFile(join(failed, f), 'utf8').catch(() => '')))).filter((r) => r.includes('ERR_INVENTORY_TOO_COSTLY')).length;
  t.ok(slowest < BOUND_MS, `GET /uuid waited at most ${Math.round(slowest)} ms (bound ${BOUND_MS} ms)`);
  t.ok(pending.length + refused >= 1, `costly ones: ${pending.length - 1} stored, ${refused} reason files naming ERR_INVENTORY_TOO_COSTLY`);
});
