/**
 * Admin API for bootstrap (docs/bootstrap.md); bootstrap jobs themselves go through /api/1/jobs.
 *   POST   /api/1/credentials                 {id, user, port?, private_key?, passphrase?, password?, selectors} → 201 metadata
 *   GET    /api/1/credentials                 metadata only: never a key, passphrase or password
 *   GET    /api/1/credentials/<id>
 *   DELETE /api/1/credentials/<id>
 *   GET    /api/1/nodes/<id>/host-key         the SSH host key pinned on first use
 *   DELETE /api/1/nodes/<id>/host-key         clear the pin (after a legitimate key change)
 */
import type { FastifyInstance } from 'fastify';
import { capstanError } from '@capstan/shared/errors';
import { readJson } from '@capstan/toolkit/http/app';
import type { CredentialService } from '../../bootstrap/service.js';
import type { Reads } from '../../reads.js';
import { actorOf } from '../actor.js';

export interface BootstrapRouteDeps {
  store: Reads;
  /** The door for credentials and pinned host keys (bootstrap/service.ts). */
  credentials: CredentialService;
}

/** A credential body holds a private key: more than the usual JSON limit is never needed. */
const MAX_CREDENTIAL_BYTES = 128 * 1024;

export function bootstrapRoutes(app: FastifyInstance, deps: BootstrapRouteDeps): void {
  const { store, credentials } = deps;

  app.post('/api/1/credentials', async (req, reply) => {
    const created = await credentials.create(await readJson(req, MAX_CREDENTIAL_BYTES), actorOf(req));
    return reply.code(201).send({ data: created });
  });

  app.get('/api/1/credentials', async () => {
    const list = await store.bootstrap.listCredentials();
    return { data: list, total: list.length };
  });

  app.get<{ Params: { id: string } }>('/api/1/credentials/:id', async (req) => {
    const c = (await store.bootstrap.listCredentials()).find((x) => x.id === req.params.id);
    if (!c) throw capstanError('ERR_CREDENTIAL_UNKNOWN', `credential ${req.params.id} is unknown`);
    return { data: c };
  });

  app.delete<{ Params: { id: string } }>('/api/1/credentials/:id', async (req, reply) => {
    await credentials.delete(req.params.id, actorOf(req));
    return reply.code(204).send();
  });

  app.get<{ Params: { id: string } }>('/api/1/nodes/:id/host-key', async (req) => {
    const k = await store.bootstrap.getHostKey(req.params.id);
    if (!k) throw capstanError('ERR_NOT_FOUND', `no host key is pinned for node ${req.params.id}`);
    return { data: k };
  });

  app.delete<{ Params: { id: string } }>('/api/1/nodes/:id/host-key', async (req, reply) => {
    await credentials.clearHostKey(req.params.id, actorOf(req));
    return reply.code(204).send();
  });
}
