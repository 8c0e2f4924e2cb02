/**
 * Which listen addresses count as loopback (plain HTTP allowed without tls.allow_plaintext), and
 * the [tls] section's checks across keys, shared by relayd and server.
 */
import t from 'tap';
import { checkListenerTlsConfig, isLoopbackHost } from '@capstan/toolkit';

const tls = (over: Partial<{ cert_file: string; key_file: string; min_version: string; allow_plaintext: boolean }> = {}) => ({
  cert_file: '', key_file: '', min_version: 'TLSv1.2', allow_plaintext: false, ...over,
});

t.test('loopback hosts', async (t) => {
  for (const h of ['127.0.0.1', '127.255.0.9', 'localhost', 'LOCALHOST', 'api.localhost', '::1', '0:0:0:0:0:0:0:1', '::ffff:127.0.0.1']) {
    t.ok(isLoopbackHost(h), `${h} is loopback`);
  }
  for (const h of ['0.0.0.0', '::', '10.0.0.1', '128.0.0.1', '::ffff:10.0.0.1', 'example.org', 'localhost.example.org', '::2', '1::1', '']) {
    t.notOk(isLoopbackHost(h), `${h} is not loopback`);
  }
});

t.test('a plaintext listener off loopback is refused with ERR_PLAINTEXT_LISTEN unless allowed', async (t) => {
  for (const listen of ['0.0.0.0:3031', '[::]:3031', '10.1.2.3:443', 'relay.example.org:3030']) {
    t.throws(() => checkListenerTlsConfig(tls(), listen), { code: 'ERR_PLAINTEXT_LISTEN' }, listen);
    t.doesNotThrow(() => checkListenerTlsConfig(tls({ allow_plaintext: true }), listen), `${listen} allowed`);
    t.doesNotThrow(() => checkListenerTlsConfig(tls({ cert_file: '/c', key_file: '/k' }), listen), `${listen} with TLS`);
  }
  for (const listen of ['127.0.0.1:0', '[::1]:3031', 'localhost:3030']) t.doesNotThrow(() => checkListenerTlsConfig(tls(), listen), listen);
  t.throws(() => checkListenerTlsConfig(tls({ cert_file: '/c' }), '127.0.0.1:0'), { code: 'ERR_CONFIG' }, 'a certificate without its key');
  t.throws(() => checkListenerTlsConfig(tls({ min_version: 'TLSv1.1' }), '127.0.0.1:0'), { code: 'ERR_CONFIG' }, 'TLS 1.1 as minimum');
});
