/**
 * Junk raced ahead under a RUDDER agent's upload names must not kill its inventory. Node ids are
 * public and the names predictable: a junk `.sign` (or inventory) spooled first used to be paired
 * with the genuine half, and both were refused. Now no upload replaces or is paired blindly with
 * what is spooled under its name: a different half is kept as a candidate, and the server pairs
 * the candidates that verify. Through a relay and straight at the server, with the real programs.
 */
import { readFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { adminClient, BIN, startProgram, waitFor, programDir, serverAndRelay } from '../helpers/programs.js';
import { ocsName, ocsXml, rudderNode, signOcs } from '../helpers/ocs.js';

async function put(base: string, name: string, body: Buffer): Promise<number> {
  const res = await fetch(`${base}/inventories/${encodeURIComponent(name)}`, { method: 'PUT', body });
  await res.arrayBuffer();
  return res.status;
}

t.test('a genuine OCS pair enrols its node whatever junk was spooled first under its names', async (t) => {
  const dir = programDir(t);
  const { server, relay, api } = await serverAndRelay(t, dir);

  // Each variant: the junk first (where, which half), then the agent's two uploads to the relay.
  const variants: Array<{ what: string; junk: Array<{ to: 'relay' | 'server'; half: 'sign' | 'data' }> }> = [
    { what: 'a junk .sign at the relay', junk: [{ to: 'relay', half: 'sign' }] },
    { what: 'a junk .sign at the server', junk: [{ to: 'server', half: 'sign' }] },
    { what: 'a junk inventory at the relay', junk: [{ to: 'relay', half: 'data' }] },
    { what: 'junk halves at both', junk: [{ to: 'server', half: 'sign' }, { to: 'server', half: 'data' }, { to: 'relay', half: 'sign' }] },
  ];
  for (const [i, v] of variants.entries()) {
    const id = `7c1d2e3f-4a5b-4c6d-8e9f-0a1b2c3d4e${String(i).padStart(2, '0')}`;
    const node = rudderNode(id);
    const name = ocsName(id, new Date(Date.now() - 60_000 - i * 1000));
    const xml = ocsXml(node, { hostname: `web${i}` });
    for (const j of v.junk) {
      const url = j.to === 'relay' ? relay.url : server.url;
      const status = j.half === 'sign' ? await put(url, `${name}.sign`, Buffer.from('junk signature')) : await put(url, `${name}.gz`, gzipSync('<REQUEST/>'));
      t.equal(status, 201, `${v.what}: the junk was taken (anyone may upload)`);
    }
    t.equal(await put(relay.url, `${name}.gz`, gzipSync(xml)), 201, `${v.what}: the genuine inventory is taken`);
    t.equal(await put(relay.url, `${name}.sign`, signOcs(xml, node)), 201, `${v.what}: the genuine .sign is taken`);
    const pending = await waitFor(async () => {
      const r = await api('GET', `/api/1/nodes/${id}`);
      return r.status === 200 ? r.json.data : undefined;
    }, `${v.what}: the node to enrol`, 30_000);
    t.match(pending, { id, hostname: `web${i}`, accepted: 'pending' }, `${v.what}: the genuine pair enrolled the node`);
    t.equal(pending.certificate?.trim(), node.certPem.trim());
  }
});
