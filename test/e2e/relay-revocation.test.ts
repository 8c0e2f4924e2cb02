/**
 * A sub-relay revoked at the server loses its link to the relay above at that relay's next sync
 * of the nodes list, not when its token expires: the server's list marks registered relays
 * (`"relay": true`), the top relay ends a link whose relay it no longer marks and refuses it again
 * (403 ERR_TOKEN_NOT_RELAY) however valid its token still is. Real programs, real tokens.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { adminClient, BIN, registerRelay, startProgram, waitFor } from '../helpers/programs.js';

t.test('a sub-relay no longer registered as a relay is cut off at the next list sync and cannot link again', async (t) => {
  const dir = t.testdir();
  const serverDir = join(dir, 'server');
  const server = await startProgram(BIN.server, ['serve', '--listen', '127.0.0.1:0', '--data-dir', serverDir, '--log-level', 'warn']);
  t.teardown(() => server.stop());
  const api = adminClient(server.url, (await readFile(join(serverDir, 'admin.token'), 'utf8')).trim());

  await writeFile(join(dir, 'top.toml'), '[general]\nnode_id = "relay-top"\n\n[remote_run]\nlink_upstream = true\n\n[nodes_sync]\nmiss_refresh = "100ms"\n');
  const topArgs = ['-c', join(dir, 'top.toml'), '--spool-dir', join(dir, 'top'), '--upstream', server.url];
  await registerRelay(api, topArgs);
  const top = await startProgram(BIN.relayd, [...topArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => top.stop());
  await writeFile(join(dir, 'sub.toml'), '[general]\nnode_id = "relay-sub"\n\n[remote_run]\nlink_upstream = true\n');
  const subArgs = ['-c', join(dir, 'sub.toml'), '--spool-dir', join(dir, 'sub'), '--upstream', top.url];
  await registerRelay(api, subArgs, { policy_server: 'relay-top' });
  const sub = await startProgram(BIN.relayd, [...subArgs, '--listen', '127.0.0.1:0', '--log-level', 'warn']);
  t.teardown(() => sub.stop());

  const relayStatus = async (url: string) => ((await (await fetch(`${url}/rudder/relay-api/1/system/status`)).json()) as any).data;
  // The sub-relay was registered after the top relay's first sync: its link makes the top relay ask again.
  await waitFor(async () => ((await relayStatus(top.url)).remote_run.connections === 1 ? true : undefined), 'the sub-relay to link to the top relay');
  const list = (await (await fetch(`${top.url}/rudder/relay-api/1/nodes`)).json()) as { data: { nodes: Record<string, { relay?: boolean }> } };
  t.equal(list.data.nodes['relay-sub']?.relay, true, 'the synced list marks the sub-relay as a relay');
  t.equal(list.data.nodes['relay-top']?.relay, true);

  // The admin takes the relay flag away: its token stays valid for hours.
  const patched = await api('PATCH', '/api/1/nodes/relay-sub', { relay: false });
  t.equal(patched.status, 200, JSON.stringify(patched.json));
  const token = (await readFile(join(dir, 'sub', 'relay.token'), 'utf8')).trim();
  // The next sync (here a reload; otherwise nodes_sync.interval) ends the link.
  const reload = await fetch(`${top.url}/rudder/relay-api/1/system/reload`, { method: 'POST' });
  t.equal(reload.status, 200);
  await waitFor(async () => ((await relayStatus(top.url)).remote_run.connections === 0 ? true : undefined), 'the top relay to end the link');
  // Relinking with the still-valid token is refused, and stays so.
  const again = await fetch(`${top.url}/remote-run/listen/relay-sub?relay=1`, { headers: { authorization: `Bearer ${token}` } });
  t.equal(again.status, 403);
  t.match(await again.text(), /ERR_TOKEN_NOT_RELAY/);
  await new Promise((r) => setTimeout(r, 1500));
  t.equal((await relayStatus(top.url)).remote_run.connections, 0, 'the sub-relay\'s own retries are refused too');
  // The top relay's own link to the server is untouched.
  t.ok((await api('GET', '/api/1/system/status')).json?.data?.remote_run?.relays?.includes('relay-top'), 'the top relay is still linked to the server');
});
