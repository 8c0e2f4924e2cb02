/**
 * Refuse Capstan peers outside the supported version window (N-1..N) before any work is done,
 * with a coded error that says which side to upgrade. Non-Capstan clients (RUDDER agents, curl)
 * pass: the relay API stays RUDDER's.
 */
import type { FastifyInstance } from 'fastify';
import { HEADER_PROTOCOL } from '@capstan/shared/protocol';
import { checkPeerVersion } from '@capstan/shared/version';

export function installVersionCheck(app: FastifyInstance): void {
  app.addHook('onRequest', async (req) => {
    const protocol = req.headers[HEADER_PROTOCOL];
    checkPeerVersion(req.headers['user-agent'], Array.isArray(protocol) ? protocol[0] : protocol);
  });
}
