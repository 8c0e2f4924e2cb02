/**
 * RUDDER's own signed run logs (node e745…, certificate pinned by a manual node) fed through a
 * relay and the server: the 2018 log stores 72 reports; sending it twice stores it once; the
 * gzip envelope and the 2017 log go through too.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { adminClient, BIN, CONFORMANCE, fixturesAbsent, startProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';

const absent = fixturesAbsent();
if (absent) {
  t.comment(`skipping: ${absent}`);
  t.pass('skipped: fixtures absent', { skip: absent });
} else {
  t.test('RUDDER signed run logs are verified, parsed and stored once', async (t) => {
    const dir = programDir(t);
    const { server, relay, api } = await serverAndRelay(t, dir);

    const cert = await readFile(join(CONFORMANCE, 'files/keys', `${NODE}.cert`), 'utf8');
    const created = await api('POST', '/api/1/nodes', { id: NODE, hostname: 'node1.rudder.local', certificate: cert });
    t.equal(created.status, 201, JSON.stringify(created.json));
    t.equal(created.json.data.accepted, 'accepted', 'a manual node with a certificate is accepted');

    const signed2018 = await readFile(join(CONFORMANCE, 'files/runlogs', `2018-08-24T15_55_01+00_00@${NODE}.signed`));
    const put = (name: string, body: Buffer) =>
      fetch(`${relay.url}/reports/${encodeURIComponent(name)}`, { method: 'PUT', body });
    // RUDDER's Windows-style name ('_' for ':'), uncompressed.
    t.equal((await put(`2018-08-24T15_55_01+00_00@${NODE}.log`, signed2018)).status, 201);
    const runs = await waitFor(async () => {
      const r = await api('GET', `/api/1/nodes/${NODE}/runs?reports=true`);
      return r.json.total === 1 ? r.json.data : undefined;
    }, 'the 2018 run');
    t.equal(runs[0].report_count, 72);
    t.equal(runs[0].reports.length, 72);
    t.equal(runs[0].config_id, '20180824-130007-3ad37587');
    t.same(runs[0].counts, {
      control: 2, result_success: 35, log_info: 19, result_na: 6, log_warn: 4, log_repaired: 3, audit_noncompliant: 2, result_repaired: 1,
    });
    const reference = JSON.parse(await readFile(join(CONFORMANCE, 'files/runlogs', `2018-08-24T15_55_01+00_00@${NODE}.json`), 'utf8'));
    t.same(runs[0].reports, reference.reports, 'stored reports read back exactly as RUDDER parses them');

    // The same run again, gzip'd under the ':' form of the name: a duplicate, stored once.
    t.equal((await put(`2018-08-24T15:55:01+00:00@${NODE}.log.gz`, gzipSync(signed2018))).status, 201);
    const signed2017 = await readFile(join(CONFORMANCE, 'files/runlogs', `2017-08-24T15_55_01+00_00@${NODE}.signed`));
    t.equal((await put(`2017-08-24T15:55:01+00:00@${NODE}.log`, signed2017)).status, 201);
    await waitFor(async () => {
      const s = await api('GET', '/api/1/system/status');
      const p = s.json.data.processed;
      return (p.reports_done ?? 0) >= 3 ? true : undefined;
    }, 'all three files processed');
    const all = await api('GET', `/api/1/nodes/${NODE}/runs`);
    t.equal(all.json.total, 2, 'the duplicate 2018 run was stored once, the 2017 run once');
    t.same(all.json.data.map((r: { started_at: string }) => r.started_at), ['2018-08-24T15:55:01+00:00', '2017-08-24T15:55:01+00:00']);

    // The altered fixture is refused.
    const diff = await readFile(join(CONFORMANCE, 'files/smime/normal-diff.signed'));
    t.equal((await put(`2019-05-25T10:00:00+00:00@${NODE}.log`, diff)).status, 201);
    await waitFor(async () => {
      const s = await api('GET', '/api/1/system/status');
      return (s.json.data.processed.reports_failed ?? 0) >= 1 ? true : undefined;
    }, 'the altered file to be refused');
  });
}
