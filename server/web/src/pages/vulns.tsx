/**
 * Vulnerabilities, read-only: the fleet's grade, the feeds' state, the advisories affecting nodes
 * (worst first, filtered by severity, KEV and a node filter, in the address), and a node page's
 * section with each finding and why it matched (docs/vulnerabilities.md).
 */
import type { ListAnswer } from '../api';
import { navigate, pageLink } from '../router';
import { Pager, Section, Show, Time, useGet } from '../ui';

interface Exposure { kev: { date_added: string; due_date: string | null } | null; epss: { epss: number; percentile: number } | null }
interface Row extends Exposure { id: string; cves: string[]; summary: string | null; rating: string | null; nodes: number; muted_nodes: number }
interface Feed { name: string; kind: string; source: string; imported_at: string | null; feed_date: string | null; stale: boolean; error: string | null }
interface Match { name: string; via: string; compared: string; listed?: boolean; range?: { introduced?: string; fixed?: string; last_affected?: string; limit?: string }; note?: string }
interface Finding extends Exposure { advisory: string; cves: string[]; package: string; version: string; rating: string | null; fixed: string | null; match: Match; muted: { mute: string; reason: string } | null }
interface NodeScore { grade: string | null; compliance: { percent: number | null; grade: string | null }; exposure: { points: number; advisories: number; kev: number; grade: string } }
interface Fleet { grade: string | null; nodes: number; by_grade: Record<string, number> }

const PER_PAGE = 50;
const FIELDS = ['severity', 'kev', 'q'] as const;

const rating = (r: string | null) => (r ? <span class={`badge ${r === 'critical' || r === 'high' ? 'b-error' : 'b-pending'}`}>{r}</span> : <span class="muted">unrated</span>);
const kev = (k: Exposure['kev']) => (k ? <span class="badge b-error" title={`added ${k.date_added}${k.due_date ? `, due ${k.due_date}` : ''}`}>KEV</span> : null);

function reason(m: Match): string {
  const where = m.listed ? 'listed in the advisory' : `in [${m.range?.introduced ?? ''}, ${m.range?.fixed ?? m.range?.last_affected ?? '∞'})`;
  return `${m.via === 'source' ? 'source ' : ''}${m.name} ${m.compared} ${where}${m.note ? ` (${m.note})` : ''}`;
}

