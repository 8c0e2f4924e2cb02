/**
 * The node list: the filter language in a box (`q`, refused expressions shown with the position
 * the API names) and the API's other filters as a filter bar, carried in the URL (a view can be
 * bookmarked and shared: the console's query string is the API's), sortable by column (by
 * compliance too: worst first), paged; each row with its compliance and last run.
 */
import type { ListAnswer, WithPercent } from '../api';
import { navigate, pageLink } from '../router';
import { Badge, ComplianceBar, ErrorBox, FilterError, Loading, Pager, Percent, SortHeader, Time, useGet } from '../ui';

export interface NodeRow {
  id: string; name: string; hostname: string; status: string; state: string; accepted: string; region: string | null;
  os_name: string | null; os_version: string | null; last_run_at: string | null; created_at: string; manager: string;
  certificate_fingerprint: string | null; conflict_fingerprint: string | null; relay: boolean; has_agent?: boolean; address: string | null;
}
interface NodeComplianceRow extends WithPercent { node_id: string }

const PER_PAGE = 50;
const STATES = ['running', 'stopped', 'terminated', 'missing', 'unknown', 'retired', 'decommissioned'];
/** Query names that are not filters. */
const RESERVED = new Set(['sort', 'order', 'page', 'per_page']);

function Select({ name, label, options, value }: { name: string; label: string; options: string[]; value: string }) {
  return (
    <label>{label}
      {/* Uncontrolled: the form is remade when the address changes, and a re-render while the
          list loads must not undo a choice the user has just made. */}
      <select name={name}>
        <option value="" selected={value === ''}>any</option>
        {options.map((o) => <option key={o} value={o} selected={o === value}>{o}</option>)}
      </select>
    </label>
  );
}

function FilterBar({ params }: { params: URLSearchParams }) {
  const tag = [...params.keys()].find((k) => k.startsWith('tag:'));
  const submit = (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.target as HTMLFormElement);
    const out = new URLSearchParams();
    const q = String(f.get('q') ?? '').trim();
    if (q) out.set('q', q);
    const name = String(f.get('name') ?? '').trim();
    if (name) out.set('name', name.includes('*') ? name : `${name}*`);
    for (const k of ['status', 'state', 'accepted', 'has_agent', 'relay']) {
      const v = String(f.get(k) ?? '');
      if (v) out.set(k, v);
    }
    for (const k of ['region', 'group']) {
      const v = String(f.get(k) ?? '').trim();
      if (v) out.set(k, v);
    }
    const t = /^([^=\s]+)=(.*)$/.exec(String(f.get('tag') ?? '').trim());
    if (t) out.set(`tag:${t[1]}`, t[2]!);
    // JSON filters (exclusions, other keys) given in the URL stay as they are.
    for (const v of params.getAll('filter')) out.append('filter', v);
    for (const k of ['sort', 'order']) if (params.get(k)) out.set(k, params.get(k)!);
    navigate('/nodes', out);
  };
  return (
    <form class="filters" onSubmit={submit} role="search" aria-label="Filter nodes" key={params.toString()}>
      <label class="wide">Filter (the filter language: <code>os.name = debian and package:openssl &lt; 3.0.11</code>)
        <input name="q" defaultValue={params.get('q') ?? ''} spellcheck={false} autocomplete="off" aria-describedby="filter-error" />
      </label>
      <label>Name starts with<input name="name" defaultValue={(params.get('name') ?? '').replace(/\*$/, '')} /></label>
      <Select name="status" label="Status" options={['reachable', 'unreachable', 'unknown']} value={params.get('status') ?? ''} />
      <Select name="state" label="State" options={STATES} value={params.get('state') ?? ''} />
      <Select name="accepted" label="Acceptance" options={['accepted', 'pending', 'refused']} value={params.get('accepted') ?? ''} />
      <label>Region<input name="region" defaultValue={params.get('region') ?? ''} placeholder="eu-*" /></label>
      <label>Group<input name="group" defaultValue={params.get('group') ?? ''} /></label>
      <label>Tag<input name="tag" defaultValue={tag ? `${tag.slice(4)}=${params.get(tag)}` : ''} placeholder="env=prod" /></label>
      <Select name="has_agent" label="Agent" options={['true', 'false']} value={params.get('has_agent') ?? ''} />
      <Select name="relay" label="Relay" options={['true', 'false']} value={params.get('relay') ?? ''} />
      <div class="filter-actions">
        <button type="submit">Apply</button>
        <a href="#/nodes">Clear</a>
      </div>
    </form>
  );
}

