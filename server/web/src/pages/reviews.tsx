/**
 * Change requests: the proposed policy changes, each with what it changes (objects), whom it
 * reaches (nodes gaining, changing or losing directives) and one chosen node's directives before
 * and after; another admin approves or rejects it with a comment; an approved one is deployed
 * exactly as reviewed, unless its objects changed meanwhile (then it says which).
 */
import { useContext, useState } from 'preact/hooks';
import { post, type ListAnswer } from '../api';
import { MeContext } from '../me';
import { navigate } from '../router';
import { Badge, ErrorBox, Pager, Section, Show, Time, useGet } from '../ui';
import { Diff } from './node';

interface Review { admin: string; verdict: string; comment: string; at: string }
interface PlanChange { kind: string; id: string; action: string; fields?: string[]; object?: Record<string, unknown> }
interface Ref { rule_id: string; directive_id: string }
interface NodeImpact { node_id: string; hostname: string | null; added: Ref[]; changed: Ref[]; removed: Ref[] }
interface CR {
  id: string; title: string; description: string; author: string; status: string; created_at: string; updated_at: string;
  reviews: Review[]; deployed_at: string | null; deployed_by: string | null; stale?: Array<{ kind: string; id: string }>;
  impact?: { changes: PlanChange[]; nodes: NodeImpact[]; nodes_total: number; nodes_truncated: boolean }; nodes_total?: number;
}

const enc = encodeURIComponent;
const STATUSES = ['', 'open', 'approved', 'rejected', 'deployed'];

export function ChangeRequestsPage({ params }: { params: URLSearchParams }) {
  const status = params.get('status') ?? '';
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const list = useGet<ListAnswer<CR>>(`/api/1/change-requests?per_page=50&page=${page}${status ? `&status=${status}` : ''}`);
  return (
    <>
      <h1>Change requests</h1>
      <nav class="seg-ctl" aria-label="Status">
        {STATUSES.map((s) => <a key={s} href={`#/change-requests${s ? `?status=${s}` : ''}`} aria-current={s === status ? 'true' : undefined}>{s || 'all'}</a>)}
      </nav>
      <Show f={list}>{(r) => (
        <>
          <div class="table-wrap"><table class="list">
            <thead><tr><th scope="col">Change</th><th scope="col">Status</th><th scope="col">By</th><th scope="col">Nodes reached</th><th scope="col">Proposed</th></tr></thead>
            <tbody>
              {r.data.length === 0 && <tr><td colSpan={5} class="muted">No change request. Editing a directive, group or rule proposes one.</td></tr>}
              {r.data.map((c) => (
                <tr key={c.id}>
                  <th scope="row"><a href={`#/change-requests/${enc(c.id)}`}>{c.title}</a></th>
                  <td><Badge value={c.status} kind={`cr-${c.status}`} /></td><td>{c.author}</td><td>{c.nodes_total ?? 0}</td><td><Time iso={c.created_at} /></td>
                </tr>
              ))}
            </tbody>
          </table></div>
          <Pager total={r.total} page={page} perPage={50} go={(p) => navigate('/change-requests', { ...(status && { status }), page: String(p) })} />
        </>
      )}</Show>
    </>
  );
}

/** One node's directives before and after the request, as JSON text, diffed line by line. */
function NodeDiff({ cr, node }: { cr: string; node: string }) {
  const d = useGet<{ data: { before: unknown[]; after: unknown[] } }>(`/api/1/change-requests/${enc(cr)}/nodes/${enc(node)}`);
  return (
    <Show f={d}>{({ data }) => {
      const a = JSON.stringify(data.before, null, 2).split('\n');
      const b = JSON.stringify(data.after, null, 2).split('\n');
      return <Diff text={lineDiff(a, b)} />;
    }}</Show>
  );
}

/** A unified-style diff of two line lists (longest common subsequence; bundles are small). */
export function lineDiff(a: string[], b: string[]): string {
  const n = a.length;
  const m = b.length;
  const lcs: number[][] = Array.from({ length: n + 1 }, () => new Array<number>(m + 1).fill(0));
  for (let i = n - 1; i >= 0; i--) for (let j = m - 1; j >= 0; j--) lcs[i]![j] = a[i] === b[j] ? lcs[i + 1]![j + 1]! + 1 : Math.max(lcs[i + 1]![j]!, lcs[i]![j + 1]!);
  const out: string[] = ['--- now', '+++ after the change'];
  let i = 0;
  let j = 0;
  while (i < n || j < m) {
    if (i < n && j < m && a[i] === b[j]) { out.push(` ${a[i]}`); i++; j++; }
    else if (j < m && (i >= n || lcs[i]![j + 1]! >= lcs[i + 1]![j]!)) out.push(`+${b[j++]}`);
    else out.push(`-${a[i++]}`);
  }
  return out.join('\n');
}

