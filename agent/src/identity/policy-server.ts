/**
 * Which relay (or server) this agent is under, by node id: the inventory's `policy_server`, as
 * RUDDER's inventories carry their policy server's UUID. The server's nodes list gives it to
 * relays, which route runs and files by that chain (relayd/src/data/nodes.ts): a host name there
 * matched no relay id, so nodes behind a sub-relay could not be found through a synced list.
 *
 * Asked of the relay (`GET /uuid`) at each run, remembered in the state directory for runs when
 * the relay cannot be reached; the relay's host name only when it never answered.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { HEADER_PROTOCOL, PROTOCOL_VERSION, userAgent, type Logger } from '@capstan/shared/agent';
import { httpRequest } from '../queue/http.js';

const FILE = 'policy-server';
/** A relay's or server's node id (relays' ids are not only agents' UUID-like form: `root`, `relay.dc1`). */
const SERVER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;
const isServerId = (s: string) => SERVER_ID.test(s);

export async function policyServerId(relay: string, stateDir: string, timeoutMs: number, log: Logger): Promise<string> {
  const file = join(stateDir, FILE);
  const known = (await readFile(file, 'utf8').catch(() => '')).trim();
  try {
    const res = await httpRequest({
      method: 'GET',
      url: `${relay.replace(/\/+$/, '')}/uuid`,
      headers: { 'user-agent': userAgent('capstan-agent'), [HEADER_PROTOCOL]: PROTOCOL_VERSION },
      timeoutMs: Math.min(timeoutMs, 10_000),
      maxResponseBytes: 1024,
    });
    const id = res.body.toString('utf8').trim();
    if (res.status === 200 && isServerId(id)) {
      if (id !== known) await writeFile(file, `${id}\n`, { mode: 0o644 });
      return id;
    }
    log.debug({ status: res.status }, 'relay gave no node id at /uuid');
  } catch (err) {
    log.debug({ err }, 'relay node id not asked (unreachable)');
  }
  return isServerId(known) ? known : new URL(relay).hostname;
}
