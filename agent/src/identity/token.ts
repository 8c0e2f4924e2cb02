/**
 * The agent's identity token: shared/identity/keeper.ts (kept 0600 in the state directory,
 * renewed by signed request when less than a third of its life is left, never a lockout), with
 * the renewal request sent to the agent's relay by the agent's HTTP client.
 */
import { join } from 'node:path';
import { MAX_RENEW_ANSWER_BYTES, NodeTokenKeeper } from '@capstan/shared/identity/keeper';
import { type Logger } from '@capstan/shared/log';
import { HEADER_PROTOCOL, PROTOCOL_VERSION, userAgent } from '@capstan/shared/protocol';
import { httpRequest } from '../queue/http.js';
import type { AgentIdentity } from './state.js';

export class TokenKeeper extends NodeTokenKeeper {
  constructor(o: { relay: string; stateDir: string; timeoutMs: number; id: AgentIdentity; log: Logger; clock: () => Date }) {
    super({
      file: join(o.stateDir, 'identity.token'),
      nodeId: o.id.nodeId,
      id: o.id,
      log: o.log,
      clock: o.clock,
      peer: 'relay',
      post: async (body) => {
        const res = await httpRequest({
          method: 'POST',
          url: `${o.relay}/identity/renew`,
          body,
          headers: { 'content-type': 'application/pkcs7-mime', 'user-agent': userAgent('capstan-agent'), [HEADER_PROTOCOL]: PROTOCOL_VERSION },
          timeoutMs: o.timeoutMs,
          maxResponseBytes: MAX_RENEW_ANSWER_BYTES,
        });
        return { status: res.status, body: res.body };
      },
    });
  }
}
