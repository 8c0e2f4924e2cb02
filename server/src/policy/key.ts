/**
 * The server's ed25519 policy key: made at first start in <data-dir>/policy-key.pem (0600) and
 * kept. Every bundle is signed with it; agents pin its public key (docs/policy.md).
 *
 * Rotation (`capstan-server policy-key rotate`, `POST /api/1/keys/policy/rotate`): a new key
 * becomes active and the old one endorses it; the endorsements accumulate in
 * <data-dir>/policy-key-chain.json and go out with every bundle, so an agent that pinned any
 * earlier key follows the chain to the new one (shared/src/policy/keys.ts). The chain is written
 * before the key, so whoever reads a new key finds its endorsement already there.
 *
 * Servers sharing a database must share these two files (the same data directory contents, or
 * copies kept in step): each process signs with the key in its own data directory. A running
 * server notices a rotation made by the CLI (or on another server's shared storage) within
 * RELOAD_CHECK_MS: it checks the key file's identity at most that often.
 */
import { createPrivateKey, createPublicKey, generateKeyPairSync, randomBytes } from 'node:crypto';
import { readFileSync, statSync } from 'node:fs';
import { chmod, readFile, rename, rm, writeFile } from 'node:fs/promises';
import { join } from 'node:path';
import { capstanError } from '@capstan/shared/errors';
import { policyKeyId } from '@capstan/shared/policy/bundle';
import { endorseKey, type KeyEndorsement } from '@capstan/shared/policy/keys';

export interface PolicyKey {
  privateKeyPem: string;
  publicKeyPem: string;
  keyId: string;
}

export const POLICY_KEY_FILE = 'policy-key.pem';
export const POLICY_KEY_CHAIN_FILE = 'policy-key-chain.json';
export const RELOAD_CHECK_MS = 2000;

export function policyKeyFrom(privateKeyPem: string): PolicyKey {
  let priv;
  try {
    priv = createPrivateKey(privateKeyPem);
  } catch (err) {
    throw capstanError('ERR_STARTUP', 'policy key file is not a PEM private key', { cause: err });
  }
  if (priv.asymmetricKeyType !== 'ed25519') throw capstanError('ERR_STARTUP', `policy key must be ed25519, not ${priv.asymmetricKeyType}`);
  const pub = createPublicKey(priv);
  return { privateKeyPem, publicKeyPem: pub.export({ type: 'spki', format: 'pem' }).toString(), keyId: policyKeyId(pub) };
}

function parseChain(text: string | null): KeyEndorsement[] {
  if (text === null) return [];
  const v = JSON.parse(text) as unknown;
  if (!Array.isArray(v)) throw capstanError('ERR_STARTUP', `${POLICY_KEY_CHAIN_FILE} is not a JSON array`);
  return v as KeyEndorsement[];
}

const stampOf = (path: string): string => {
  const s = statSync(path);
  return `${s.ino}:${s.mtimeMs}:${s.size}`;
};

/** The active policy key and its endorsement chain, re-read when the key file changes. */
export class PolicyKeyring implements PolicyKey {
  private key: PolicyKey;
  private chain: KeyEndorsement[];
  private stamp: string;
  private checkedAt = Date.now();
  private rotating: Promise<unknown> = Promise.resolve();

  private constructor(private readonly dataDir: string, key: PolicyKey, chain: KeyEndorsement[], stamp: string) {
    this.key = key;
    this.chain = chain;
    this.stamp = stamp;
  }

  private get keyPath(): string {
    return join(this.dataDir, POLICY_KEY_FILE);
  }

  private get chainPath(): string {
    return join(this.dataDir, POLICY_KEY_CHAIN_FILE);
  }

  static async open(dataDir: string): Promise<PolicyKeyring> {
    const keyPath = join(dataDir, POLICY_KEY_FILE);
    const key = policyKeyFrom(await readFile(keyPath, 'utf8'));
    const chain = parseChain(await readFile(join(dataDir, POLICY_KEY_CHAIN_FILE), 'utf8').catch(() => null));
    return new PolicyKeyring(dataDir, key, chain, stampOf(keyPath));
  }

