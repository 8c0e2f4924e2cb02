/**
 * What the store holds for a node's directives, kept in memory so that the ingest does not move
 * the same rows back and forth for every run of the node: its expected components under a policy
 * config (node_expectations, read to judge each run), and its per-directive compliance rows as
 * last written (node_compliance_directives: a run then writes only the rows whose counts moved,
 * a few of a hundred in the steady state, instead of all of them).
 *
 * An entry is never served on trust. Each carries the version of the row it stands for (xmin and
 * ctid: any write, by this process or another server on the same database, makes a new row
 * version): the expectations' own row, and for the directive rows the node's node_compliance row,
 * which every writer of directive rows rewrites in the same transaction. The batch that uses an
 * entry reads the current version in a statement it makes anyway, and falls back to the full
 * read or write when it differs. Writing a node's expectations (policy generation) also drops
 * the node's entries at once.
 *
 * Bounded by `maxBytes` (`[database] directive_cache`): expectations count three times their JSON
 * text's length (about what the parsed objects take), directive rows twice their keys' and
 * counts' characters plus 64 bytes each; least recently used node out first; 0 keeps nothing.
 */
import type { ExpectedComponent } from './types.js';

/** What an entry of expectations counts per character of its JSON text. */
export const EXPECTATIONS_BYTES_PER_CHAR = 3;
/** What a directive row counts beyond its characters. */
export const ROW_OVERHEAD_BYTES = 64;

interface Versioned<T> {
  version: string;
  value: T;
  bytes: number;
}

interface NodeEntry {
  nodeId: string;
  expectations: Map<string, Versioned<ExpectedComponent[]>>;
  rows?: Versioned<ReadonlyMap<string, string>>;
  /** Its neighbours in the order of use: `older` toward the next one out. */
  older: NodeEntry | null;
  newer: NodeEntry | null;
}

/**
 * The order of use is a list of its own. Kept as the map's insertion order (each use deleting
 * and setting the node again), every eviction and budget check started an iteration at the
 * map's front, past the holes those deletions leave until the map is rehashed: 9 µs per write
 * at 100,000 nodes; 200,000 writes took 3.3 s with evictions and 1.9 s without, 0.31 s and
 * 0.17 s with the list.
 */
export class DirectiveCache {
  private readonly map = new Map<string, NodeEntry>();
  /** The least and the most recently used node. */
  private oldest: NodeEntry | null = null;
  private newest: NodeEntry | null = null;
  private bytes = 0;
  /** Lookups answered from memory, and lookups that were not. */
  readonly stats = { hits: 0, misses: 0 };

  constructor(readonly maxBytes = 64 * 1024 * 1024) {}

  /** The version of the expectations held for (node, config), for the query to compare with the row's. */
  expectationsVersion(nodeId: string, configId: string): string | null {
    return this.map.get(nodeId)?.expectations.get(configId)?.version ?? null;
  }

  /** The expectations held for (node, config) at exactly `version`, else undefined. */
  expectations(nodeId: string, configId: string, version: string): ExpectedComponent[] | undefined {
    return this.hit(nodeId, (n) => n.expectations.get(configId), version);
  }

  /** Keep expectations read at `version`; `jsonLength` is the length of their JSON text. */
  setExpectations(nodeId: string, configId: string, version: string, components: ExpectedComponent[], jsonLength: number): void {
    const bytes = jsonLength * EXPECTATIONS_BYTES_PER_CHAR + (nodeId.length + configId.length) * 2;
    this.put(nodeId, bytes, (n) => {
      const had = n.expectations.get(configId);
      n.expectations.set(configId, { version, value: components, bytes });
      return had?.bytes ?? 0;
    });
  }

  /** The directive rows held for a node whose node_compliance row is at `version` (key → counts), else undefined. */
  rows(nodeId: string, version: string): ReadonlyMap<string, string> | undefined {
    return this.hit(nodeId, (n) => n.rows, version);
  }

  /** Keep a node's directive rows as written, its node_compliance row then being at `version`. */
  setRows(nodeId: string, version: string, rows: ReadonlyMap<string, string>): void {
    let bytes = nodeId.length * 2;
    for (const [k, v] of rows) bytes += (k.length + v.length) * 2 + ROW_OVERHEAD_BYTES;
    this.put(nodeId, bytes, (n) => {
      const had = n.rows?.bytes ?? 0;
      n.rows = { version, value: rows, bytes };
      return had;
    });
  }

  /** The node's compliance row moved from `from` to `to` without its directive rows changing. */
  moveRows(nodeId: string, from: string, to: string): void {
    const r = this.map.get(nodeId)?.rows;
    if (r && r.version === from) r.version = to;
  }

  /** Drop a node's expectations (a policy is being written for it); its directive rows stay. */
  forgetExpectations(nodeId: string): void {
    const n = this.map.get(nodeId);
    if (!n) return;
    for (const e of n.expectations.values()) this.bytes -= e.bytes;
    n.expectations.clear();
    if (!n.rows) this.drop(nodeId, n);
  }

  /** Drop every entry of a node (its expectations or directive rows are being written elsewhere). */
  forgetNode(nodeId: string): void {
    const n = this.map.get(nodeId);
    if (n) this.drop(nodeId, n);
  }

  /** Bytes counted and nodes held. */
  get size(): { bytes: number; nodes: number } {
    return { bytes: this.bytes, nodes: this.map.size };
  }

  private hit<T>(nodeId: string, pickOne: (n: NodeEntry) => Versioned<T> | undefined, version: string): T | undefined {
    const n = this.map.get(nodeId);
    const e = n && pickOne(n);
    if (!n || !e || e.version !== version) {
      this.stats.misses++;
      return undefined;
    }
    this.use(n);
    this.stats.hits++;
    return e.value;
  }

  /** Adds `bytes` to a node's entry through `write` (which returns the bytes it replaced), then evicts. */
  private put(nodeId: string, bytes: number, write: (n: NodeEntry) => number): void {
    if (bytes > this.maxBytes) {
      this.forgetNode(nodeId);
      return;
    }
    let n = this.map.get(nodeId);
    if (n) this.use(n);
    else {
      n = { nodeId, expectations: new Map(), older: null, newer: null };
      this.map.set(nodeId, n);
      this.link(n);
    }
    this.bytes += bytes - write(n);
    while (this.bytes > this.maxBytes && this.oldest) this.drop(this.oldest.nodeId, this.oldest);
  }

  /** The node becomes the most recently used. */
  private use(n: NodeEntry): void {
    if (this.newest === n) return;
    this.unlink(n);
    this.link(n);
  }

  /** Appends `n` as the newest. */
  private link(n: NodeEntry): void {
    n.older = this.newest;
    n.newer = null;
    if (this.newest) this.newest.newer = n;
    else this.oldest = n;
    this.newest = n;
  }

  private unlink(n: NodeEntry): void {
    if (n.older) n.older.newer = n.newer;
    else this.oldest = n.newer;
    if (n.newer) n.newer.older = n.older;
    else this.newest = n.older;
    n.older = null;
    n.newer = null;
  }

  private drop(nodeId: string, n: NodeEntry): void {
    this.map.delete(nodeId);
    this.unlink(n);
    for (const e of n.expectations.values()) this.bytes -= e.bytes;
    this.bytes -= n.rows?.bytes ?? 0;
  }
}