export function VulnerabilitiesPage({ params }: { params: URLSearchParams }) {
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const q = new URLSearchParams({ per_page: String(PER_PAGE), page: String(page) });
  for (const k of FIELDS) if (params.get(k)) q.set(k, params.get(k)!);
  const list = useGet<ListAnswer<Row>>(`/api/1/vulnerabilities?${q}`);
  const feeds = useGet<{ data: Feed[] }>('/api/1/vulnerabilities/feeds');
  const score = useGet<{ data: { fleet: Fleet } }>('/api/1/score');
  const submit = (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.target as HTMLFormElement);
    const out = new URLSearchParams();
    for (const k of FIELDS) {
      const v = String(f.get(k) ?? '').trim();
      if (v) out.set(k, v);
    }
    navigate('/vulnerabilities', out);
  };
  return (
    <>
      <h1>Vulnerabilities</h1>
      <Show f={score}>{(s) => (
        <p>Fleet grade <strong>{s.data.fleet.grade ?? '—'}</strong> over {s.data.fleet.nodes} node(s):{' '}
          {Object.entries(s.data.fleet.by_grade).map(([g, n]) => `${g} ${n}`).join(', ')}</p>
      )}</Show>
      <form class="filters" onSubmit={submit} role="search" aria-label="Filter the vulnerabilities" key={params.toString()}>
        <label>Severity at least<select name="severity" defaultValue={params.get('severity') ?? ''}>
          <option value="">any</option>{['low', 'medium', 'high', 'critical'].map((r) => <option value={r} key={r}>{r}</option>)}
        </select></label>
        <label>KEV<select name="kev" defaultValue={params.get('kev') ?? ''}><option value="">any</option><option value="true">in KEV</option><option value="false">not in KEV</option></select></label>
        <label>Nodes<input name="q" defaultValue={params.get('q') ?? ''} placeholder="group = dmz" /></label>
        <div class="filter-actions"><button type="submit">Apply</button><a href="#/vulnerabilities">Clear</a></div>
      </form>
      <Show f={list}>{(r) => (
        <>
          <div class="table-wrap"><table class="list">
            <thead><tr><th scope="col">Advisory</th><th scope="col">CVEs</th><th scope="col">Rating</th><th scope="col">EPSS</th><th scope="col">Nodes</th><th scope="col">Muted</th><th scope="col">Summary</th></tr></thead>
            <tbody>
              {r.data.length === 0 && <tr><td colSpan={7} class="muted">No node is affected by a known vulnerability.</td></tr>}
              {r.data.map((v) => (
                <tr key={v.id}>
                  <th scope="row"><code>{v.id}</code> {kev(v.kev)}</th>
                  <td>{v.cves.join(' ') || '—'}</td>
                  <td>{rating(v.rating)}</td>
                  <td>{v.epss ? v.epss.epss.toFixed(3) : '—'}</td>
                  <td>{v.nodes}</td>
                  <td>{v.muted_nodes || ''}</td>
                  <td class="small">{v.summary ?? ''}</td>
                </tr>
              ))}
            </tbody>
          </table></div>
          <Pager total={r.total} page={page} perPage={PER_PAGE} go={pageLink('/vulnerabilities', params)} />
        </>
      )}</Show>
      <Section title="Feeds" id="feeds">
        <Show f={feeds}>{(r) => (
          <div class="table-wrap"><table class="list">
            <thead><tr><th scope="col">Feed</th><th scope="col">Kind</th><th scope="col">Last import</th><th scope="col">Feed date</th><th scope="col">State</th></tr></thead>
            <tbody>
              {r.data.length === 0 && <tr><td colSpan={5} class="muted">No feed configured ([vulnerabilities] in server.toml).</td></tr>}
              {r.data.map((f) => (
                <tr key={f.name}>
                  <th scope="row">{f.name}<br /><code class="muted small">{f.source}</code></th>
                  <td>{f.kind}</td>
                  <td><Time iso={f.imported_at} /></td>
                  <td><Time iso={f.feed_date} /></td>
                  <td>{f.error ? <span class="badge b-error">{f.error}</span> : f.stale ? <span class="badge b-pending">stale</span> : <span class="badge b-reachable">ok</span>}</td>
                </tr>
              ))}
            </tbody>
          </table></div>
        )}</Show>
      </Section>
    </>
  );
}

/** A node page's section: its findings, worst first, each with the reason it matched. */
export function NodeVulnerabilities({ id }: { id: string }) {
  const v = useGet<{ data: { findings: Finding[]; counts: Record<string, number> } }>(`/api/1/nodes/${encodeURIComponent(id)}/vulnerabilities`);
  // An accepted node's score (a pending one has none: its answer is a 404, not shown).
  const score = useGet<{ data: NodeScore }>(`/api/1/nodes/${encodeURIComponent(id)}/score`);
  const s = score.data?.data;
  return (
    <Section title="Vulnerabilities" id="vulnerabilities">
      {s && (
        <p data-testid="node-score">Grade <strong>{s.grade ?? '—'}</strong>: compliance {s.compliance.percent === null ? 'n/a' : `${s.compliance.percent}%`} ({s.compliance.grade ?? '—'}),
          exposure {s.exposure.points} point(s) over {s.exposure.advisories} advisory(ies){s.exposure.kev ? `, ${s.exposure.kev} in KEV` : ''} ({s.exposure.grade})</p>
      )}
      <Show f={v}>{(r) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Advisory</th><th scope="col">Rating</th><th scope="col">Package</th><th scope="col">Fixed in</th><th scope="col">Why</th></tr></thead>
          <tbody>
            {r.data.findings.length === 0 && <tr><td colSpan={5} class="muted">No known vulnerability.</td></tr>}
            {r.data.findings.map((f) => (
              <tr key={`${f.advisory} ${f.package}`} class={f.muted ? 'muted' : undefined}>
                <th scope="row"><code>{f.advisory}</code> {kev(f.kev)}<br /><span class="muted small">{f.cves.join(' ')}</span></th>
                <td>{rating(f.rating)}{f.muted && <><br /><span class="small" title={f.muted.reason}>muted</span></>}</td>
                <td>{f.package} {f.version}</td>
                <td>{f.fixed ?? <span class="muted">no fix yet</span>}</td>
                <td class="small">{reason(f.match)}</td>
              </tr>
            ))}
          </tbody>
        </table></div>
      )}</Show>
    </Section>
  );
}