  /** Pick up a rotation made by another process (cheap: one stat every RELOAD_CHECK_MS). */
  private fresh(): PolicyKey {
    const now = Date.now();
    if (now - this.checkedAt < RELOAD_CHECK_MS) return this.key;
    this.checkedAt = now;
    try {
      const stamp = stampOf(this.keyPath);
      if (stamp !== this.stamp) {
        const key = policyKeyFrom(readFileSync(this.keyPath, 'utf8'));
        let chain: KeyEndorsement[] = [];
        try {
          chain = parseChain(readFileSync(this.chainPath, 'utf8'));
        } catch {
          chain = [];
        }
        this.key = key;
        this.chain = chain;
        this.stamp = stamp;
      }
    } catch {
      // A key file mid-replacement or unreadable: keep signing with the key we have.
    }
    return this.key;
  }

  get privateKeyPem(): string {
    return this.fresh().privateKeyPem;
  }

  get publicKeyPem(): string {
    return this.fresh().publicKeyPem;
  }

  get keyId(): string {
    return this.fresh().keyId;
  }

  /** The active key and its chain, read together (a rotation cannot fall between them). */
  current(): PolicyKey & { endorsements: KeyEndorsement[] } {
    const k = this.fresh();
    return { ...k, endorsements: this.chain };
  }

  /** Endorsements from the first key to the active one. */
  endorsements(): KeyEndorsement[] {
    this.fresh();
    return this.chain;
  }

  /** Make a new key active, endorsed by the current one. */
  rotate(now: Date = new Date()): Promise<{ key_id: string; previous_key_id: string; endorsement: KeyEndorsement }> {
    const run = async () => {
      // Rotate from what is on disk now, not from a copy another process has since replaced.
      this.checkedAt = 0;
      const previous = this.fresh();
      const { privateKey } = generateKeyPairSync('ed25519');
      const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
      const next = policyKeyFrom(pem);
      const endorsement = endorseKey(previous.privateKeyPem, next.publicKeyPem, now);
      const chain = [...this.chain, endorsement];
      const tag = randomBytes(4).toString('hex');
      const keyTmp = `${this.keyPath}.${tag}.tmp`;
      const chainTmp = `${this.chainPath}.${tag}.tmp`;
      try {
        await writeFile(keyTmp, pem, { mode: 0o600, flag: 'wx' });
        await writeFile(chainTmp, `${JSON.stringify(chain, null, 1)}\n`, { mode: 0o644, flag: 'wx' });
        await rename(chainTmp, this.chainPath);
        await rename(keyTmp, this.keyPath);
      } finally {
        await rm(keyTmp, { force: true });
        await rm(chainTmp, { force: true });
      }
      this.key = next;
      this.chain = chain;
      this.stamp = stampOf(this.keyPath);
      return { key_id: next.keyId, previous_key_id: previous.keyId, endorsement };
    };
    const p = this.rotating.then(run, run);
    this.rotating = p.catch(() => undefined);
    return p;
  }
}

/** Read the key, or make it when absent. 'wx' so two servers starting at once keep one key. */
export async function ensurePolicyKey(dataDir: string): Promise<PolicyKeyring> {
  const path = join(dataDir, POLICY_KEY_FILE);
  try {
    return await PolicyKeyring.open(dataDir);
  } catch (err) {
    if ((err as NodeJS.ErrnoException).code !== 'ENOENT') throw err;
  }
  const { privateKey } = generateKeyPairSync('ed25519');
  const pem = privateKey.export({ type: 'pkcs8', format: 'pem' }).toString();
  await writeFile(path, pem, { mode: 0o600, flag: 'wx' }).catch((err: NodeJS.ErrnoException) => {
    if (err.code !== 'EEXIST') throw err;
  });
  // The umask cannot widen 0600, but a pre-existing file's mode is what it is: say so at start.
  await chmod(path, 0o600);
  return PolicyKeyring.open(dataDir);
}
