/**
 * What the simulator reads from the programs while it runs, all optional (an older relay or
 * server without the endpoint gives null): spool depths from the relay API and the server's
 * status, and the V8 heap from their Prometheus /metrics.
 */
import type { AdminTarget } from './admin.js';

export async function relaySpool(relay: string): Promise<number | null> {
  try {
    const r = await fetch(`${relay.replace(/\/+$/, '')}/rudder/relay-api/1/system/status`, { signal: AbortSignal.timeout(2000) });
    const body = (await r.json()) as { data?: { spool?: { incoming?: { reports?: number } } } };
    return body.data?.spool?.incoming?.reports ?? null;
  } catch {
    return null; // the relay's status API is optional to the simulation
  }
}

/**
 * The V8 heap in use, from a program's Prometheus /metrics (prom-client's default metrics), so
 * a growing RSS can be told apart: a growing heap is retained objects, a flat one is native
 * memory or allocator fragmentation.
 */
export async function heapMb(base: string): Promise<number | null> {
  try {
    const r = await fetch(`${base.replace(/\/+$/, '')}/metrics`, { signal: AbortSignal.timeout(2000) });
    if (!r.ok) return null;
    const m = /^\w*nodejs_heap_size_used_bytes(?:\{[^}]*\})? ([0-9.e+]+)$/m.exec(await r.text());
    return m ? Math.round(Number(m[1]) / 2 ** 20 * 10) / 10 : null;
  } catch {
    return null;
  }
}

export async function serverSpool(server: AdminTarget): Promise<number | null> {
  try {
    const r = await fetch(`${server.url.replace(/\/+$/, '')}/api/1/system/status`, {
      headers: { authorization: `Bearer ${server.token}` },
      signal: AbortSignal.timeout(2000),
    });
    const body = (await r.json()) as { data?: { spool?: { reports?: number } } };
    return body.data?.spool?.reports ?? null;
  } catch {
    return null;
  }
}
