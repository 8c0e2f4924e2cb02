/**
 * The keys the server signs with: `keys …` the keyring of node identity tokens (the data
 * directory's keyring, through the store), `policy-key …` the ed25519 key of policy bundles (its
 * files only: a running server picks a rotation up within seconds).
 */
import type { Command } from 'commander';
import type { KeyView } from '../identity/service.js';
import { ensurePolicyKey } from '../policy/key.js';
import { table } from '../table.js';
import { CLI_ACTOR, configFrom, out, verb, withIdentity, withStore, type CommonFlags } from './common.js';
import { silentLogger } from '@capstan/shared/log';

const KEY_TABLE: Array<[string, (k: KeyView) => unknown]> = [
  ['kid', (k) => k.kid], ['alg', (k) => k.alg], ['active', (k) => k.active], ['published', (k) => k.published],
  ['nodes', (k) => k.nodes], ['created', (k) => k.created_at], ['retired', (k) => k.retired_at],
];

export function keysCommand(program: Command): void {
  const keys = program.command('keys').description('the keyring that signs node identity tokens (the admin API\'s /api/1/keys)');

  verb(keys, 'list', 'signing keys, with the nodes whose unexpired token each signed (GET /api/1/keys)').action(async (flags: CommonFlags) => {
    await withIdentity(flags, async (identity) => {
      const rows = await identity.listKeys();
      out(flags, { data: rows }, () => table(KEY_TABLE, rows));
    });
  });

  verb(keys, 'rotate', 'make a new key active; old tokens stay valid until they expire (POST /api/1/keys/rotate)').action(async (flags: CommonFlags) => {
    await withIdentity(flags, async (identity) => {
      const key = await identity.rotate(CLI_ACTOR);
      out(flags, { data: key }, () => `${key.kid} active\n`);
    });
  });

  verb(keys, 'delete <kid>', 'delete a retired key; refused while it signs unexpired tokens (DELETE /api/1/keys/<kid>)')
    .option('--force', 'delete even if nodes still hold unexpired tokens it signed (they will renew)')
    .action(async (kid: string, flags: CommonFlags & { force?: boolean }) => {
      await withIdentity(flags, async (identity) => {
        const r = await identity.deleteKey(kid, flags.force ?? false, CLI_ACTOR);
        out(flags, { data: r }, () => `${kid} deleted (${r.nodes} nodes held tokens it signed)\n`);
      });
    });
}

export function policyKeyCommand(program: Command): void {
  const policyKey = program.command('policy-key').description('the ed25519 key that signs policy bundles (docs/policy.md)');

  verb(policyKey, 'rotate', 'make a new policy key active, endorsed by the previous one (POST /api/1/keys/policy/rotate)').action(async (flags: CommonFlags) => {
    // The key is in files (a running server picks the new one up within seconds); the change is
    // recorded in the registry's audit log like the API's.
    const keyring = await ensurePolicyKey(configFrom(flags).general.data_dir);
    await withStore(flags, async (store) => {
      const { AuditLog } = await import('../audit/log.js');
      const r = await keyring.rotate();
      await new AuditLog({ admins: store.admins, log: silentLogger }).record(CLI_ACTOR, { action: 'policy_key.rotate', target: r.key_id, before: { key_id: r.previous_key_id }, after: { key_id: r.key_id } });
      out(flags, { data: r }, () => `${r.key_id} active (endorsed by ${r.previous_key_id})\n`);
    });
  });

  verb(policyKey, 'show', 'the active policy key and its endorsement chain (GET /api/1/keys/policy)').action(async (flags: CommonFlags) => {
    const k = (await ensurePolicyKey(configFrom(flags).general.data_dir)).current();
    const data = { key_id: k.keyId, algorithm: 'ed25519', public_key: k.publicKeyPem, endorsements: k.endorsements };
    out(flags, { data }, () => `${k.keyId} (${k.endorsements.length} endorsements)\n${k.publicKeyPem}`);
  });
}
