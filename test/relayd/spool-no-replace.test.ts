/**
 * An upload never replaces a file the relay acknowledged and still holds. While the upstream was
 * down an anonymous PUT (or batch entry) under the same name was renamed over the genuine run log,
 * which was lost. Now different bytes get 409 ERR_SPOOL_CONFLICT and the first file goes up as
 * it was; the same bytes again are a re-send (2xx, sent once).
 */
import { readdir } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { BATCH_CONTENT_TYPE, encodeBatch } from '@capstan/shared';
import { CountingUpstream, freePort, runName, sha256, until } from './helpers/upstream.js';
import { put, startTestRelay } from './helpers/relay.js';

const NODE = 'e745a140-40bc-4b86-b6dc-084488fc906b';

const hostile: Array<[string, (url: string, name: string) => Promise<number>]> = [
  ['a PUT', async (url, name) => (await put(url, 'reports', name, 'junk from anyone')).status],
  ['a batch entry', async (url, name) => {
    const res = await fetch(`${url}/batch/reports`, { method: 'POST', headers: { 'content-type': BATCH_CONTENT_TYPE }, body: encodeBatch([{ name, body: Buffer.from('junk in a batch') }]) });
    const answer = await res.json() as { data: { files: Array<{ status: number; error?: { code: string } }> } };
    return answer.data.files[0]!.status;
  }],
  ['a PUT of one byte', async (url, name) => (await put(url, 'reports', name, 'x')).status],
  ['a PUT as large as the genuine file', async (url, name) => (await put(url, 'reports', name, 'genuine run log bytes'.replace(/./g, 'j'))).status],
];

for (const [what, attack] of hostile) {
  t.test(`${what} under an acknowledged run log's name does not replace it while the upstream is down`, async (t) => {
    const port = await freePort();
    const r = await startTestRelay(t, { 'upstream.url': `http://127.0.0.1:${port}`, 'upstream.probe_interval': '200ms', 'processing.retry_min': '100ms' });
    const name = runName(NODE, 7);
    const genuine = 'genuine run log bytes';
    t.equal((await put(r.url, 'reports', name, genuine)).status, 201, 'the genuine file is acknowledged');
    t.equal(await attack(r.url, name), 409, 'the hostile upload is refused with 409');
    t.equal((await put(r.url, 'reports', name, genuine)).status, 201, 'the same bytes again are a re-send');
    const up = await new CountingUpstream().start(port);
    t.teardown(() => up.stop());
    await until(() => (up.received.length >= 1 ? true : undefined), 'the file to reach the upstream');
    await until(async () => ((await readdir(join(r.spool, 'incoming', 'reports'))).length === 0 ? true : undefined), 'the spool to empty');
    t.same(up.received.map((x) => x.sha256), [sha256(genuine)], 'the genuine bytes arrived, once');
  });
}
