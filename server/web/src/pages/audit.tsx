/**
 * The audit log: who changed what, when, from where, with what answer, and the object before and
 * after; filtered by admin, action, target, result and time, in the address (GET /api/1/audit).
 */
import type { ListAnswer } from '../api';
import { navigate, pageLink } from '../router';
import { Pager, Show, Time, useGet } from '../ui';

interface Record_ {
  id: number; at: string; admin: string | null; role: string | null; actor_kind: string; actor: string | null; action: string; target: string | null;
  method: string; path: string; address: string; status: number; error: string | null; before: unknown; after: unknown;
}

const PER_PAGE = 50;
const FIELDS = ['admin', 'action', 'target', 'result'] as const;

function Json({ v }: { v: unknown }) {
  if (v === null || v === undefined) return <span class="muted">—</span>;
  return <pre class="output small">{JSON.stringify(v, null, 2)}</pre>;
}

export function AuditPage({ params }: { params: URLSearchParams }) {
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const q = new URLSearchParams({ per_page: String(PER_PAGE), page: String(page) });
  for (const k of FIELDS) if (params.get(k)) q.set(k, params.get(k)!);
  const log = useGet<ListAnswer<Record_>>(`/api/1/audit?${q}`);
  const submit = (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.target as HTMLFormElement);
    const out = new URLSearchParams();
    for (const k of FIELDS) {
      const v = String(f.get(k) ?? '').trim();
      if (v) out.set(k, v);
    }
    navigate('/audit', out);
  };
  return (
    <>
      <h1>Audit log</h1>
      <form class="filters" onSubmit={submit} role="search" aria-label="Filter the audit log" key={params.toString()}>
        <label>Admin<input name="admin" defaultValue={params.get('admin') ?? ''} /></label>
        <label>Action<input name="action" defaultValue={params.get('action') ?? ''} placeholder="directive.update" /></label>
        <label>Target<input name="target" defaultValue={params.get('target') ?? ''} /></label>
        <label>Result<select name="result" defaultValue={params.get('result') ?? ''}><option value="">any</option><option value="ok">ok</option><option value="error">error</option></select></label>
        <div class="filter-actions"><button type="submit">Apply</button><a href="#/audit">Clear</a></div>
      </form>
      <Show f={log}>{(r) => (
        <>
          <div class="table-wrap"><table class="list">
            <thead><tr><th scope="col">When</th><th scope="col">Who</th><th scope="col">What</th><th scope="col">Target</th><th scope="col">Answer</th><th scope="col">Before and after</th></tr></thead>
            <tbody>
              {r.data.length === 0 && <tr><td colSpan={6} class="muted">No record matches.</td></tr>}
              {r.data.map((x) => (
                <tr key={x.id}>
                  <td><Time iso={x.at} /></td>
                  <td>{x.admin ?? `${x.actor_kind} ${x.actor ?? ''}`}{x.role && <> <span class={`badge b-role-${x.role}`}>{x.role}</span></>}<br /><span class="muted small">{x.address}</span></td>
                  <td><code>{x.action}</code><br /><span class="muted small">{x.method} {x.path}</span></td>
                  <td>{x.target ?? '—'}</td>
                  <td>{x.status < 400 ? <span class="badge b-reachable">{x.status}</span> : <span class="badge b-error">{x.status} {x.error}</span>}</td>
                  <td>{x.before === null && x.after === null ? <span class="muted">—</span> : (
                    <details><summary>show</summary><div class="grid two"><div><h3>Before</h3><Json v={x.before} /></div><div><h3>After</h3><Json v={x.after} /></div></div></details>
                  )}</td>
                </tr>
              ))}
            </tbody>
          </table></div>
          <Pager total={r.total} page={page} perPage={PER_PAGE} go={pageLink('/audit', params)} />
        </>
      )}</Show>
    </>
  );
}
