/**
 * Which relay (or server) this agent is under, by node id: the inventory's `policy_server`, as
 * RUDDER's inventories carry their policy server's UUID. The server's nodes list gives it to
 * relays, which route runs and files by that chain (relayd/src/data/nodes.ts): a host name there
 * matched no relay id, so nodes behind a sub-relay could not be found through a synced list.
 *
 * Asked of the relay (`GET /uuid`) and remembered in the state directory with the relay's URL;
 * asked again when the URL changes or a day has passed, so a run costs no extra request. While
 * no answer comes: the last id a relay gave, else the relay's host name.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { type Logger } from '@capstan/shared/log';
import { HEADER_PROTOCOL, PROTOCOL_VERSION, userAgent } from '@capstan/shared/protocol';
import { httpRequest } from '../queue/http.js';

const FILE = 'policy-server';
const MAX_AGE_MS = 24 * 3600_000;
/** A relay's or server's node id (relays' ids are not only agents' UUID-like form: `root`, `relay.dc1`). */
const SERVER_ID = /^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$/;

interface Known {
  relay: string;
  id: string;
  at: number;
}

async function known(file: string): Promise<Known | null> {
  try {
    const k = JSON.parse(await readFile(file, 'utf8')) as Known;
    return typeof k.relay === 'string' && typeof k.id === 'string' && SERVER_ID.test(k.id) && Number.isFinite(k.at) ? k : null;
  } catch {
    return null;
  }
}

export async function policyServerId(relay: string, stateDir: string, timeoutMs: number, log: Logger, now = Date.now()): Promise<string> {
  const file = join(stateDir, FILE);
  const last = await known(file);
  if (last && last.relay === relay && now - last.at >= 0 && now - last.at < MAX_AGE_MS) return last.id;
  try {
    const res = await httpRequest({
      method: 'GET',
      url: `${relay.replace(/\/+$/, '')}/uuid`,
      headers: { 'user-agent': userAgent('capstan-agent'), [HEADER_PROTOCOL]: PROTOCOL_VERSION },
      timeoutMs: Math.min(timeoutMs, 10_000),
      maxResponseBytes: 1024,
    });
    const id = res.body.toString('utf8').trim();
    if (res.status === 200 && SERVER_ID.test(id)) {
      await writeFile(file, `${JSON.stringify({ relay, id, at: now } satisfies Known)}\n`, { mode: 0o644 });
      return id;
    }
    log.debug({ status: res.status }, 'relay gave no node id at /uuid');
  } catch (err) {
    log.debug({ err }, 'relay node id not asked (unreachable)');
  }
  // Not answered: the last id a relay gave, however old (a flapping policy_server would resend the
  // inventory at every outage); a host name only when no relay ever answered.
  return last ? last.id : new URL(relay).hostname;
}
