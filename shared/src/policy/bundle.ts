/**
 * Policy bundles: what a node applies, signed by the server's ed25519 policy key so that no relay
 * in between can change it (Choria's signed-specification convention):
 *   { "policy": <base64 of the bundle JSON>, "signature": <hex ed25519 over the base64 text>,
 *     "key_id": <id of the signing key>, "public_key"?: <PEM, for first-contact pinning> }
 */
import { createHash, createPrivateKey, createPublicKey, sign, verify, type KeyObject } from 'node:crypto';
import { capstanError } from '../errors.js';
import { parseCondition } from './condition.js';
import type { KeyEndorsement } from './keys.js';
import { isSealed, SECRET_LIMITS, SECRET_NAME, type SealedSecret } from './secrets.js';

export type DirectiveMode = 'enforce' | 'audit';

export interface Directive {
  id: string;
  name: string;
  method: string;
  params: Record<string, unknown>;
  mode: DirectiveMode;
  condition?: string;
  /** The technique a `method: "technique"` directive instantiates (its `params` are the values). */
  technique?: { id: string; version: string };
}

/**
 * One method call of a technique as a node receives it: loops expanded, parameters rendered.
 * `component` is what its reports are filed under; `if` is a result condition (condition.ts).
 */
export interface TechniqueCall {
  id: string;
  component: string;
  method: string;
  params: Record<string, unknown>;
  condition?: string;
  if?: string;
  mode?: DirectiveMode;
}

/** The `method` of a directive that instantiates a technique; its `calls` are what runs. */
export const TECHNIQUE_METHOD = 'technique';

/**
 * A directive as a node receives it: tagged with the rule that brought it. A technique's
 * directive carries `technique`, `calls` and, in `params`, the instance's parameter values.
 * `secrets`: the sealed secrets its rendered params use (see also the bundle's).
 */
export interface BundleDirective extends Directive {
  rule_id: string;
  technique?: { id: string; version: string };
  calls?: TechniqueCall[];
  secrets?: Record<string, SealedSecret>;
}

export interface PolicyBundle {
  node_id: string;
  config_id: string;
  generated_at: string;
  /**
   * The node's bundle generation (docs/policy.md, Rollback): signed with the rest, it only grows
   * for a node, and an agent never applies one lower than the highest it applied. Absent from
   * bundles of servers older than it.
   */
  generation?: number;
  directives: BundleDirective[];
  /** The node's effective properties that are not secret: what conditions read as `node.properties`. */
  properties?: Record<string, unknown>;
  /** Sealed secrets any directive's rendered params may use (secrets.ts). */
  secrets?: Record<string, SealedSecret>;
}

/** Most calls one technique directive may expand to (loops included). */
export const MAX_BUNDLE_CALLS = 2000;

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
  // One string built as it goes: sorting, filtering, mapping and joining made four arrays per
  // object, and a generation makes the canonical JSON of every directive rendered for a node.
  if (v === null || typeof v !== 'object') return JSON.stringify(v);
  if (Array.isArray(v)) {
    let out = '[';
    for (let i = 0; i < v.length; i++) out += `${i === 0 ? '' : ','}${canonicalJson(v[i]) ?? ''}`;
    return `${out}]`;
  }
  const o = v as Record<string, unknown>;
  let out = '{';
  for (const k of Object.keys(o).sort()) {
    const x = o[k];
    if (x === undefined) continue;
    out += `${out.length === 1 ? '' : ','}${JSON.stringify(k)}:${canonicalJson(x)}`;
  }
  return `${out}}`;
}

/**
 * The config id changes when, and only when, the node's effective directives change, their
 * order included: the agent applies them in bundle order (a directory before the file in it).
 * Hashing a sorted copy once gave a reordered rule the old config id, so nodes kept the old order
 * while newly generated ones got the new one under the same id. Key order inside objects does
 * not count (canonical JSON).
 */
export function computeConfigId(directives: BundleDirective[], extra: Pick<PolicyBundle, 'properties' | 'secrets'> = {}): string {
  return configIdOfCanonical(canonicalJson(directives), extra);
}

/**
 * computeConfigId from the directives' canonical JSON, made by the caller (a generation makes
 * each directive's shared by many nodes once): `[` + each directive's canonicalJson joined by
 * `,` + `]`.
 */
