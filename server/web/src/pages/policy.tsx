/** Rules, directives and policy groups: compliance per target, and the nodes under each. */
import type { ListAnswer, WithPercent } from '../api';
import { href } from '../router';
import { ComplianceBar, Facts, Pager, Percent, Section, Show, useGet } from '../ui';
import { navigate } from '../router';
import type { NodeRow } from './nodes';

interface Rule { id: string; name?: string; directives: string[]; groups: string[] }
interface Directive { id: string; name?: string; method: string; mode?: string; condition?: string; params: Record<string, unknown> }
interface Filter { key: string; values: string[]; exclude?: boolean }
interface Group { id: string; name?: string; nodes?: string[]; filter?: Filter[] }
interface RuleRow extends WithPercent { rule_id: string; nodes: number }
interface DirRow extends WithPercent { rule_id: string; directive_id: string; nodes: number }
interface GroupRow extends WithPercent { group_id: string; nodes: number; relays: number; agentless: number }

const enc = encodeURIComponent;

export function RulesPage() {
  const rules = useGet<ListAnswer<Rule>>('/api/1/rules');
  const comp = useGet<ListAnswer<RuleRow>>('/api/1/compliance/rules?max_age=60');
  const by = new Map(comp.data?.data.map((r) => [r.rule_id, r]) ?? []);
  return (
    <>
      <h1>Rules</h1>
      <Show f={rules}>{(r) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Rule</th><th scope="col">Directives</th><th scope="col">Groups</th><th scope="col">Nodes</th><th scope="col">Compliance</th></tr></thead>
          <tbody>
            {r.data.length === 0 && <tr><td colSpan={5} class="muted">No rule yet (POST /api/1/rules).</td></tr>}
            {r.data.map((x) => {
              const c = by.get(x.id);
              return (
                <tr key={x.id}>
                  <th scope="row"><a href={`#/rules/${enc(x.id)}`}>{x.name || x.id}</a></th>
                  <td>{x.directives.join(', ')}</td>
                  <td>{x.groups.map((g, i) => <>{i > 0 && ', '}<a href={`#/groups/${enc(g)}`}>{g}</a></>)}</td>
                  <td>{c?.nodes ?? 0}</td>
                  <td>{c ? <><Percent value={c.compliance} /> <ComplianceBar counts={c.counts} /></> : <span class="muted">no data</span>}</td>
                </tr>
              );
            })}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}

export function RulePage({ id }: { id: string }) {
  const rule = useGet<{ data: Rule }>(`/api/1/rules/${enc(id)}`);
  const comp = useGet<ListAnswer<RuleRow>>('/api/1/compliance/rules?max_age=60');
  const dirs = useGet<ListAnswer<DirRow>>('/api/1/compliance/directives?max_age=60');
  const c = comp.data?.data.find((r) => r.rule_id === id);
  return (
    <Show f={rule}>{({ data: r }) => (
      <>
        <h1>Rule {r.name || r.id}</h1>
        <p class="big"><Percent value={c?.compliance} /> <span class="muted">{c?.nodes ?? 0} nodes with an agent</span></p>
        <ComplianceBar counts={c?.counts} label="this rule" />
        <Section title="Directives" id="directives">
          <table class="compact">
            <thead><tr><th scope="col">Directive</th><th scope="col">Nodes</th><th scope="col">Compliance</th></tr></thead>
            <tbody>{r.directives.map((d) => {
              const x = dirs.data?.data.find((y) => y.rule_id === id && y.directive_id === d);
              return <tr key={d}><th scope="row">{d}</th><td>{x?.nodes ?? 0}</td><td>{x ? <><Percent value={x.compliance} /> <ComplianceBar counts={x.counts} /></> : <span class="muted">no data</span>}</td></tr>;
            })}</tbody>
          </table>
        </Section>
        <Section title="Groups: the nodes under this rule" id="groups">
          <ul>{r.groups.map((g) => <li key={g}><a href={`#/groups/${enc(g)}`}>{g}</a></li>)}</ul>
        </Section>
      </>
    )}</Show>
  );
}

export function DirectivesPage() {
  const dirs = useGet<ListAnswer<Directive>>('/api/1/directives');
  const comp = useGet<ListAnswer<DirRow>>('/api/1/compliance/directives?max_age=60');
  return (
    <>
      <h1>Directives</h1>
      <Show f={dirs}>{(d) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Directive</th><th scope="col">Method</th><th scope="col">Mode</th><th scope="col">In rules</th><th scope="col">Compliance</th></tr></thead>
          <tbody>
            {d.data.length === 0 && <tr><td colSpan={5} class="muted">No directive yet (POST /api/1/directives).</td></tr>}
            {d.data.map((x) => {
              const rows = comp.data?.data.filter((r) => r.directive_id === x.id) ?? [];
              const counts: Record<string, number> = {};
              for (const r of rows) for (const [k, v] of Object.entries(r.counts)) counts[k] = (counts[k] ?? 0) + v;
              const total = Object.values(counts).reduce((s, v) => s + v, 0);
              const good = (counts.success ?? 0) + (counts.repaired ?? 0) + (counts.audit_compliant ?? 0) + (counts.not_applicable ?? 0);
              return (
                <tr key={x.id}>
                  <th scope="row">{x.name || x.id}<br /><code class="muted small">{x.id}</code></th>
                  <td><code>{x.method}</code></td>
                  <td>{x.mode ?? 'enforce'}</td>
                  <td>{rows.map((r, i) => <>{i > 0 && ', '}<a href={`#/rules/${enc(r.rule_id)}`}>{r.rule_id}</a></>)}</td>
                  <td>{total > 0 ? <><Percent value={Math.round((good / total) * 10000) / 100} /> <ComplianceBar counts={counts} /></> : <span class="muted">no data</span>}</td>
                </tr>
              );
            })}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}

export function GroupsPage() {
  const groups = useGet<ListAnswer<Group>>('/api/1/groups');
  const comp = useGet<ListAnswer<GroupRow>>('/api/1/compliance/groups?max_age=60');
  const by = new Map(comp.data?.data.map((g) => [g.group_id, g]) ?? []);
  return (
    <>
      <h1>Groups</h1>
      <Show f={groups}>{(g) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Group</th><th scope="col">Kind</th><th scope="col">Members</th><th scope="col">Compliance</th></tr></thead>
          <tbody>
            {g.data.length === 0 && <tr><td colSpan={4} class="muted">No group yet (POST /api/1/groups).</td></tr>}
            {g.data.map((x) => {
              const c = by.get(x.id);
              return (
                <tr key={x.id}>
                  <th scope="row"><a href={`#/groups/${enc(x.id)}`}>{x.name || x.id}</a></th>
                  <td>{[x.nodes?.length ? 'static' : '', x.filter?.length ? 'dynamic' : ''].filter(Boolean).join(' + ')}</td>
                  <td>{c ? `${c.nodes} managed, ${c.relays} relays, ${c.agentless} agentless` : '…'}</td>
                  <td>{c ? <><Percent value={c.compliance} /> <ComplianceBar counts={c.counts} /></> : <span class="muted">no data</span>}</td>
                </tr>
              );
            })}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}

function Members({ title, query, params, pageKey }: { title: string; query: URLSearchParams; params: URLSearchParams; pageKey: string }) {
  const page = Math.max(1, Number(params.get(pageKey) ?? 1) || 1);
  const q = new URLSearchParams(query);
  q.set('per_page', '50');
  q.set('page', String(page));
  const nodes = useGet<ListAnswer<NodeRow>>(`/api/1/nodes?${q}`);
  return (
    <Section title={title}>
      <Show f={nodes}>{(r) => (
        <>
          <ul class="columns">{r.data.map((n) => <li key={n.id}><a href={`#/nodes/${enc(n.id)}`}>{n.name}</a> <span class={`badge b-${n.status}`}>{n.status}</span></li>)}</ul>
          {r.total > 50 && <Pager total={r.total} page={page} perPage={50} go={(p) => {
            const next = new URLSearchParams(params);
            next.set(pageKey, String(p));
            navigate(location.hash.slice(1).split('?')[0]!, next);
          }} />}
          <p><a href={href('/nodes', query)}>Open in the node list</a></p>
        </>
      )}</Show>
    </Section>
  );
}

export function GroupPage({ id, params }: { id: string; params: URLSearchParams }) {
  const group = useGet<{ data: Group }>(`/api/1/groups/${enc(id)}`);
  const comp = useGet<ListAnswer<GroupRow>>('/api/1/compliance/groups?max_age=60');
  const c = comp.data?.data.find((g) => g.group_id === id);
  return (
    <Show f={group}>{({ data: g }) => {
      const filterQuery = new URLSearchParams();
      for (const f of g.filter ?? []) filterQuery.append('filter', JSON.stringify(f));
      const staticQuery = new URLSearchParams();
      // At most 100 values per filter: the first 100 static members are listed here.
      if (g.nodes?.length) staticQuery.append('filter', JSON.stringify({ key: 'id', values: g.nodes.slice(0, 100) }));
      return (
        <>
          <h1>Group {g.name || g.id}</h1>
          <p class="big"><Percent value={c?.compliance} /></p>
          <ComplianceBar counts={c?.counts} label="this group" />
          <Facts items={[
            ['Id', <code>{g.id}</code>], ['Managed members', c?.nodes], ['Relays', c?.relays], ['Agentless', c?.agentless],
            ['Filter', (g.filter ?? []).map((f) => `${f.exclude ? 'not ' : ''}${f.key} = ${f.values.join(' | ')}`).join(' and ')],
          ]} />
          {g.nodes?.length ? <Members title={`Static members (${g.nodes.length})`} query={staticQuery} params={params} pageKey="spage" /> : null}
          {g.filter?.length ? <Members title="Members by filter" query={filterQuery} params={params} pageKey="fpage" /> : null}
        </>
      );
    }}</Show>
  );
}
