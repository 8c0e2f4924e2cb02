/**
 * A node's expected components (its directives' components under one policy config) as the store
 * holds them, kept in memory so that the ingest does not read the same rows back for every run of
 * the node: each run of a node under one policy is judged against the same expectations.
 *
 * An entry is never served on trust. It carries the version of the row it was read from (the
 * row's xmin and ctid: a write, by this process or another server on the same database, makes a
 * new row version), and the batch that uses it reads the current version in the same statement
 * that would otherwise read the components; the components travel only when the versions differ.
 * A policy generation writing a node's expectations also drops its entries here at once.
 *
 * Bounded by `maxBytes` (`[database] directive_cache`): an entry counts three times its JSON
 * text's length (about what the parsed objects take), least recently used out first; 0 keeps
 * nothing.
 */
import type { ExpectedComponent } from './types.js';

interface Entry {
  version: string;
  components: ExpectedComponent[];
  bytes: number;
}

/** What one entry counts per character of its JSON text. */
export const EXPECTATIONS_BYTES_PER_CHAR = 3;

export class ExpectationsCache {
  /** By node, then config; a node's entries move and leave together (least recently used node first). */
  private readonly map = new Map<string, Map<string, Entry>>();
  private bytes = 0;
  /** Lookups answered from memory, and lookups that read the components. */
  readonly stats = { hits: 0, misses: 0 };

  constructor(readonly maxBytes = 64 * 1024 * 1024) {}

  /** The version held for (node, config), for the query to compare with the row's. */
  version(nodeId: string, configId: string): string | null {
    return this.map.get(nodeId)?.get(configId)?.version ?? null;
  }

  /** The components held for (node, config) at exactly `version`, else undefined. */
  get(nodeId: string, configId: string, version: string): ExpectedComponent[] | undefined {
    const node = this.map.get(nodeId);
    const e = node?.get(configId);
    if (!node || !e || e.version !== version) {
      this.stats.misses++;
      return undefined;
    }
    this.map.delete(nodeId);
    this.map.set(nodeId, node);
    this.stats.hits++;
    return e.components;
  }

  /** Keep what was read at `version`; `jsonLength` is the length of its JSON text. */
  set(nodeId: string, configId: string, version: string, components: ExpectedComponent[], jsonLength: number): void {
    const bytes = jsonLength * EXPECTATIONS_BYTES_PER_CHAR + (nodeId.length + configId.length) * 2;
    let node = this.map.get(nodeId);
    const had = node?.get(configId);
    if (had) {
      node!.delete(configId);
      this.bytes -= had.bytes;
    }
    if (bytes > this.maxBytes) return;
    if (!node) node = new Map();
    this.map.delete(nodeId);
    this.map.set(nodeId, node);
    node.set(configId, { version, components, bytes });
    this.bytes += bytes;
    for (const [id, entries] of this.map) {
      if (this.bytes <= this.maxBytes) break;
      this.drop(id, entries);
    }
  }

  /** Drop every entry of a node (its expectations were written). */
  forgetNode(nodeId: string): void {
    const entries = this.map.get(nodeId);
    if (entries) this.drop(nodeId, entries);
  }

  private drop(nodeId: string, entries: Map<string, Entry>): void {
    this.map.delete(nodeId);
    for (const e of entries.values()) this.bytes -= e.bytes;
  }

  /** Bytes counted and entries held. */
  get size(): { bytes: number; entries: number } {
    let entries = 0;
    for (const m of this.map.values()) entries += m.size;
    return { bytes: this.bytes, entries };
  }
}