export function configIdOfCanonical(directivesCanonical: string, extra: Pick<PolicyBundle, 'properties' | 'secrets'> = {}): string {
  // Without properties or secrets the hash is the directives' alone, as it always was: an
  // upgraded server gives unchanged nodes their old config ids. Sealing is randomised, so a server
  // keeps a node's sealed value until its plaintext or the node's key changes.
  const has = (o?: object) => o !== undefined && Object.keys(o).length > 0;
  let text = directivesCanonical;
  if (has(extra.properties) || has(extra.secrets)) {
    // canonicalJson({ directives, properties, secrets }): keys in that (sorted) order, undefined left out.
    text = `{"directives":${directivesCanonical}`;
    if (extra.properties !== undefined) text += `,"properties":${canonicalJson(extra.properties)}`;
    if (extra.secrets !== undefined) text += `,"secrets":${canonicalJson(extra.secrets)}`;
    text += '}';
  }
  return createHash('sha256').update(text).digest('hex').slice(0, 16);
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
  if (x.secrets !== undefined) checkSecrets(x.secrets, `directives[${i}].secrets`);
  if (x.method === TECHNIQUE_METHOD) checkTechniqueDirective(x, `directives[${i}]`);
  return x as unknown as BundleDirective;
}

const isObject = (v: unknown): v is Record<string, unknown> => !!v && typeof v === 'object' && !Array.isArray(v);

function checkSecrets(v: unknown, where: string): void {
  if (!isObject(v)) throw bad(`${where} must be an object`);
  const entries = Object.entries(v);
  if (entries.length > SECRET_LIMITS.maxSecrets) throw bad(`${where} holds more than ${SECRET_LIMITS.maxSecrets} secrets`);
  for (const [name, sealed] of entries) {
    if (!SECRET_NAME.test(name) || !isSealed(sealed)) throw bad(`${where}.${name} must be a sealed secret under a property name`);
  }
}

/** A technique's directive: its technique's id and version, and calls each shaped as TechniqueCall. */
function checkTechniqueDirective(x: Record<string, unknown>, where: string): void {
  const t = x.technique as Record<string, unknown> | undefined;
  if (!isObject(t) || typeof t.id !== 'string' || typeof t.version !== 'string') throw bad(`${where}.technique must be {id, version}`);
  if (!Array.isArray(x.calls) || x.calls.length === 0 || x.calls.length > MAX_BUNDLE_CALLS) throw bad(`${where}.calls must be a list of 1 to ${MAX_BUNDLE_CALLS} calls`);
  const ids = new Set<string>();
  x.calls.forEach((c: unknown, j) => {
    const at = `${where}.calls[${j}]`;
    if (!isObject(c)) throw bad(`${at} must be an object`);
    for (const f of ['id', 'component', 'method'] as const) {
      if (typeof c[f] !== 'string' || (c[f] as string).length === 0) throw bad(`${at}.${f} must be a non-empty string`);
    }
    if (ids.has(c.id as string)) throw bad(`${at}.id ${c.id as string} is not unique`);
    ids.add(c.id as string);
    if (!isObject(c.params)) throw bad(`${at}.params must be an object`);
    if (c.mode !== undefined && c.mode !== 'enforce' && c.mode !== 'audit') throw bad(`${at}.mode must be enforce or audit`);
    if (c.condition !== undefined && typeof c.condition !== 'string') throw bad(`${at}.condition must be a string`);
    if (c.if !== undefined) {
      if (typeof c.if !== 'string') throw bad(`${at}.if must be a string`);
      // Parsed here so that an agent never meets a result condition it cannot read mid-run.
      try {
        parseCondition(c.if, { results: true });
      } catch (err) {
        throw bad(`${at}.if: ${(err as Error).message}`);
      }
    }
  });
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
  if (b.properties !== undefined && !isObject(b.properties)) throw bad('bundle properties must be an object');
  if (b.generation !== undefined && !(Number.isSafeInteger(b.generation) && (b.generation as number) >= 0)) throw bad('bundle generation must be a non-negative integer');
  if (b.secrets !== undefined) checkSecrets(b.secrets, 'secrets');
  return b as unknown as PolicyBundle;
}