export function NodesPage({ params }: { params: URLSearchParams }) {
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const api = new URLSearchParams(params);
  api.set('per_page', String(PER_PAGE));
  api.set('page', String(page));
  const nodes = useGet<ListAnswer<NodeRow> & { totals: Record<string, number> }>(`/api/1/nodes?${api}`);
  const ids = nodes.data?.data.map((n) => n.id) ?? [];
  const comp = useGet<ListAnswer<NodeComplianceRow>>(
    ids.length ? `/api/1/compliance/nodes?filter=${encodeURIComponent(JSON.stringify({ key: 'id', values: ids }))}` : null,
  );
  const byId = new Map(comp.data?.data.map((c) => [c.node_id, c]) ?? []);
  const filtered = [...params.keys()].some((k) => !RESERVED.has(k));
  return (
    <>
      <h1>Nodes</h1>
      <FilterBar params={params} />
      {nodes.error ? (params.get('q') && (nodes.error as { code?: string }).code === 'ERR_FILTER_SYNTAX'
        ? <FilterError error={nodes.error} text={params.get('q')!} /> : <ErrorBox error={nodes.error} />)
        : !nodes.data ? <Loading /> : ((r) => (
        <>
          <p class="summary" aria-live="polite">
            {r.total.toLocaleString()} {filtered ? 'matching ' : ''}nodes: {r.totals.reachable ?? 0} reachable, {r.totals.unreachable ?? 0} unreachable, {r.totals.unknown ?? 0} unknown
          </p>
          <div class="table-wrap">
            <table class="list">
              <thead><tr>
                <SortHeader path="/nodes" field="name" label="Name" params={params} />
                <SortHeader path="/nodes" field="status" label="Status" params={params} />
                <SortHeader path="/nodes" field="state" label="State" params={params} />
                <SortHeader path="/nodes" field="accepted" label="Acceptance" params={params} />
                <SortHeader path="/nodes" field="compliance" label="Compliance" params={params} firstOrder="asc" />
                <SortHeader path="/nodes" field="last_run_at" label="Last run" params={params} />
                <th scope="col">OS</th>
                <SortHeader path="/nodes" field="region" label="Region" params={params} />
              </tr></thead>
              <tbody>
                {r.data.length === 0 && <tr><td colSpan={8} class="muted">No node matches.</td></tr>}
                {r.data.map((n) => {
                  const c = byId.get(n.id);
                  return (
                    <tr key={n.id}>
                      <th scope="row"><a href={`#/nodes/${encodeURIComponent(n.id)}`}>{n.name}</a>{n.relay && <> <span class="badge">relay</span></>}</th>
                      <td><Badge value={n.status} /></td>
                      <td>{n.state}</td>
                      <td><Badge value={n.accepted} /></td>
                      <td>{c ? <><Percent value={c.compliance} /> <ComplianceBar counts={c.counts} /></> : <span class="muted">—</span>}</td>
                      <td><Time iso={n.last_run_at} /></td>
                      <td>{[n.os_name, n.os_version].filter(Boolean).join(' ') || <span class="muted">—</span>}</td>
                      <td>{n.region ?? <span class="muted">—</span>}</td>
                    </tr>
                  );
                })}
              </tbody>
            </table>
          </div>
          <Pager total={r.total} page={page} perPage={PER_PAGE} go={pageLink('/nodes', params)} />
        </>
      ))(nodes.data)}
    </>
  );
}
