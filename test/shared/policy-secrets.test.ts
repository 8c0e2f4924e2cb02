/**
 * Sealed secrets (shared/src/policy/secrets.ts): only the node's key opens a value sealed for it,
 * an altered one does not open, the signed bundle a relay holds never contains the plaintext,
 * markers are filled in (HTML-escaped where the template escaped) and the redactor takes every
 * form of a value out of text.
 */
import { generateKeyPairSync } from 'node:crypto';
import t from 'tap';
import {
  computeConfigId, markedSecrets, openSealed, policyKeyId, Redactor, REDACTED, renderParams, sealForNode, SecretRef, secretMarker, signBundle,
  substituteSecrets, verifyBundle, type PolicyBundle,
} from '@capstan/shared';

const rsa = () => {
  const { privateKey, publicKey } = generateKeyPairSync('rsa', { modulusLength: 2048 });
  return { key: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), pub: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
};
const node = rsa();
const other = rsa();
const SECRET = 'hunter2 <&> "quoted"';

t.test('a value sealed for a node opens with its key only, and not once altered', async (t) => {
  const sealed = sealForNode(SECRET, node.pub);
  t.equal(openSealed(sealed, node.key), SECRET);
  t.not(sealForNode(SECRET, node.pub).data, sealed.data, 'a fresh key each time');
  t.throws(() => openSealed(sealed, other.key), { code: 'ERR_SECRET' }, 'another node key');
  const flipped = Buffer.from(sealed.data, 'base64');
  flipped[0]! ^= 1;
  t.throws(() => openSealed({ ...sealed, data: flipped.toString('base64') }, node.key), { code: 'ERR_SECRET' }, 'altered ciphertext');
  t.throws(() => openSealed({ ...sealed, tag: sealed.iv }, node.key), { code: 'ERR_SECRET' }, 'a wrong tag');
  t.throws(() => openSealed({ nope: 1 }, node.key), { code: 'ERR_SECRET' });
  t.throws(() => sealForNode('x'.repeat(70_000), node.pub), { code: 'ERR_SECRET' }, 'a value over the limit');
});

t.test('relays see no plaintext: the signed bundle carries the marker and the sealed value', async (t) => {
  const rendered = renderParams({ path: '/etc/app.conf', content: 'password={{node.properties.db_pw}}\n' }, { node: { properties: { db_pw: new SecretRef('db_pw') } } });
  t.same(rendered.secrets, ['db_pw']);
  const directives = [{ id: 'app', name: 'app', method: 'file_content', params: rendered.params, mode: 'enforce' as const, rule_id: 'r' }];
  const secrets = { db_pw: sealForNode(SECRET, node.pub) };
  const bundle: PolicyBundle = { node_id: 'n1', config_id: computeConfigId(directives, { secrets }), generated_at: 'x', directives, secrets };
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  const pub = publicKey.export({ type: 'spki', format: 'pem' }).toString();
  const signed = signBundle(bundle, privateKey.export({ type: 'pkcs8', format: 'pem' }).toString());
  const wire = JSON.stringify(signed);
  const decoded = Buffer.from(signed.policy, 'base64').toString('utf8');
  for (const text of [wire, decoded]) {
    t.notOk(text.includes('hunter2'), 'no plaintext');
    t.notOk(text.includes(Buffer.from(SECRET).toString('base64')), 'not even in base64');
  }
  const verified = verifyBundle(signed, { keyId: policyKeyId(pub), publicKeyPem: pub }, 'n1');
  t.same([...markedSecrets(verified.directives[0]!.params)], ['db_pw']);
  const filled = substituteSecrets(verified.directives[0]!.params, new Map([['db_pw', openSealed(verified.secrets!.db_pw, node.key)]]));
  t.equal(filled.content, `password=${SECRET}\n`);
});

t.test('markers: raw or HTML-escaped; a marker whose secret is missing is an error', async (t) => {
  const values = new Map([['pw', SECRET]]);
  t.equal(substituteSecrets(`a ${secretMarker('pw')} b`, values), `a ${SECRET} b`);
  t.equal(substituteSecrets(secretMarker('pw', 'html'), values), 'hunter2 &lt;&amp;&gt; &quot;quoted&quot;');
  t.same(substituteSecrets({ l: [secretMarker('pw'), 1] }, values), { l: [SECRET, 1] });
  t.throws(() => substituteSecrets(secretMarker('other'), values), { code: 'ERR_SECRET' });
  t.equal(substituteSecrets('secret:pw without its marker characters', values), 'secret:pw without its marker characters', 'ordinary text is never a marker');
});

t.test('the redactor takes out the value, its HTML and its JSON forms', async (t) => {
  const r = new Redactor();
  t.equal(r.redact('nothing to hide'), 'nothing to hide');
  r.add(SECRET);
  r.add('');
  t.equal(r.redact(`error: ${SECRET} refused`), `error: ${REDACTED} refused`);
  t.equal(r.redact(JSON.stringify({ m: SECRET })), `{"m":"${REDACTED}"}`);
  t.equal(r.redact('hunter2 &lt;&amp;&gt; &quot;quoted&quot;'), REDACTED);
});
