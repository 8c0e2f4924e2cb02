/**
 * A stand-in agent for remote-run tests (RUDDER's tests use a fake_agent.sh the same way): it
 * holds the listen connection to a relay and answers each run event on the output endpoint with
 * `started`, one line echoing the conditions, a second line, and `done` — or `busy` when told to.
 */
import { request } from 'undici';
import { PassThrough } from 'node:stream';
import { jsonEvents } from '../../helpers/http.js';

export interface FakeAgent {
  runs: Array<{ at: number; event: any }>;
  connected: Promise<void>;
  close(): void;
}

export function fakeAgent(relay: string, node: string, opts: { busy?: boolean; lines?: number; token?: string } = {}): FakeAgent {
  const ac = new AbortController();
  const runs: FakeAgent['runs'] = [];
  let onConnected!: () => void;
  const connected = new Promise<void>((r) => (onConnected = r));
  void (async () => {
    // Relays require the node's token on this connection (identity.require_token, on by default).
    const headers = opts.token ? { authorization: `Bearer ${opts.token}` } : {};
    const res = await request(`${relay}/remote-run/listen/${node}`, { signal: ac.signal, bodyTimeout: 0, headers });
    for await (const ev of jsonEvents(res.body)) {
      if (ev.type === 'hello') onConnected();
      if (ev.type !== 'run') continue;
      runs.push({ at: Date.now(), event: ev });
      const out = new PassThrough();
      // An asynchronous run's output may still be on its way when the test ends and its relay
      // closes: the reset of that post is no failure of the test (it was an unhandled rejection).
      void request(`${relay}/remote-run/output/${ev.id}`, { method: 'POST', body: out }).then((r) => r.body.dump(), () => undefined);
      const send = (e: object) => out.write(`${JSON.stringify({ node, ...e })}\n`);
      if (opts.busy) {
        send({ type: 'busy' });
      } else {
        send({ type: 'started' });
        send({ type: 'line', text: `conditions: ${ev.conditions.join(',')}` });
        for (let i = 0; i < (opts.lines ?? 1); i++) send({ type: 'line', text: `line ${i}` });
        send({ type: 'done', code: 0 });
      }
      out.end();
    }
  })().catch(() => {});
  return { runs, connected, close: () => ac.abort() };
}
