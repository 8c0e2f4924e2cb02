import { generateKeyPairSync } from 'node:crypto';
import fc from 'fast-check';
import t from 'tap';
import { canonicalJson } from '@capstan/shared/policy/bundle';
import { computeConfigId, policyKeyId, signBundle, verifyBundle, type BundleDirective, type PolicyBundle } from '@capstan/shared';

const keys = () => {
  const { privateKey, publicKey } = generateKeyPairSync('ed25519');
  return { priv: privateKey.export({ type: 'pkcs8', format: 'pem' }).toString(), pub: publicKey.export({ type: 'spki', format: 'pem' }).toString() };
};
const server = keys();
const other = keys();
const directives: BundleDirective[] = [
  { id: 'd1', name: 'motd', method: 'file_content', params: { path: '/etc/motd', content: 'hi' }, mode: 'enforce', rule_id: 'r1' },
];
const bundle: PolicyBundle = { node_id: 'n1', config_id: computeConfigId(directives), generated_at: '2026-11-22T00:00:00Z', directives };
const pinned = { keyId: policyKeyId(server.pub), publicKeyPem: server.pub };

t.test('a bundle signed by the pinned key verifies and round-trips', async (t) => {
  const signed = signBundle(bundle, server.priv, { includePublicKey: true });
  t.match(signed.signature, /^[0-9a-f]{128}$/);
  t.equal(signed.key_id, pinned.keyId);
  t.same(verifyBundle(signed, pinned, 'n1'), bundle);
});

t.test('anything else is refused with its code', async (t) => {
  const signed = signBundle(bundle, server.priv);
  const flipped = Buffer.from(signed.policy, 'base64');
  flipped[flipped.length - 3] ^= 1;
  t.throws(() => verifyBundle({ ...signed, policy: flipped.toString('base64') }, pinned, 'n1'), { code: 'ERR_POLICY_SIGNATURE' }, 'one byte altered');
  t.throws(() => verifyBundle(signBundle(bundle, other.priv), pinned, 'n1'), { code: 'ERR_POLICY_SIGNATURE' }, 'another key');
  const forged = signBundle(bundle, other.priv);
  t.throws(() => verifyBundle({ ...forged, key_id: pinned.keyId }, pinned, 'n1'), { code: 'ERR_POLICY_SIGNATURE' }, 'another key claiming the pinned id');
  t.throws(() => verifyBundle(signed, pinned, 'n2'), { code: 'ERR_POLICY_NODE_MISMATCH' }, "another node's bundle");
  t.throws(() => verifyBundle({ policy: 'x' }, pinned, 'n1'), { code: 'ERR_POLICY_INVALID' });
  t.throws(() => verifyBundle(null, pinned, 'n1'), { code: 'ERR_POLICY_INVALID' });
  const badShape = signBundle({ ...bundle, directives: [{ ...directives[0]!, mode: 'sometimes' as 'audit' }] }, server.priv);
  t.throws(() => verifyBundle(badShape, pinned, 'n1'), { code: 'ERR_POLICY_INVALID' });
});

t.test('config id changes when and only when the content changes', async (t) => {
  const same = computeConfigId([{ ...directives[0]!, params: { content: 'hi', path: '/etc/motd' } }]);
  t.equal(same, bundle.config_id, 'key order does not matter');
  t.not(computeConfigId([{ ...directives[0]!, params: { path: '/etc/motd', content: 'ho' } }]), bundle.config_id);
  t.not(computeConfigId([{ ...directives[0]!, mode: 'audit' }]), bundle.config_id);
  t.not(computeConfigId([{ ...directives[0]!, rule_id: 'r2' }]), bundle.config_id);
  // The agent applies directives in bundle order: another order is another policy.
  const second: BundleDirective = { id: 'd2', name: 'dir', method: 'directory_present', params: { path: '/etc/x' }, mode: 'enforce', rule_id: 'r1' };
  t.not(computeConfigId([directives[0]!, second]), computeConfigId([second, directives[0]!]), 'order counts');
  t.equal(computeConfigId([directives[0]!, second]), computeConfigId([{ ...directives[0]! }, { ...second }]), 'equal content, equal id');
});

