/**
 * The listeners' transport, on both programs: the server speaks TLS from the same [tls] keys as
 * the relay (1.2 and newer, 1.0 and 1.1 refused), and neither program starts with a listener off
 * loopback in plain HTTP unless tls.allow_plaintext says so. Before, both said "configuration ok"
 * to `--listen 0.0.0.0:3031` without a certificate, and the server had no TLS at all.
 */
import { readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { Agent } from 'undici';
import { BIN, runProgram, startProgram, programDir } from '../helpers/programs.js';
import { handshake, haveOpenssl, makeCerts } from '../helpers/certs.js';

const serverArgs = (dir: string, ...more: string[]) => ['serve', '--data-dir', join(dir, 'data'), '--log-level', 'warn', ...more];
const relayArgs = (dir: string, ...more: string[]) => ['--spool-dir', join(dir, 'spool'), '--upstream', 'http://127.0.0.1:9', '--log-level', 'warn', ...more];

t.test('a listener off loopback in plain HTTP is refused at start (exit 2) unless allowed', async (t) => {
  const dir = programDir(t, {
    'allow.toml': '[tls]\nallow_plaintext = true\n',
  });
  for (const listen of ['0.0.0.0:0', '192.0.2.10:3031']) {
    for (const [name, args] of [
      ['server', [BIN.server, serverArgs(dir, '--listen', listen)]],
      ['relayd', [BIN.relayd, relayArgs(dir, '--listen', listen)]],
    ] as const) {
      const checked = await runProgram(args[0], [...args[1], '--test']);
      t.equal(checked.code, 2, `${name} --test ${listen}: exit 2`);
      t.match(checked.stderr, /ERR_PLAINTEXT_LISTEN: .*in clear/, `${name} ${listen}: coded message naming the risk`);
      const allowed = await runProgram(args[0], [...args[1], '--config', join(dir, 'allow.toml'), '--test']);
      t.equal(allowed.code, 0, `${name} ${listen} with tls.allow_plaintext = true: ok (${allowed.stderr})`);
    }
  }
  // Starting for real is refused the same way, before anything listens.
  const served = await runProgram(BIN.server, serverArgs(dir, '--listen', '0.0.0.0:0'));
  t.equal(served.code, 2);
  t.match(served.stderr, /ERR_PLAINTEXT_LISTEN/);
  const relayed = await runProgram(BIN.relayd, relayArgs(dir, '--listen', '0.0.0.0:0'));
  t.equal(relayed.code, 2);
  t.match(relayed.stderr, /ERR_PLAINTEXT_LISTEN/);
  // Loopback in clear stays the default (tests, quick start); the other forms: test/toolkit/listener-tls.test.ts.
  for (const listen of ['127.1.2.3:0']) {
    t.equal((await runProgram(BIN.server, [...serverArgs(dir, '--listen', listen), '--test'])).code, 0, `server ${listen} ok`);
    t.equal((await runProgram(BIN.relayd, [...relayArgs(dir, '--listen', listen), '--test'])).code, 0, `relayd ${listen} ok`);
  }
});

if (!haveOpenssl()) {
  t.comment('skipping the TLS handshake tests: openssl is not installed, no certificates to test with');
  if (process.env.CI === 'true') t.fail('openssl is required in CI');
} else {
  t.test('the server speaks TLS 1.2+ from [tls], and --test accepts a TLS listener off loopback', async (t) => {
    const dir = programDir(t);
    makeCerts(dir, 'server');
    const toml = `[tls]\ncert_file = "${join(dir, 'server.pem')}"\nkey_file = "${join(dir, 'server.key')}"\n`;
    await writeFile(join(dir, 'tls.toml'), toml);
    t.equal((await runProgram(BIN.server, [...serverArgs(dir, '--listen', '0.0.0.0:0', '--config', join(dir, 'tls.toml')), '--test'])).code, 0);
    await writeFile(join(dir, 'bad.toml'), `[tls]\ncert_file = "${join(dir, 'ca.key')}"\nkey_file = "${join(dir, 'server.key')}"\n`);
    const bad = await runProgram(BIN.server, [...serverArgs(dir, '--config', join(dir, 'bad.toml')), '--test']);
    t.equal(bad.code, 2, 'a key in place of the certificate is a configuration error');

    const server = await startProgram(BIN.server, serverArgs(dir, '--listen', '127.0.0.1:0', '--config', join(dir, 'tls.toml')));
    t.teardown(() => server.stop());
    t.match(server.url, /^https:\/\/127\.0\.0\.1:\d+$/);
    const port = Number(new URL(server.url).port);
    for (const version of ['TLSv1', 'TLSv1.1', 'TLSv1.2', 'TLSv1.3'] as const) {
      const got = (await handshake(port, version)).protocol;
      t.equal(got, version === 'TLSv1' || version === 'TLSv1.1' ? null : version, `${version}`);
    }
    // A client that checks the certificate against the CA gets the admin API over it.
    const token = (await readFile(join(dir, 'data', 'admin.token'), 'utf8')).trim();
    const dispatcher = new Agent({ connect: { ca: await readFile(join(dir, 'ca.pem'), 'utf8') } });
    t.teardown(() => dispatcher.close());
    const { fetch: undiciFetch } = await import('undici');
    const res = await undiciFetch(`${server.url}/api/1/nodes`, { headers: { authorization: `Bearer ${token}` }, dispatcher });
    t.equal(res.status, 200);
    const plain = await fetch(`http://127.0.0.1:${port}/uuid`).then(() => 'answered', () => 'refused');
    t.equal(plain, 'refused', 'no plain HTTP on the TLS port');
  });
}
