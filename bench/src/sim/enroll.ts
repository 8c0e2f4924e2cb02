/**
 * Enrollment of the simulated fleet, as agents and an admin do it: each node sends a signed
 * inventory through its relay (it becomes pending at the root), then an admin accepts it through
 * the API. Or, for a quick start, nodes are registered as accepted directly (POST /api/1/nodes
 * with the certificate), or assumed enrolled by an earlier run.
 */
import { acceptNode, countNodes, eachLimited, getNode, listNodes, registerNode, type AdminTarget } from './admin.js';
import type { SimIdentity } from './identities.js';
import type { SignJob } from './sign-worker.js';
import type { Uploader } from './upload.js';
import { runInWorkers } from './workers.js';

/** How often the enrolment asks the server how many nodes it has accepted. */
const POLL_MS = 2000;

export type EnrollMode = 'inventory' | 'register' | 'none';

export interface EnrollmentReport {
  mode: EnrollMode;
  ms: number;
  inventories: number;
  accepted: number;
  errors: Record<string, number>;
  /** Signing the inventories before the first was sent (not in `ms`), when they were signed. */
  prepare_ms?: number;
  /** The slowest round of polling the server for acceptance (its pending list, accepts and count). */
  slowest_poll_ms?: number;
  note?: string;
}

export interface EnrollOptions {
  enroll: EnrollMode;
  identities: SimIdentity[];
  relays: string[];
  server?: AdminTarget;
  enrollTimeoutMs: number;
  maxInFlight: number;
  signWorker: URL;
  workers: number;
  progress: (line: string) => void;
}

function countCode(m: Record<string, number>, code: string): void {
  m[code] = (m[code] ?? 0) + 1;
}

/** Enroll every node: signed inventory through its relay, then acceptance through the admin API. */
export async function enroll(o: EnrollOptions, uploaders: Uploader[]): Promise<EnrollmentReport> {
  const started = performance.now();
  const errors: Record<string, number> = {};
  const ids = o.identities;
  const ms = () => Math.round(performance.now() - started);
  if (o.enroll === 'none') return { mode: 'none', ms: 0, inventories: 0, accepted: 0, errors, note: 'nodes assumed enrolled and accepted already' };

  if (o.enroll === 'register') {
    if (!o.server) throw new RangeError('--enroll register needs --server and a token');
    let accepted = 0;
    o.progress(`registering ${ids.length} accepted nodes through POST /api/1/nodes`);
    await eachLimited(ids, 16, async (id) => {
      try {
        await registerNode(o.server!, id);
        accepted++;
      } catch (err) {
        countCode(errors, (err as { code?: string }).code ?? 'ERR_ADMIN');
      }
    });
    return { mode: 'register', ms: ms(), inventories: 0, accepted, errors };
  }

  o.progress(`enrolling ${ids.length} nodes: signed inventories`);
  const at = Date.now() - 60_000; // a minute before the first run, whatever the scale
  const invs = await runInWorkers<SignJob, { name: string; body: ArrayBuffer }>(
    o.signWorker,
    ids.map((id, i) => ({ kind: 'inventory', id, atMs: at, policyServer: new URL(o.relays[i % o.relays.length]!).hostname })),
    o.workers,
  );
  const prepareMs = ms();
  // Ours already accepted by an earlier simulation count as accepted; the count of accepted
  // nodes before any inventory is sent is the base the server's count moves from.
  const ours = new Set(ids.map((id) => id.nodeId));
  const before = o.server ? await listNodes(o.server) : [];
  const acceptedBefore = new Set(before.filter((n) => n.accepted === 'accepted').map((n) => n.id));
  const oursBefore = [...acceptedBefore].filter((id) => ours.has(id)).length;
  const sendStart = performance.now();
  const since = () => Math.round(performance.now() - sendStart);
  let sent = 0;
  await eachLimited(invs, o.maxInFlight, async (inv, i) => {
    const res = await uploaders[i % uploaders.length]!.put('inventories', inv.name, Buffer.from(inv.body));
    if (res.status >= 200 && res.status < 300) sent++;
    else countCode(errors, res.code ?? `HTTP_${res.status}`);
  });
  if (!o.server) {
    return { mode: 'inventory', ms: since(), prepare_ms: prepareMs, inventories: sent, accepted: 0, errors, note: 'no server given: acceptance not checked (auto-accept expected)' };
  }

  // Each round asks for the pending nodes only and for the count of accepted ones (one page of
  // one node, its total): listing the whole fleet every round cost the server more than the
  // enrolment itself at 100,000 nodes. Ours still pending are accepted through the API. When
  // the count says all are in, one whole listing checks it node by node.
  // Every POLL_MS: the count of accepted nodes is a read of the whole fleet (about 80 ms of the
  // server's event loop at 150,000 nodes on SQLite), so a tighter poll is load the fleet lacks.
  const deadline = performance.now() + o.enrollTimeoutMs;
  let shown = -1;
  let done = 0;
  o.progress(`accepting ${ids.length} nodes through the admin API`);
  // A round the server does not answer (a call past its timeout, a refusal) is counted by its
  // code and tried again: the report says how often and how slow, and the run goes on.
  let slowestRoundMs = 0;
  while (done < ours.size && performance.now() < deadline) {
    const roundStarted = performance.now();
    try {
      const pending = (await listNodes(o.server, 'accepted=pending')).filter((n) => ours.has(n.id)).map((n) => n.id);
      await eachLimited(pending, 8, async (id) => {
        try {
          await acceptNode(o.server!, id);
        } catch (err) {
          countCode(errors, adminCode(err));
        }
      });
      done = Math.min(ours.size, oursBefore + (await countNodes(o.server, 'accepted=accepted')) - acceptedBefore.size);
      if (done >= ours.size) done = await checkAccepted(o.server, ours, errors, o.progress);
    } catch (err) {
      countCode(errors, adminCode(err));
      o.progress(`  the server did not answer the enrolment's poll: ${(err as Error).message}`);
    }
    slowestRoundMs = Math.max(slowestRoundMs, performance.now() - roundStarted);
    if (done < ours.size) {
      if (done !== shown) o.progress(`  accepted ${done}/${ours.size}`);
      shown = done;
      await new Promise((r) => setTimeout(r, POLL_MS));
    }
  }
  if (done < ours.size) countCode(errors, 'ERR_ENROLL_TIMEOUT');
  return { mode: 'inventory', ms: since(), prepare_ms: prepareMs, inventories: sent, accepted: done, errors, slowest_poll_ms: Math.round(slowestRoundMs) };
}

