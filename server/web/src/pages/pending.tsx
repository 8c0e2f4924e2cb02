/**
 * Nodes waiting for acceptance: hostname, OS, addresses, certificate fingerprint, first seen;
 * accept or refuse one or many. A viewer sees the list without the buttons (the API refuses
 * it anyway).
 */
import { useEffect, useState } from 'preact/hooks';
import { get, post, type ListAnswer } from '../api';
import { useCanWrite } from '../me';
import { navigate } from '../router';
import { ErrorBox, Pager, Show, Time, useGet } from '../ui';
import type { NodeRow } from './nodes';

const PER_PAGE = 50;

/** The addresses an inventory reports (interfaces), for the nodes shown. */
function useAddresses(ids: string[]): Map<string, string> {
  const [out, setOut] = useState(new Map<string, string>());
  const key = ids.join(',');
  useEffect(() => {
    let live = true;
    void Promise.all(ids.map(async (id) => {
      try {
        const inv = (await get<{ data: { inventory: any } }>(`/api/1/nodes/${encodeURIComponent(id)}/inventory`)).data.inventory;
        const addrs = (Array.isArray(inv?.interfaces) ? inv.interfaces : []).flatMap((f: any) => (f.addresses ?? []).map((a: any) => (typeof a === 'string' ? a : a.address)))
          .filter((a: string) => a && !/^(127\.|::1|fe80:)/.test(a));
        return [id, addrs.join(', ')] as const;
      } catch {
        return [id, ''] as const;
      }
    })).then((pairs) => live && setOut(new Map(pairs)));
    return () => {
      live = false;
    };
  }, [key]);
  return out;
}

export function PendingPage({ params }: { params: URLSearchParams }) {
  const canWrite = useCanWrite();
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const list = useGet<ListAnswer<NodeRow>>(`/api/1/nodes/pending?per_page=${PER_PAGE}&page=${page}&sort=created_at`);
  const [picked, setPicked] = useState(new Set<string>());
  const [busy, setBusy] = useState(false);
  const [result, setResult] = useState<{ ok: string[]; failed: Array<[string, unknown]>; verb: string } | null>(null);
  const rows = list.data?.data ?? [];
  const addresses = useAddresses(rows.filter((n) => n.address === null).map((n) => n.id));
  const act = async (verb: 'accept' | 'refuse', ids: string[]) => {
    if (verb === 'refuse' && !confirm(`Refuse ${ids.length} node${ids.length === 1 ? '' : 's'}? Their uploads will be refused until an admin deletes or accepts them.`)) return;
    setBusy(true);
    const ok: string[] = [];
    const failed: Array<[string, unknown]> = [];
    for (const id of ids) {
      try {
        await post(`/api/1/nodes/${encodeURIComponent(id)}/${verb}`);
        ok.push(id);
      } catch (err) {
        failed.push([id, err]);
      }
    }
    setBusy(false);
    setPicked(new Set());
    setResult({ ok, failed, verb: verb === 'accept' ? 'accepted' : 'refused' });
    list.reload();
  };
  const toggle = (id: string) => {
    const next = new Set(picked);
    if (next.has(id)) next.delete(id);
    else next.add(id);
    setPicked(next);
  };
  const all = rows.length > 0 && rows.every((n) => picked.has(n.id));
  return (
    <>
      <h1>Pending nodes</h1>
      {result && (
        <div role="status" class="notice">
          {result.ok.length > 0 && <p>{result.ok.length} node{result.ok.length === 1 ? '' : 's'} {result.verb}.</p>}
          {result.failed.map(([id, err]) => <div key={id}><strong>{id}</strong>: <ErrorBox error={err} /></div>)}
        </div>
      )}
      <Show f={list}>{(r) => (r.data.length === 0 ? <p>No node is waiting for acceptance.</p> : (
        <>
          {canWrite && (
            <div class="toolbar" role="toolbar" aria-label="Selected nodes">
              <button type="button" disabled={busy || picked.size === 0} onClick={() => act('accept', [...picked])}>Accept selected ({picked.size})</button>
              <button type="button" class="danger" disabled={busy || picked.size === 0} onClick={() => act('refuse', [...picked])}>Refuse selected</button>
            </div>
          )}
          <div class="table-wrap">
            <table class="list">
              <thead><tr>
                {canWrite && <th scope="col"><input type="checkbox" aria-label="Select all" checked={all} onChange={() => setPicked(all ? new Set() : new Set(rows.map((n) => n.id)))} /></th>}
                <th scope="col">Hostname</th><th scope="col">OS</th><th scope="col">Addresses</th><th scope="col">Certificate (sha256)</th><th scope="col">First seen</th>
                {canWrite && <th scope="col">Actions</th>}
              </tr></thead>
              <tbody>{r.data.map((n) => (
                <tr key={n.id} data-node={n.id}>
                  {canWrite && <td><input type="checkbox" aria-label={`Select ${n.hostname}`} checked={picked.has(n.id)} onChange={() => toggle(n.id)} /></td>}
                  <th scope="row"><a href={`#/nodes/${encodeURIComponent(n.id)}`}>{n.hostname}</a><br /><code class="muted small">{n.id}</code></th>
                  <td>{[n.os_name, n.os_version].filter(Boolean).join(' ') || '—'}</td>
                  <td>{n.address ?? addresses.get(n.id) ?? '…'}</td>
                  <td><code class="fp">{n.certificate_fingerprint ?? '—'}</code>{n.conflict_fingerprint && <p class="warn">Also sent another certificate: <code class="fp">{n.conflict_fingerprint}</code>. Accept it from the CLI or API naming the fingerprint to pin.</p>}</td>
                  <td><Time iso={n.created_at} /></td>
                  {canWrite && (
                    <td class="actions">
                      <button type="button" disabled={busy} onClick={() => act('accept', [n.id])} aria-label={`Accept ${n.hostname}`}>Accept</button>
                      <button type="button" class="danger" disabled={busy} onClick={() => act('refuse', [n.id])} aria-label={`Refuse ${n.hostname}`}>Refuse</button>
                    </td>
                  )}
                </tr>
              ))}</tbody>
            </table>
          </div>
          <Pager total={r.total} page={page} perPage={PER_PAGE} go={(p) => navigate('/pending', { page: String(p) })} />
        </>
      ))}</Show>
    </>
  );
}