/** Canonical JSON as defined: keys sorted, undefined members left out, arrays in order. */
function definition(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(definition).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v).sort().filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${definition((v as Record<string, unknown>)[k])}`).join(',')}}`;
  }
  return JSON.stringify(v);
}

t.test('canonical JSON, which config ids hash, is its definition for any value', async (t) => {
  // Any JSON, with members and items left undefined now and then (a directive's optional fields).
  const value = fc.letrec((tie) => ({
    v: fc.oneof({ depthSize: 'small' }, fc.jsonValue({ maxDepth: 2 }), fc.constant(undefined), fc.array(tie('v'), { maxLength: 5 }),
      fc.dictionary(fc.string({ maxLength: 6 }), tie('v'), { maxKeys: 6 })),
  })).v;
  fc.assert(fc.property(value, (v) => canonicalJson(v) === definition(v)), { numRuns: 3000 });
  t.equal(canonicalJson({ b: [1, undefined, { d: undefined, c: 'x' }], a: null }), '{"a":null,"b":[1,,{"c":"x"}]}');
  t.equal(canonicalJson([]), '[]');
  t.equal(canonicalJson({}), '{}');
});

t.test('method parameters are validated on the server with the agent’s own rules', async (t) => {
  const { validateMethodParams, expectedComponents } = await import('@capstan/shared');
  t.same(validateMethodParams('file_content', { path: '/etc/motd', content: 'x' }), { path: '/etc/motd', content: 'x' });
  t.throws(() => validateMethodParams('file_content', { path: 'etc/motd', content: 'x' }), { code: 'ERR_METHOD_PARAMS', message: /path/ });
  t.throws(() => validateMethodParams('no_such_method', {}), { code: 'ERR_METHOD_PARAMS', message: /unknown method/ });
  t.throws(() => validateMethodParams('command_run', { command: 'rm' }), { code: 'ERR_METHOD_PARAMS', message: /creates/ });
  t.throws(() => validateMethodParams('sysctl_value', []), { code: 'ERR_METHOD_PARAMS' });
  t.same(expectedComponents('file_line_present', { path: '/etc/hosts', line: '1.2.3.4 a' }), [{ component: 'File line', key: '/etc/hosts: 1.2.3.4 a' }]);
  t.same(expectedComponents('command_check', { command: 'test', args: ['-f', '/x'] }), [{ component: 'Command check', key: 'test -f /x' }]);
  t.same(expectedComponents('file_content', { path: 1 }), [{ component: 'file_content', key: 'invalid parameters' }]);
});

t.test('every method that writes files takes show_diff, a boolean, and names it when refused', async (t) => {
  const { validateMethodParams, METHOD_SPECS } = await import('@capstan/shared');
  const sha = 'a'.repeat(64);
  const base: Record<string, Record<string, unknown>> = {
    file_content: { path: '/etc/motd', content: 'x' },
    file_line_present: { path: '/etc/hosts', line: '1.2.3.4 a' },
    file_absent: { path: '/etc/old' },
    file_permissions: { path: '/etc/motd', mode: '0644' },
    directory_present: { path: '/srv/app' },
    file_from_shared_folder: { source: 'f.conf', path: '/etc/f.conf', sha256: sha },
    archive_from_shared_folder: { source: 'web.tar.gz', sha256: sha, sums_sha256: sha, target: '/srv' },
  };
  for (const [method, params] of Object.entries(base)) {
    const spec = METHOD_SPECS.get(method)!;
    t.equal(spec.validate(params).show_diff, undefined, `${method}: absent stays absent`);
    for (const v of [true, false]) t.equal(spec.validate({ ...params, show_diff: v }).show_diff, v, `${method}: ${v}`);
    for (const bad of ['false', 0, null]) {
      t.throws(() => validateMethodParams(method, { ...params, show_diff: bad }), {
        code: 'ERR_METHOD_PARAMS', message: `${method}: show_diff must be true or false`, details: { field: 'show_diff' },
      }, `${method}: ${JSON.stringify(bad)}`);
    }
  }
});
