/**
 * `capstan-server policy-key …`: the ed25519 key that signs policy bundles, in the data
 * directory's files only, so it works with the database down too; a running server picks a
 * rotation up within seconds. (`capstan keys policy-rotate` does the same through the API.)
 */
import type { Command } from 'commander';
import { ensurePolicyKey } from '../policy/key.js';
import { configFrom, flagsOf, out } from './common.js';

export function policyKeyCommand(program: Command): void {
  const policyKey = program.command('policy-key').description('the ed25519 key that signs policy bundles, in the data directory (docs/policy.md)');

  policyKey.command('rotate').description('make a new policy key active, endorsed by the previous one (POST /api/1/keys/policy/rotate)')
    .action(async (_o: unknown, cmd: Command) => {
      const flags = flagsOf(cmd);
      const keyring = await ensurePolicyKey(configFrom(flags).general.data_dir);
      const r = await keyring.rotate();
      out(flags, { data: r }, () => `${r.key_id} active (endorsed by ${r.previous_key_id})\n`);
    });

  policyKey.command('show').description('the active policy key and its endorsement chain (GET /api/1/keys/policy)')
    .action(async (_o: unknown, cmd: Command) => {
      const flags = flagsOf(cmd);
      const k = (await ensurePolicyKey(configFrom(flags).general.data_dir)).current();
      const data = { key_id: k.keyId, algorithm: 'ed25519', public_key: k.publicKeyPem, endorsements: k.endorsements };
      out(flags, { data }, () => `${k.keyId} (${k.endorsements.length} endorsements)\n${k.publicKeyPem}`);
    });
}
