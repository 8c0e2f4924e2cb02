/**
 * RUDDER agents' OCS inventories through the server's ingest, in process against a real SQLite
 * store: the pair registers a pending node with its AGENT_CERT, acceptance pins it, and every
 * identity mismatch is refused with its code and leaves the registry as it was.
 */
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { gzipSync } from 'node:zlib';
import t from 'tap';
import { ingestInventory } from '@capstan/server/ingest/inventory';
import type { IngestDeps } from '@capstan/server/ingest/runlog';
import { ocsName, ocsXml, rudderNode, signOcs, type OcsOptions, type RudderNode } from '../helpers/ocs.js';
import { INGEST_LIMITS, ingestStore } from '../helpers/ingest.js';
import { setAcceptance } from '../helpers/node-changes.js';
import { registryOn } from '../helpers/node-changes.js';

const ID = '3b1f6a2e-8c4d-4e5f-9a0b-1c2d3e4f5a6b';
const OTHER_ID = '4c2a7b3f-9d5e-4f6a-8b1c-2d3e4f5a6b7c';
const node = rudderNode(ID);
const impostor = rudderNode(ID); // same node id, another key
const other = rudderNode(OTHER_ID);

async function setup(t: { testdir: () => string; teardown: (f: () => unknown) => void }) {
  const { dir, store } = await ingestStore(t);
  const deps: IngestDeps = { store, nodes: registryOn(store), limits: INGEST_LIMITS };
  let n = 0;
  /** Write the pair as the spool would hold it and ingest it; `signer` signs, `xmlNode` is described. */
  const send = async (signer: RudderNode, xmlNode: RudderNode, o: OcsOptions & { nameId?: string; sign?: Buffer } = {}) => {
    const base = ocsName(o.nameId ?? ID, new Date(Date.UTC(2026, 0, 1, 0, 0, n++)));
    const xml = ocsXml(xmlNode, o);
    await writeFile(join(dir, `${base}.gz`), gzipSync(xml));
    await writeFile(join(dir, `${base}.sign`), o.sign ?? signOcs(xml, signer));
    return ingestInventory(deps, join(dir, `${base}.gz`), `${base}.gz`, { ocsSignature: join(dir, `${base}.sign`) });
  };
  return { store, deps, dir, send };
}

t.test('an OCS pair registers a pending node with its AGENT_CERT; once accepted that certificate decides', async (t) => {
  const { store, send } = await setup(t);
  const n = await send(node, node);
  t.match(n, { id: ID, accepted: 'pending', hostname: 'web1', os_name: 'debian', os_version: '12', policy_server: 'root' });
  t.equal(n.certificate?.trim(), node.certPem.trim());
  await setAcceptance(store, ID, 'accepted', new Date().toISOString());
  t.match(await send(node, node, { hostname: 'web2' }), { hostname: 'web2', accepted: 'accepted' }, 'an update with the pinned key');
  // The impostor describes itself truthfully (its own certificate): the pinned one decides.
  await t.rejects(send(impostor, impostor, { hostname: 'evil' }), { code: 'ERR_OCS_SIGNATURE' });
  t.equal((await store.getNode(ID))!.hostname, 'web2', 'the node is untouched');
});

t.test('identity mismatches are refused with their codes', async (t) => {
  const { store, send } = await setup(t);
  // The XML names another node than the file name.
  await t.rejects(send(other, other, { nameId: ID }), { code: 'ERR_NODE_MISMATCH' });
  // The certificate belongs to another node (its UID), though the key signed.
  await t.rejects(send(other, node, { certPem: other.certPem, publicPem: other.publicPem }), { code: 'ERR_NODE_MISMATCH' });
  // CFENGINE_KEY and AGENT_CERT disagree.
  await t.rejects(send(node, node, { publicPem: other.publicPem }), { code: 'ERR_OCS_INVALID' });
  // A newcomer whose .sign another key made.
  await t.rejects(send(other, node), { code: 'ERR_OCS_SIGNATURE' });
  // A .sign made for another file.
  await t.rejects(send(node, node, { sign: signOcs(ocsXml(node, { hostname: 'db1' }), node, { hashValue: true }) }), { code: 'ERR_OCS_SIGNATURE', message: /another file/ });
  t.equal(await store.getNode(ID), null, 'nothing registered');
  t.equal(await store.getNode(OTHER_ID), null);
  // Without AGENT_CERT (pre-RUDDER 6 agents: a bare key): refused.
  await t.rejects(send(node, node, { omit: ['AGENT_CERT'] }), { code: 'ERR_OCS_INVALID' });
});

t.test('a refused node\'s OCS inventories stay refused; a half read alone is a coded error', async (t) => {
  const { store, deps, dir, send } = await setup(t);
  await send(node, node);
  await setAcceptance(store, ID, 'refused', new Date().toISOString());
  await t.rejects(send(node, node), { code: 'ERR_NODE_REFUSED' });
  const base = ocsName(OTHER_ID);
  await writeFile(join(dir, `${base}.sign`), 'x');
  await t.rejects(ingestInventory(deps, join(dir, `${base}.sign`), `${base}.sign`), { code: 'ERR_OCS_UNPAIRED' });
});
