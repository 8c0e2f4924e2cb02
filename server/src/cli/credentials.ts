/**
 * `capstan-server credentials …`: the SSH credentials bootstrap jobs log in with (docs/bootstrap.md),
 * sealed at rest with the identity keyring's secret; only their metadata is ever shown.
 */
import { readFile } from 'node:fs/promises';
import type { Command } from 'commander';
import { capstanError } from '@capstan/shared/errors';
import { parseCredentialRequest, sealCredential } from '../bootstrap/credentials.js';
import { table } from '../table.js';
import { collect, int, out, verb, withIdentity, withStore, type CommonFlags } from './common.js';

/** A secret read from a file (never from the command line, where `ps` would show it). */
const secretFile = async (path: string | undefined, what: string) => (path === undefined ? undefined : readFile(path, 'utf8').catch((err: Error) => {
  throw capstanError('ERR_BAD_REQUEST', `cannot read ${what} ${path}: ${err.message}`);
}));

export function credentialsCommand(program: Command): void {
  const credentials = program.command('credentials').description('SSH credentials for bootstrap jobs (the admin API\'s /api/1/credentials)');

  verb(credentials, 'add', 'add a credential, sealed at rest (POST /api/1/credentials)')
    .requiredOption('--id <id>', 'credential id')
    .requiredOption('--user <name>', 'login name on the nodes')
    .option('--port <n>', 'SSH port (default 22)', int('port'))
    .option('--key-file <file>', 'private key (OpenSSH or PEM)')
    .option('--passphrase-file <file>', 'the private key\'s passphrase')
    .option('--password-file <file>', 'a password (with or instead of a key)')
    .option('-s, --selector <selector>', 'node:<id>, tag:<key>=<value>, group:<id>, manager:<id> or *; repeatable', collect)
    .action(async (flags: CommonFlags & { id: string; user: string; port?: number; keyFile?: string; passphraseFile?: string; passwordFile?: string; selector?: string[] }) => {
      await withIdentity(flags, async (identity, store) => {
        const passphrase = (await secretFile(flags.passphraseFile, '--passphrase-file'))?.replace(/\r?\n$/, '');
        const password = (await secretFile(flags.passwordFile, '--password-file'))?.replace(/\r?\n$/, '');
        const privateKey = await secretFile(flags.keyFile, '--key-file');
        const req = parseCredentialRequest({
          id: flags.id, user: flags.user, selectors: flags.selector ?? [],
          ...(flags.port !== undefined && { port: flags.port }), ...(privateKey !== undefined && { private_key: privateKey }),
          ...(passphrase !== undefined && { passphrase }), ...(password !== undefined && { password }),
        });
        const c = await store.bootstrap.createCredential(await sealCredential(req, identity.keySealer, new Date()));
        out(flags, { data: c }, () => `${c.id} added (${c.fingerprint ?? 'password'})\n`);
      });
    });

  verb(credentials, 'list', 'credentials: metadata only (GET /api/1/credentials)').action(async (flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      const rows = await store.bootstrap.listCredentials();
      out(flags, { data: rows, total: rows.length }, () => table([['id', (c) => c.id], ['user', (c) => c.user], ['port', (c) => c.port],
        ['selectors', (c) => c.selectors.join(' ')], ['fingerprint', (c) => c.fingerprint], ['created', (c) => c.created_at]], rows));
    });
  });

  verb(credentials, 'delete <id>', 'delete a credential (DELETE /api/1/credentials/<id>)').action(async (id: string, flags: CommonFlags) => {
    await withStore(flags, async (store) => {
      if (!(await store.bootstrap.deleteCredential(id))) throw capstanError('ERR_CREDENTIAL_UNKNOWN', `credential ${id} is unknown`);
      out(flags, { data: { id, deleted: true } }, () => `${id} deleted\n`);
    });
  });
}