/** Nodes the whole listing may miss before they are asked for one by one. */
const MAX_RECHECK = 2000;

/**
 * How many of `ours` the server holds as accepted: one whole listing, then each node it left out
 * asked for by id. A node the listing missed but the server holds is counted as accepted and as
 * an ERR_LIST_MISSED, with the first few named, so a listing fault shows in the report and does
 * not hold the run.
 */
async function checkAccepted(server: AdminTarget, ours: ReadonlySet<string>, errors: Record<string, number>, progress: (line: string) => void): Promise<number> {
  const listed = new Set((await listNodes(server, 'accepted=accepted')).map((n) => n.id));
  const missing = [...ours].filter((id) => !listed.has(id));
  if (missing.length === 0 || missing.length > MAX_RECHECK) return ours.size - missing.length;
  const held: Array<Record<string, unknown>> = [];
  await eachLimited(missing, 8, async (id) => {
    const node = await getNode(server, id);
    if (node?.accepted === 'accepted') held.push(node);
  });
  for (let i = 0; i < held.length; i++) countCode(errors, 'ERR_LIST_MISSED');
  if (held.length > 0) {
    const shown = held.slice(0, 5).map((n) => `${String(n.id)} (name ${String(n.name)}, status ${String(n.status)}, state ${String(n.state)}, updated ${String(n.updated_at)})`);
    progress(`  the listing missed ${held.length} accepted nodes the server holds: ${shown.join('; ')}`);
  }
  return ours.size - missing.length + held.length;
}

/** An admin call's failure as a code: its own, ERR_ADMIN_TIMEOUT past the call's timeout, else ERR_ADMIN. */
function adminCode(err: unknown): string {
  if ((err as { name?: string }).name === 'TimeoutError') return 'ERR_ADMIN_TIMEOUT';
  const code = (err as { code?: unknown }).code;
  return typeof code === 'string' ? code : 'ERR_ADMIN';
}
