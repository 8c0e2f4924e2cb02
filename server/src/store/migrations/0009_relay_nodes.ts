/**
 * Version 9: nodes that are relays. A relay is a node with its own key and pinned certificate
 * (`UID=<relay node id>`); an admin registers it (`POST /api/1/nodes {…, relay: true}`, `PATCH
 * /api/1/nodes/<id> {relay: true}`, `capstan-server nodes add --relay`). The tokens issued to it
 * carry `capstan_role: "relay"`, which the relay-only endpoints require.
 * 0/1 in both dialects (smallint in Postgres), so that one filter SQL serves both.
 */
import type { Migration } from './index.js';

const sqlite = `
ALTER TABLE nodes ADD COLUMN relay INTEGER NOT NULL DEFAULT 0 CHECK (relay IN (0, 1));
`;

const postgres = `
ALTER TABLE nodes ADD COLUMN relay smallint NOT NULL DEFAULT 0 CHECK (relay IN (0, 1));
`;

export const relayNodes: Migration = { version: 9, name: 'relay_nodes', sqlite, postgres };
