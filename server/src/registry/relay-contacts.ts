/**
 * Contacts of relay nodes. An agent is heard from through its inventories and runs; a relay
 * sends neither, so without this a registered relay would stay `unknown` forever. A relay's
 * contact is recorded (the registry's recordContact: the agents' rule, rules.ts afterContact — last contact,
 * reachable, missing → running) when:
 * - it renews its token by signed request (checked against its pinned certificate);
 * - the relay authorizer lets it in at a relay-only endpoint (identity/relay-auth.ts: its
 *   remote-run link, output posts, providers calls) — at most one write per relay per
 *   THROTTLE_MS, so a busy relay does not write the database once per request;
 * - while it holds its remote-run link here: at link time (the link is let in by the authorizer)
 *   and then every `beatMs` while the link lasts.
 *
 * What keeps a relay reachable is its link, not its token renewals: a relay renews when a third of
 * its token's life is left (every 16 h with the default 24 h `identity.token_ttl`), rare next to
 * the unreachable threshold (`lifecycle.run_interval` × `missed_runs`, 15 min by default). The beat
 * is a quarter of that threshold and a linked relay is written again less than two beats after
 * its last write, so its last contact is under half the threshold old whenever the sweep looks
 * (unless the database is too slow to take 10,000 writes in a beat). A relay that holds no link
 * (`remote_run.link_upstream` off) and polls no providers is heard from only at its renewals: it
 * shows unreachable between them (silent, not necessarily down); the renewals keep it from going
 * `missing` (1 day of silence by default) only while its token TTL is shorter than
 * `missing_after` × 3/2.
 *
 * Only relays that showed their token count: with `identity.require_relay_token` off, the id in a
 * link's path is anyone's claim, and it records nothing. A relay that vanished without closing its
 * link counts as linked until the link's socket fails (heartbeats are written to it) or its
 * token expires (the hub ends the link then).
 */
import type { Logger } from '@capstan/shared/log';
import type { NodeRegistry } from './nodes.js';
import { relayActor } from '../audit/actor.js';

/** At most one write per relay this often from the authorizer (a busy relay makes many requests). */
export const THROTTLE_MS = 60_000;
/** The shortest beat, for thresholds of a few seconds (tests): below it the beat writes too often. */
export const MIN_BEAT_MS = 250;
/**
 * Relays whose last write is remembered for the throttle. The server links at most 10,000 relays
 * (RelayHub); past this, entries older than the throttle are dropped, and if that is not enough
 * the memory is cleared (a few extra writes, never unbounded memory).
 */
export const MAX_REMEMBERED = 20_000;

export interface RelayContactOptions {
  /** The node registry (nodes.ts): contacts go through its door like every node change. */
  store: Pick<NodeRegistry, 'recordContact'>;
  log: Logger;
  /** A node is marked unreachable after this long without contact (run_interval × missed_runs). */
  unreachableAfterMs: number;
  /** Epoch ms. */
  clock?: () => number;
}

export class RelayContacts {
  /** How often a linked relay's contact is recorded: a quarter of the unreachable threshold. */
  readonly beatMs: number;
  /** The authorizer's throttle: a minute, or the beat when the threshold is that short. */
  readonly throttleMs: number;
  private readonly written = new Map<string, number>();
  private readonly clock: () => number;
  private timer: NodeJS.Timeout | null = null;
  private beating: Promise<number> | null = null;
  private stopped = false;
  private linked: () => string[] = () => [];

  constructor(private readonly o: RelayContactOptions) {
    this.clock = o.clock ?? Date.now;
    this.beatMs = Math.max(MIN_BEAT_MS, Math.floor(o.unreachableAfterMs / 4));
    this.throttleMs = Math.min(THROTTLE_MS, this.beatMs);
  }

  /** Record a contact now (a renewal), whatever the throttle says. Never throws: see write(). */
  async record(id: string, cause: string): Promise<void> {
    const err = await this.write(id, cause);
    if (err) this.o.log.warn({ err, relay: id }, 'relay contact not recorded');
  }

  /** The authorizer let the relay in: a contact, unless one was written within the throttle. */
  async seen(id: string): Promise<void> {
    const last = this.written.get(id);
    if (last !== undefined && this.clock() - last < this.throttleMs) return;
    await this.record(id, 'relay request');
  }

  /**
   * Write one contact; the error when it failed. The time is noted before the write, so requests
   * arriving meanwhile do not write again, and it is kept when the write fails: the next attempt
   * waits for the throttle instead of hammering a database that is down. A contact not recorded
   * never refuses the relay: its request is let in all the same.
   */
  private async write(id: string, cause: string): Promise<unknown> {
    const now = this.clock();
    this.remember(id, now);
    try {
      await this.o.store.recordContact(id, new Date(now).toISOString(), relayActor(id), cause);
      return undefined;
    } catch (err) {
      return err;
    }
  }

  private remember(id: string, now: number): void {
    if (!this.written.has(id) && this.written.size >= MAX_REMEMBERED) {
      const horizon = Math.max(this.throttleMs, this.beatMs);
      for (const [k, at] of this.written) if (now - at >= horizon) this.written.delete(k);
      if (this.written.size >= MAX_REMEMBERED) this.written.clear();
    }
    this.written.set(id, now);
  }

  /**
   * One beat: a contact for every linked relay not written within the beat. Sequential (one
   * transaction at a time, 10,000 linked relays are 10,000 small writes per beat, spread by
   * when each was last written); returns how many were written.
   */
  beat(): Promise<number> {
    if (this.beating) return this.beating;
    const run = this.beatOnce().finally(() => {
      if (this.beating === run) this.beating = null;
    });
    this.beating = run;
    return run;
  }

  private async beatOnce(): Promise<number> {
    let n = 0;
    let failed = 0;
    let error: unknown;
    for (const id of this.linked()) {
      if (this.stopped) break;
      const last = this.written.get(id);
      if (last !== undefined && this.clock() - last < this.beatMs) continue;
      const err = await this.write(id, 'relay link');
      if (err) {
        failed++;
        error = err;
      } else n++;
    }
    // One line per beat, not one per relay, while the database is down.
    if (failed > 0) this.o.log.warn({ err: error, failed }, 'linked relays\' contacts not recorded');
    return n;
  }

  /** Beat every beatMs for the relays `linked` names (those holding a link let in with their token). */
  start(linked: () => string[]): void {
    this.linked = linked;
    if (this.timer) return;
    // A beat still writing when the next is due is joined, not doubled.
    this.timer = setInterval(() => void this.beat(), this.beatMs);
    this.timer.unref();
  }

  /** Stop beating and wait for the beat in flight (before the store closes). */
  async stop(): Promise<void> {
    this.stopped = true;
    if (this.timer) clearInterval(this.timer);
    this.timer = null;
    await this.beating;
  }
}
