/**
 * What a bootstrap trusts: the agent configuration it writes pins the server's policy key (the
 * agent reads it as its configured key), and the relay URL an operator's job names is one the
 * server knows — `[bootstrap] relay_url`, `[bootstrap] allowed_relay_urls` or a registered relay's
 * host — or the job is refused 403 ERR_BOOTSTRAP_RELAY_URL; the admin role may name another.
 */
import { generateKeyPairSync } from 'node:crypto';
import { writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import t from 'tap';
import { agentConfigText } from '@capstan/server/bootstrap/runner';
import { knownRelayUrl } from '@capstan/server/bootstrap/relay-url';
import { configuredPolicyKey, loadAgentConfig } from '@capstan/agent/config';
import { serverWithApi } from '../helpers/admin-app.js';
import { adminClient } from '../helpers/programs.js';

const PEM = generateKeyPairSync('ed25519').publicKey.export({ type: 'spki', format: 'pem' }).toString();

t.test('the written configuration pins the policy key the agent then uses', async (t) => {
  const dir = t.testdir({});
  const path = join(dir, 'agent.toml');
  await writeFile(path, agentConfigText({ relayUrl: 'https://relay.example:3030', secret: 's'.repeat(32), installRoot: '', jobId: 'j1', policyKeyPem: PEM }));
  const config = loadAgentConfig({ path });
  t.equal(config.agent.relay, 'https://relay.example:3030');
  t.equal((await configuredPolicyKey(config, async () => 'unused'))?.trim(), PEM.trim(), 'the agent\'s configured key is the server\'s');
  await writeFile(path, '[policy]\npublic_key_pem = "not a key"\n');
  t.throws(() => loadAgentConfig({ path }), { code: 'ERR_CONFIG' }, 'an inline key that is no PEM is a configuration error');
  await writeFile(path, `[policy]\npublic_key = "/k.pem"\npublic_key_pem = ${JSON.stringify(PEM)}\n`);
  t.equal(await configuredPolicyKey(loadAgentConfig({ path }), async (p) => `file ${p}`), 'file /k.pem', 'a key file, when named, wins');
});

t.test('known relay URLs: configured, allowed, or a registered relay\'s host', async (t) => {
  const relays = [
    { id: 'r1', hostname: 'relay-eu.example', address: '192.0.2.7', relay: true, accepted: 'accepted' },
    { id: 'r2', hostname: 'gone.example', address: null, relay: true, accepted: 'refused' },
  ];
  const store = { listNodes: async () => ({ data: relays, total: relays.length }) } as never;
  const rules = { defaultUrl: 'https://relay.default:3030/', allowed: ['http://extra.example:3030'] };
  for (const url of ['https://relay.default:3030', 'http://EXTRA.example:3030/', 'https://relay-eu.example:3030', 'https://192.0.2.7', 'https://r1:3030']) {
    t.ok(await knownRelayUrl(store, url, rules), url);
  }
  for (const url of ['https://elsewhere.example:3030', 'https://gone.example:3030', 'http://relay.default:3030', 'not a url']) {
    t.notOk(await knownRelayUrl(store, url, rules), url);
  }
});

t.test('the API: an operator may name only a known relay URL; an admin any', async (t) => {
  const { server, api } = await serverWithApi(t, (dir) => ({
    'bootstrap.package_dir': dir, 'bootstrap.relay_url': 'https://relay.default:3030', 'bootstrap.allowed_relay_urls': ['https://extra.example:3030'],
  }));
  t.equal((await api('POST', '/api/1/managers', { id: 'lab', type: 'static', config: { hosts: [{ hostname: 'h1', address: '192.0.2.1' }] } })).status, 201);
  t.equal((await api('POST', '/api/1/managers/lab/poll')).status, 200);
  const nodeId = (await server.store.listNodes({ page: 1, per_page: 10 })).data[0]!.id;
  const made = await api('POST', '/api/1/admins', { name: 'ops', role: 'operator' });
  t.equal(made.status, 201);
  const operator = adminClient(server.url, made.json.data.token as string);
  const job = (relay_url?: string) => ({ name: 'b', type: 'bootstrap', nodes: [nodeId], ...(relay_url && { relay_url }) });

  const refused = await operator('POST', '/api/1/jobs', job('https://elsewhere.example:3030'));
  t.match(refused, { status: 403, json: { error: { code: 'ERR_BOOTSTRAP_RELAY_URL' } } }, 'an operator naming an unknown URL');
  t.equal((await api('GET', '/api/1/jobs')).json.data.length, 0, 'and no job was made');
  t.match(await operator('POST', '/api/1/jobs', job()), { status: 201, json: { data: { bootstrap: { relay_url: 'https://relay.default:3030' } } } }, 'the configured default');
  t.equal((await operator('POST', '/api/1/jobs', job('https://extra.example:3030'))).status, 201, 'an allowed URL');
  t.equal((await api('POST', '/api/1/jobs', job('https://elsewhere.example:3030'))).status, 201, 'the admin role may name another');
});
