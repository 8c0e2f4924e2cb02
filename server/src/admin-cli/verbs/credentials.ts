/**
 * `capstan credentials …`: the SSH credentials bootstrap jobs log in with (docs/bootstrap.md).
 * Secrets are read from files, never from the command line (where `ps` would show them), sent
 * once in the request that creates the credential, and sealed at rest by the server; only
 * metadata ever comes back.
 */
import type { Command } from 'commander';
import type { Column } from '../output.js';
import { collect, enc, int, readCliFile, type Verbs } from '../kit.js';

const CREDENTIAL_COLUMNS: Column[] = [
  ['id', (c) => c.id], ['user', (c) => c.user], ['port', (c) => c.port], ['selectors', (c) => c.selectors.join(' ')],
  ['fingerprint', (c) => c.fingerprint], ['has_password', (c) => c.has_password], ['created_at', (c) => c.created_at],
];

/** A one-line secret from a file, without its final newline. */
const secretLine = async (path: string | undefined, what: string) => (path === undefined ? undefined : (await readCliFile(path, what)).replace(/\r?\n$/, ''));

export function credentialVerbs(program: Command, { act, list, show, io }: Verbs): void {
  const credentials = program.command('credentials').description('SSH credentials for bootstrap jobs: add, list, show, delete');
  credentials.command('add').description('add a credential, sealed at rest by the server (POST /api/1/credentials)')
    .requiredOption('--id <id>', 'credential id')
    .requiredOption('--user <name>', 'login name on the nodes')
    .option('--port <n>', 'SSH port (default 22)', int('--port'))
    .option('--key-file <file>', 'private key (OpenSSH or PEM)')
    .option('--passphrase-file <file>', 'the private key\'s passphrase')
    .option('--password-file <file>', 'a password (with or instead of a key)')
    .option('-s, --selector <selector>', 'node:<id>, tag:<key>=<value>, group:<id>, manager:<id> or *; repeatable', collect)
    .action(act(async (api, fmt, cmd) => {
      const o = cmd.opts() as { id: string; user: string; port?: number; keyFile?: string; passphraseFile?: string; passwordFile?: string; selector?: string[] };
      const body = {
        id: o.id, user: o.user, selectors: o.selector ?? [], port: o.port,
        private_key: o.keyFile === undefined ? undefined : await readCliFile(o.keyFile, '--key-file'),
        passphrase: await secretLine(o.passphraseFile, '--passphrase-file'),
        password: await secretLine(o.passwordFile, '--password-file'),
      };
      show(fmt, (await api.call('POST', '/api/1/credentials', { body })).body);
    }));
  credentials.command('list').description('credentials: metadata only')
    .action(act(async (api, fmt) => list(fmt, CREDENTIAL_COLUMNS, (await api.get('/api/1/credentials')).body)));
  credentials.command('show <id>').description('one credential\'s metadata')
    .action(act(async (api, fmt, _c, id: string) => show(fmt, (await api.get(`/api/1/credentials/${enc(id)}`)).body)));
  credentials.command('delete <id>').description('delete a credential')
    .action(act(async (api, _f, _c, id: string) => {
      await api.call('DELETE', `/api/1/credentials/${enc(id)}`);
      io.out(`deleted credential ${id}\n`);
    }));
}
