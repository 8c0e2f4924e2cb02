/**
 * `capstan-server nodes …` refuses what the API refuses, since it is the API's routes in process:
 * a state that does not exist, and accepting a node with two certificates without choosing one
 * (exit 4 with the code); the pending list shows both fingerprints.
 */
import { join } from 'node:path';
import t from 'tap';
import { openRegistry } from '@capstan/server/registry/open';
import { BIN, runProgram } from '../helpers/programs.js';

const PEM = (tag: string) => `-----BEGIN CERTIFICATE-----\n${tag}\n-----END CERTIFICATE-----\n`;

t.test('set-state refuses unknown states; accept --fingerprint settles a certificate conflict', async (t) => {
  const dir = t.testdir();
  const store = await openRegistry({ sqlitePath: join(dir, 'capstan.db') });
  await store.createNode({ id: 'm1', hostname: 'db-1' });
  const inv = (cert: string, fp: string) => ({
    id: 'p1', hostname: 'web-1', certificate: cert, certificate_fingerprint: fp, os_name: 'debian', os_version: '12', agent_version: '0.1.0',
    policy_server: 'root', inventory: {}, received_at: new Date().toISOString(),
  });
  await store.upsertFromInventory(inv(PEM('A'), 'a'.repeat(64)));
  await store.upsertFromInventory(inv(PEM('B'), 'b'.repeat(64)));
  await store.close();
  const cli = (...args: string[]) => runProgram(BIN.server, ['nodes', ...args, '--data-dir', dir]);

  // A misspelt state used to be stored as given.
  const bogus = await cli('set-state', 'm1', 'stoped');
  t.equal(bogus.code, 4);
  t.match(bogus.stderr, /ERR_BAD_REQUEST.*running, stopped/);

  const pending = await cli('list', '--pending');
  t.equal(pending.code, 0, pending.stderr);
  t.match(pending.stdout, /^ID\s+HOSTNAME\s+FINGERPRINT\s+CONFLICT$/m);
  t.match(pending.stdout, new RegExp(`^p1\\s+web-1\\s+${'a'.repeat(64)}\\s+${'b'.repeat(64)}$`, 'm'));

  const refused = await cli('accept', 'p1');
  t.equal(refused.code, 4);
  t.match(refused.stderr, /ERR_CERTIFICATE_CONFLICT/);
  const chosen = await cli('accept', 'p1', '--fingerprint', 'b'.repeat(64), '--json');
  t.equal(chosen.code, 0, chosen.stderr);
  t.match(JSON.parse(chosen.stdout), { data: { accepted: 'accepted', certificate_fingerprint: 'b'.repeat(64), conflict_fingerprint: null } });
});