export function ChangeRequestPage({ id }: { id: string }) {
  const me = useContext(MeContext);
  const cr = useGet<{ data: CR }>(`/api/1/change-requests/${enc(id)}`);
  const [comment, setComment] = useState('');
  const [node, setNode] = useState('');
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const act = async (verb: 'approve' | 'reject' | 'deploy') => {
    setBusy(true);
    setError(null);
    try {
      await post(`/api/1/change-requests/${enc(id)}/${verb}`, verb === 'deploy' ? {} : { comment });
      setComment('');
      cr.reload();
    } catch (err) {
      setError(err);
    } finally {
      setBusy(false);
    }
  };
  const isAdmin = me?.role === 'admin';
  return (
    <Show f={cr}>{({ data: c }) => (
      <>
        <h1>{c.title} <Badge value={c.status} kind={`cr-${c.status}`} /></h1>
        <p>Proposed by <strong>{c.author}</strong> on <Time iso={c.created_at} />{c.deployed_at && <> · deployed by <strong>{c.deployed_by}</strong> on <Time iso={c.deployed_at} /></>}</p>
        {c.description && <p>{c.description}</p>}
        {c.stale && c.stale.length > 0 && (
          <p class="error" role="alert">Changed since it was proposed: {c.stale.map((s) => `${s.kind} ${s.id}`).join(', ')}. It cannot be deployed as reviewed: propose it again.</p>
        )}
        <Section title="What it changes" id="objects">
          <ul class="changes">
            {(c.impact?.changes ?? []).map((x) => (
              <li key={`${x.kind}:${x.id}`}>
                <details>
                  <summary><span class="badge">{x.action}</span> {x.kind} <a href={`#/${x.kind}s/${enc(x.id)}`}>{x.id}</a>{x.fields && <span class="muted"> ({x.fields.join(', ')})</span>}</summary>
                  {x.object && <pre class="output small">{JSON.stringify(x.object, null, 2)}</pre>}
                </details>
              </li>
            ))}
          </ul>
        </Section>
        <Section title={`Nodes it reaches (${c.impact?.nodes_total ?? 0})`} id="impact">
          {(c.impact?.nodes ?? []).length === 0 ? <p class="muted">No node's policy changes.</p> : (
            <>
              <div class="table-wrap scroll"><table class="compact">
                <thead><tr><th scope="col">Node</th><th scope="col">Gains</th><th scope="col">Changed</th><th scope="col">Loses</th></tr></thead>
                <tbody>{c.impact!.nodes.map((n) => (
                  <tr key={n.node_id}>
                    <th scope="row"><button type="button" class="link" onClick={() => setNode(n.node_id)} aria-pressed={node === n.node_id}>{n.hostname ?? n.node_id}</button></th>
                    <td>{n.added.map((d) => d.directive_id).join(', ')}</td><td>{n.changed.map((d) => d.directive_id).join(', ')}</td><td>{n.removed.map((d) => d.directive_id).join(', ')}</td>
                  </tr>
                ))}</tbody>
              </table></div>
              {c.impact!.nodes_truncated && <p class="muted">The first {c.impact!.nodes.length} are listed.</p>}
              {node ? <><h3>Directives of {c.impact!.nodes.find((n) => n.node_id === node)?.hostname ?? node}, now and after the change</h3><NodeDiff cr={c.id} node={node} /></>
                : <p class="muted">Choose a node to see its directives before and after.</p>}
            </>
          )}
        </Section>
        <Section title="Reviews" id="reviews">
          {c.reviews.length === 0 ? <p class="muted">No review yet.</p> : (
            <ul class="changes">{c.reviews.map((r, i) => <li key={i}><span class={`badge verdict-${r.verdict}`}>{r.verdict}</span> by <strong>{r.admin}</strong> on <Time iso={r.at} />{r.comment && <p>{r.comment}</p>}</li>)}</ul>
          )}
          {isAdmin && c.status === 'open' && (
            <form class="edit" onSubmit={(e) => e.preventDefault()} aria-label="Review">
              <label for="review-comment">Comment</label>
              <textarea id="review-comment" rows={3} value={comment} onInput={(e) => setComment((e.target as HTMLTextAreaElement).value)} />
              <div class="form-actions">
                {me?.name !== c.author && <button type="button" disabled={busy} onClick={() => act('approve')}>Approve</button>}
                <button type="button" class="danger" disabled={busy} onClick={() => act('reject')}>Reject</button>
              </div>
              {me?.name === c.author && <p class="hint">You proposed it: another admin approves it.</p>}
            </form>
          )}
          {isAdmin && c.status === 'approved' && <p><button type="button" disabled={busy} onClick={() => act('deploy')}>Deploy</button></p>}
          {error !== null && <ErrorBox error={error} />}
        </Section>
      </>
    )}</Show>
  );
}
