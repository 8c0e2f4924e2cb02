/**
 * TLS on the agent-facing listener (1.2 and 1.3 accepted, 1.0 and 1.1 refused by the server's
 * alert), certificates reloaded without dropping connections, and the upstream authenticated by a
 * pinned certificate (host name not checked, any other certificate refused) or by a CA.
 * Certificates are made with openssl (helpers/certs.ts).
 */
import { X509Certificate } from 'node:crypto';
import { copyFile, readdir, readFile, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import tls from 'node:tls';
import t from 'tap';
import { Agent, Pool } from 'undici';
import { createNodeIdentity } from '@capstan/shared';
import { runName, until } from './helpers/upstream.js';
import { startTestRelay } from './helpers/relay.js';
import { programDir } from '../helpers/programs.js';
import { handshake, haveOpenssl, makeCerts } from '../helpers/certs.js';

if (!haveOpenssl()) {
  t.comment('skipping: openssl is not installed, no certificates to test with');
  t.pass('skipped: no openssl', { skip: 'openssl not installed' });
} else {
  t.test('the listener speaks TLS 1.2 and 1.3 and refuses 1.0 and 1.1', async (t) => {
    const dir = programDir(t);
    makeCerts(dir, 'relay', ['other', 'renewed']);
    const r = await startTestRelay(t, { 'tls.cert_file': join(dir, 'server.pem'), 'tls.key_file': join(dir, 'server.key') }, { dir });
    t.match(r.url, /^https:/);
    const port = r.handle.port;
    t.equal((await handshake(port, 'TLSv1.2')).protocol, 'TLSv1.2');
    t.equal((await handshake(port, 'TLSv1.3')).protocol, 'TLSv1.3');
    for (const v of ['TLSv1', 'TLSv1.1'] as const) {
      const h = await handshake(port, v);
      t.equal(h.protocol, null, `${v} refused`);
      t.equal(h.error, 'ERR_SSL_TLSV1_ALERT_PROTOCOL_VERSION', `${v}: the relay answered with a protocol_version alert`);
    }
    const v13only = await startTestRelay(t, { 'tls.cert_file': join(dir, 'server.pem'), 'tls.key_file': join(dir, 'server.key'), 'tls.min_version': 'TLSv1.3' }, { dir: join(dir, 'b') });
    t.equal((await handshake(v13only.handle.port, 'TLSv1.2')).protocol, null, 'min_version = TLSv1.3 refuses 1.2');

    const pool = new Pool(r.url, { connect: { ca: await readFile(join(dir, 'ca.pem'), 'utf8') } });
    t.teardown(() => pool.close());
    const res = await pool.request({ method: 'PUT', path: `/reports/${encodeURIComponent(runName('n1', 1))}`, body: 'x', headers: { 'content-length': '1' } });
    await res.body.dump();
    t.equal(res.statusCode, 201, 'an upload over https, certificate checked against the CA');
  });

  t.test('reload swaps the certificate for new connections and keeps open ones', async (t) => {
    const dir = programDir(t);
    makeCerts(dir, 'relay', ['other', 'renewed']);
    await copyFile(join(dir, 'server.pem'), join(dir, 'live.pem'));
    await copyFile(join(dir, 'server.key'), join(dir, 'live.key'));
    const r = await startTestRelay(t, { 'tls.cert_file': join(dir, 'live.pem'), 'tls.key_file': join(dir, 'live.key') }, { dir });
    const fp = (f: string) => readFile(join(dir, f), 'utf8').then((pem) => new X509Certificate(pem).fingerprint256);
    t.equal((await handshake(r.handle.port, 'TLSv1.3')).fingerprint, await fp('server.pem'));

    // One keep-alive connection, used before and after the reload.
    const sock = tls.connect({ host: '127.0.0.1', port: r.handle.port, rejectUnauthorized: false });
    await new Promise((res) => sock.once('secureConnect', res));
    const ask = () =>
      new Promise<string>((resolve) => {
        let got = '';
        const on = (d: Buffer) => {
          got += d.toString();
          if (got.includes('\r\n\r\n') && /\n[a-z0-9]+\n$/.test(got)) {
            sock.off('data', on);
            resolve(got);
          }
        };
        sock.on('data', on);
        sock.write('GET /uuid HTTP/1.1\r\nHost: relay\r\n\r\n');
      });
    t.match(await ask(), /^HTTP\/1.1 200/);
    await copyFile(join(dir, 'renewed.pem'), join(dir, 'live.pem'));
    await copyFile(join(dir, 'renewed.key'), join(dir, 'live.key'));
    const reload = await fetch(`${r.url}/rudder/relay-api/1/system/reload`, { method: 'POST', dispatcher: new Agent({ connect: { rejectUnauthorized: false } }) } as unknown as RequestInit);
    t.equal(reload.status, 200);
    t.equal((await handshake(r.handle.port, 'TLSv1.3')).fingerprint, await fp('renewed.pem'), 'new connections get the renewed certificate');
    t.match(await ask(), /^HTTP\/1.1 200/, 'the connection opened before the reload still works');
    sock.destroy();
  });

  t.test('the upstream is authenticated by a pinned certificate or a CA', async (t) => {
    const dir = programDir(t);
    makeCerts(dir, 'relay', ['other', 'renewed']);
    const root = await startTestRelay(t, { 'tls.cert_file': join(dir, 'server.pem'), 'tls.key_file': join(dir, 'server.key') }, { dir: join(dir, 'root') });
    const rootIncoming = join(dir, 'root', 'spool', 'incoming', 'reports');
    // The root forwards nowhere useful: files simply wait in its spool, where the test sees them.
    const via = async (name: string, extra: Record<string, unknown>, i: number) => {
      const edge = await startTestRelay(t, { 'upstream.url': root.url, ...extra }, { dir: join(dir, name) });
      const put = await fetch(`${edge.url}/reports/${encodeURIComponent(runName('n1', i))}`, { method: 'PUT', body: `via ${name}` });
      t.equal(put.status, 201);
      return edge;
    };
    await via('pinned', { 'upstream.pinned_cert_file': join(dir, 'server.pem') }, 1);
    await until(async () => ((await readdir(rootIncoming)).includes(runName('n1', 1)) ? true : undefined), 'the pinned upstream to get the file');
    t.pass('pinned: delivered');

    await via('ca', { 'upstream.ca_file': join(dir, 'ca.pem') }, 2);
    await until(async () => ((await readdir(rootIncoming)).includes(runName('n1', 2)) ? true : undefined), 'the CA-checked upstream to get the file');
    t.pass('CA: delivered');

    // Pinning checks the certificate, not the name: a node certificate (subject UID=…, no
    // host name at all) pinned by the edge is enough, as RUDDER's cert_pinning does.
    const id = createNodeIdentity('upstream-relay');
    await writeFile(join(dir, 'node.pem'), id.certPem);
    await writeFile(join(dir, 'node.key'), id.keyPem);
    const nodeRoot = await startTestRelay(t, { 'tls.cert_file': join(dir, 'node.pem'), 'tls.key_file': join(dir, 'node.key') }, { dir: join(dir, 'node-root') });
    const edge = await startTestRelay(t, { 'upstream.url': nodeRoot.url, 'upstream.pinned_cert_file': join(dir, 'node.pem') }, { dir: join(dir, 'node-edge') });
    t.equal((await fetch(`${edge.url}/reports/${encodeURIComponent(runName('n1', 5))}`, { method: 'PUT', body: 'x' })).status, 201);
    await until(async () => ((await readdir(join(dir, 'node-root', 'spool', 'incoming', 'reports'))).includes(runName('n1', 5)) ? true : undefined), 'delivery to a pinned upstream without a host name');
    t.pass('pinned node certificate: delivered');

    const wrong = await via('wrong-pin', { 'upstream.pinned_cert_file': join(dir, 'other.pem') }, 3);
    const status = await until(async () => {
      const s = ((await (await fetch(`${wrong.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
      return s.upstream.state === 'down' ? s : undefined;
    }, 'the wrong pin to be refused');
    t.match(status.upstream.details, /certificate|self.signed|verify/i, 'status says why');
    t.notOk((await readdir(rootIncoming)).includes(runName('n1', 3)), 'nothing sent to an upstream that is not the pinned one');
    t.equal(status.spool.incoming.reports, 1, 'the file waits in the spool');

    const wrongCa = await via('wrong-ca', { 'upstream.ca_file': join(dir, 'other.pem') }, 4);
    await until(async () => {
      const s = ((await (await fetch(`${wrongCa.url}/rudder/relay-api/1/system/status`)).json()) as any).data;
      return s.upstream.state === 'down' ? s : undefined;
    }, 'the wrong CA to be refused');
    t.notOk((await readdir(rootIncoming)).includes(runName('n1', 4)));
  });
}
