/**
 * The nodes below this relay, from RUDDER's nodeslist.json (R/src/data/node.rs):
 * `{"<id>": {"hostname", "policy-server", "key-hash"?}}`. It decides routing (a file from a node
 * not in the list is refused for good, RUDDER's "invalid"), the shared-files key check, and which
 * connected sub-relay leads to a node for remote-run.
 */
import { readFile } from 'node:fs/promises';
import { capstanError } from '@capstan/shared/errors';

export interface KeyHash {
  algorithm: 'sha256' | 'sha512';
  /** The digest bytes. */
  value: Buffer;
}

export interface NodeEntry {
  id: string;
  hostname: string;
  policyServer: string;
  keyHash: KeyHash | null;
  /** A registered relay (`"relay": true`, a Capstan server's extension to RUDDER's format). */
  relay: boolean;
  /** Its tokens issued before this (epoch seconds) are revoked (`"tokens-after"`, same extension); 0: none. */
  tokensAfter: number;
}

/** Longest policy-server chain followed (RUDDER's bound): a loop in the file must not hang us. */
const MAX_HOPS = 20;

const DIGEST_BYTES = { sha256: 32, sha512: 64 } as const;

/** `sha256:<hex>` or `sha256//<base64>` (sha512 alike); anything else → null (RUDDER ignores it). */
export function parseKeyHash(text: unknown): KeyHash | null {
  if (typeof text !== 'string') return null;
  const m = /^(sha256|sha512)(?::([0-9a-fA-F]+)|\/\/([A-Za-z0-9+/]+={0,2}))$/.exec(text.trim());
  if (!m) return null;
  const algorithm = m[1] as KeyHash['algorithm'];
  const value = m[2] !== undefined ? Buffer.from(m[2], 'hex') : Buffer.from(m[3]!, 'base64');
  if (value.length !== DIGEST_BYTES[algorithm]) return null;
  if (m[2] !== undefined && m[2].length !== value.length * 2) return null;
  return { algorithm, value };
}

export class NodesList {
  private readonly nodes: ReadonlyMap<string, NodeEntry>;

  /** `null` nodes = no list configured: every node is accepted and routed upstream. */
  constructor(
    readonly myId: string,
    nodes: Map<string, NodeEntry> | null,
    /** Where it was read from, for system/status. */
    readonly source: string | null = null,
  ) {
    this.nodes = nodes ?? new Map();
    this.configured = nodes !== null;
  }

  readonly configured: boolean;

  get size(): number {
    return this.nodes.size;
  }

  get(id: string): NodeEntry | undefined {
    return this.nodes.get(id);
  }

  /** May this relay take files from `id`? Always, when no list is configured. */
  accepts(id: string): boolean {
    return !this.configured || this.nodes.has(id);
  }

  /** Nodes whose policy server is this relay (RUDDER's managed nodes; the root counts itself). */
  neighbours(): NodeEntry[] {
    return [...this.nodes.values()].filter((n) => n.policyServer === this.myId);
  }

  /**
   * The neighbour through which `id` is reached: `id` itself when it is a neighbour, else the
   * neighbour at the top of its policy-server chain. null when unknown or not below this relay.
   */
  nextHop(id: string): string | null {
    let cur = this.nodes.get(id);
    for (let hops = 0; cur && hops < MAX_HOPS; hops++) {
      if (cur.policyServer === this.myId) return cur.id;
      if (cur.policyServer === cur.id) return null; // another root
      cur = this.nodes.get(cur.policyServer);
    }
    return null;
  }

  /**
   * Whether `id` is a registered relay by this list: true/false when the list marks relays (a
   * Capstan server's list marks every registered relay, this relay included); null when it marks
   * none (RUDDER's nodeslist.json, an older server), which then says nothing either way.
   */
  isRelay(id: string): boolean | null {
    if (!this.marksRelays) return null;
    return this.nodes.get(id)?.relay === true;
  }

  /** Tokens of `id` issued before this (epoch seconds) were revoked by a forced renewal; 0: none known. */
  tokensAfter(id: string): number {
    return this.nodes.get(id)?.tokensAfter ?? 0;
  }

  private get marksRelays(): boolean {
    this.relayMarks ??= [...this.nodes.values()].some((n) => n.relay);
    return this.relayMarks;
  }

  private relayMarks: boolean | undefined;

  /** Neighbours that are someone's policy server: sub-relays. */
  subRelays(): NodeEntry[] {
    const servers = new Set([...this.nodes.values()].map((n) => n.policyServer));
    return this.neighbours().filter((n) => n.id !== this.myId && servers.has(n.id));
  }

  static empty(myId: string): NodesList {
    return new NodesList(myId, null);
  }

  /** Parse nodeslist.json text; a malformed file is an error (a wrong list would misroute). */
  static parse(myId: string, text: string, source: string | null = null): NodesList {
    let raw: unknown;
    try {
      raw = JSON.parse(text);
    } catch (err) {
      throw capstanError('ERR_CONFIG', `nodes list ${source ?? ''} is not JSON: ${(err as Error).message}`);
    }
    if (!raw || typeof raw !== 'object' || Array.isArray(raw)) {
      throw capstanError('ERR_CONFIG', `nodes list ${source ?? ''} must be an object keyed by node id`);
    }
    const nodes = new Map<string, NodeEntry>();
    for (const [id, v] of Object.entries(raw as Record<string, unknown>)) {
      const e = v as Record<string, unknown> | null;
      if (!e || typeof e !== 'object' || typeof e['policy-server'] !== 'string') {
        throw capstanError('ERR_CONFIG', `nodes list ${source ?? ''}: node ${id} needs a "policy-server"`);
      }
      nodes.set(id, {
        id,
        hostname: typeof e.hostname === 'string' ? e.hostname : '',
        policyServer: e['policy-server'],
        keyHash: parseKeyHash(e['key-hash']),
        relay: e.relay === true,
        tokensAfter: Number.isSafeInteger(e['tokens-after']) && (e['tokens-after'] as number) > 0 ? (e['tokens-after'] as number) : 0,
      });
    }
    return new NodesList(myId, nodes, source);
  }

  static async load(myId: string, path: string): Promise<NodesList> {
    if (path === '') return NodesList.empty(myId);
    let text: string;
    try {
      text = await readFile(path, 'utf8');
    } catch (err) {
      throw capstanError('ERR_CONFIG', `cannot read nodes list ${path}: ${(err as Error).message}`);
    }
    return NodesList.parse(myId, text, path);
  }
}
