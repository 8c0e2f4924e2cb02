/**
 * Policy bundles: what a node applies, signed by the server's ed25519 policy key so that no relay
 * in between can change it (Choria's signed-specification convention):
 *   { "policy": <base64 of the bundle JSON>, "signature": <hex ed25519 over the base64 text>,
 *     "key_id": <id of the signing key>, "public_key"?: <PEM, for first-contact pinning> }
 */
import { createHash, createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { capstanError } from '../errors.js';
import type { KeyEndorsement } from './keys.js';

export type DirectiveMode = 'enforce' | 'audit';

export interface Directive {
  id: string;
  name: string;
  method: string;
  params: Record<string, unknown>;
  mode: DirectiveMode;
  condition?: string;
}

/** A directive as a node receives it: tagged with the rule that brought it. */
export interface BundleDirective extends Directive {
  rule_id: string;
}

export interface PolicyBundle {
  node_id: string;
  config_id: string;
  generated_at: string;
  directives: BundleDirective[];
}

export interface SignedBundle {
  policy: string;
  signature: string;
  key_id: string;
  public_key?: string;
  /** After key rotations: each key endorsed by the one before it (keys.ts), for agents that pinned an older key. */
  endorsements?: KeyEndorsement[];
}

/** JSON with sorted keys, so equal content always hashes equal. */
export function canonicalJson(v: unknown): string {
  if (Array.isArray(v)) return `[${v.map(canonicalJson).join(',')}]`;
  if (v && typeof v === 'object') {
    return `{${Object.keys(v as object)
      .sort()
      .filter((k) => (v as Record<string, unknown>)[k] !== undefined)
      .map((k) => `${JSON.stringify(k)}:${canonicalJson((v as Record<string, unknown>)[k])}`)
      .join(',')}}`;
  }
  return JSON.stringify(v);
}

/**
 * The config id changes when, and only when, the node's effective directives change, their
 * order included: the agent applies them in bundle order (a directory before the file in it).
 * Hashing a sorted copy once gave a reordered rule the old config id, so nodes kept the old order
 * while newly generated ones got the new one under the same id. Key order inside objects does
 * not count (canonical JSON).
 */
export function computeConfigId(directives: BundleDirective[]): string {
  return createHash('sha256').update(canonicalJson(directives)).digest('hex').slice(0, 16);
}

/** The key id of a policy public key: first 16 hex of the sha256 of its SPKI DER. */
export function policyKeyId(publicKey: KeyObject | string): string {
  const key = typeof publicKey === 'string' ? createPublicKey(publicKey) : publicKey;
  return createHash('sha256').update(key.export({ type: 'spki', format: 'der' })).digest('hex').slice(0, 16);
}

export function signBundle(bundle: PolicyBundle, privateKeyPem: string, opts: { includePublicKey?: boolean; endorsements?: KeyEndorsement[] } = {}): SignedBundle {
  const priv = createPrivateKey(privateKeyPem);
  const pub = createPublicKey(priv);
  const policy = Buffer.from(JSON.stringify(bundle)).toString('base64');
  const out: SignedBundle = {
    policy,
    signature: sign(null, Buffer.from(policy, 'ascii'), priv).toString('hex'),
    key_id: policyKeyId(pub),
  };
  if (opts.includePublicKey) out.public_key = pub.export({ type: 'spki', format: 'pem' }).toString();
  if (opts.endorsements?.length) out.endorsements = opts.endorsements;
  return out;
}

const bad = (msg: string) => capstanError('ERR_POLICY_INVALID', msg);

function checkDirective(d: unknown, i: number): BundleDirective {
  if (!d || typeof d !== 'object') throw bad(`directives[${i}] must be an object`);
  const x = d as Record<string, unknown>;
  for (const f of ['id', 'name', 'method', 'rule_id'] as const) {
    if (typeof x[f] !== 'string' || (x[f] as string).length === 0) throw bad(`directives[${i}].${f} must be a non-empty string`);
  }
  if (x.mode !== 'enforce' && x.mode !== 'audit') throw bad(`directives[${i}].mode must be enforce or audit`);
  if (!x.params || typeof x.params !== 'object' || Array.isArray(x.params)) throw bad(`directives[${i}].params must be an object`);
  if (x.condition !== undefined && typeof x.condition !== 'string') throw bad(`directives[${i}].condition must be a string`);
  return x as unknown as BundleDirective;
}

/**
 * Verify a signed bundle with the pinned public key and return its content. Refuses a wrong key
 * id, a bad signature, a bundle for another node, or a malformed bundle, each with its code.
 */
export function verifyBundle(signed: unknown, pinned: { keyId: string; publicKeyPem: string }, nodeId: string): PolicyBundle {
  if (!signed || typeof signed !== 'object') throw bad('signed bundle must be an object');
  const s = signed as Record<string, unknown>;
  if (typeof s.policy !== 'string' || typeof s.signature !== 'string' || typeof s.key_id !== 'string') {
    throw bad('signed bundle needs policy, signature and key_id strings');
  }
  if (s.key_id !== pinned.keyId) throw capstanError('ERR_POLICY_SIGNATURE', `bundle signed by key ${s.key_id}, pinned key is ${pinned.keyId}`);
  if (!/^[0-9a-f]{128}$/.test(s.signature)) throw capstanError('ERR_POLICY_SIGNATURE', 'signature is not 64 hex bytes');
  const ok = verify(null, Buffer.from(s.policy, 'ascii'), createPublicKey(pinned.publicKeyPem), Buffer.from(s.signature, 'hex'));
  if (!ok) throw capstanError('ERR_POLICY_SIGNATURE', 'bundle signature does not verify');
  let bundle: unknown;
  try {
    bundle = JSON.parse(Buffer.from(s.policy, 'base64').toString('utf8'));
  } catch {
    throw bad('bundle is not base64 JSON');
  }
  const b = bundle as Record<string, unknown>;
  if (!b || typeof b !== 'object' || !Array.isArray(b.directives)) throw bad('bundle needs a directives array');
  if (typeof b.config_id !== 'string' || typeof b.node_id !== 'string') throw bad('bundle needs node_id and config_id');
  if (b.node_id !== nodeId) throw capstanError('ERR_POLICY_NODE_MISMATCH', `bundle is for node ${b.node_id}, not ${nodeId}`);
  b.directives.forEach(checkDirective);
  return b as unknown as PolicyBundle;
}
