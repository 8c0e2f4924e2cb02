/** Policy groups: compliance per group, and a group's static members and the nodes its filter matches. */
import type { ListAnswer, WithPercent } from '../api';
import { useCanWrite } from '../me';
import { href, navigate, pageLink } from '../router';
import { ComplianceBar, Facts, Pager, Percent, Section, Show, useGet } from '../ui';
import { GroupForm } from './edit-group';
import { GroupProperties } from './node-properties';
import type { LevelProperty } from './properties';
import { ReadOnly } from './edit-common';
import type { NodeRow } from './nodes';

export interface Filter { key: string; values: string[]; exclude?: boolean }
export interface Group { id: string; name?: string; nodes?: string[]; filter?: Filter[]; builtin?: boolean; updated_at?: string; properties?: Record<string, LevelProperty>; priority?: number }
interface GroupRow extends WithPercent { group_id: string; nodes: number; relays: number; agentless: number }

const enc = encodeURIComponent;

/** A group's filter as text: the expression of a `q` filter, else each filter as `key = a | b`. */
export const filterText = (filter: Filter[] | undefined) =>
  (filter ?? []).map((f) => (f.key === 'q' ? f.values.join(' and ') : `${f.exclude ? 'not ' : ''}${f.key} = ${f.values.join(' | ')}`)).join(' and ');

export function GroupsPage() {
  const canWrite = useCanWrite();
  const groups = useGet<ListAnswer<Group>>('/api/1/groups');
  const comp = useGet<ListAnswer<GroupRow>>('/api/1/compliance/groups?max_age=60');
  const by = new Map(comp.data?.data.map((g) => [g.group_id, g]) ?? []);
  return (
    <>
      <h1>Groups {canWrite && <a class="button" href="#/groups/new/edit">New group</a>}</h1>
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
          {r.total > 50 && <Pager total={r.total} page={page} perPage={50} go={pageLink(location.hash.slice(1).split('?')[0]!, params, pageKey)} />}
          <p><a href={href('/nodes', query)}>Open in the node list</a></p>
        </>
      )}</Show>
    </Section>
  );
}

export function GroupPage({ id, params }: { id: string; params: URLSearchParams }) {
  const canWrite = useCanWrite();
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
          <h1>Group {g.name || g.id} {g.builtin && <span class="badge">built in</span>}
            {canWrite && !g.builtin && <a class="button" href={`#/groups/${enc(g.id)}/edit`}>Edit</a>}</h1>
          <p class="big"><Percent value={c?.compliance} /></p>
          <ComplianceBar counts={c?.counts} label="this group" />
          <Facts items={[
            ['Id', <code>{g.id}</code>], ['Managed members', c?.nodes], ['Relays', c?.relays], ['Agentless', c?.agentless],
            ['Filter', filterText(g.filter) && <code>{filterText(g.filter)}</code>],
          ]} />
          {g.nodes?.length ? <Members title={`Static members (${g.nodes.length})`} query={staticQuery} params={params} pageKey="spage" /> : null}
          {g.filter?.length ? <Members title="Members by filter" query={filterQuery} params={params} pageKey="fpage" /> : null}
          {!g.builtin && <GroupProperties properties={g.properties} priority={g.priority} />}
        </>
      );
    }}</Show>
  );
}

export function GroupEditPage({ id }: { id: string | null }) {
  const canWrite = useCanWrite();
  const group = useGet<{ data: Group }>(id === null || !canWrite ? null : `/api/1/groups/${enc(id)}`);
  if (!canWrite) return <ReadOnly what="groups" />;
  if (id !== null && !group.data) return <Show f={group}>{() => null}</Show>;
  return <GroupForm group={group.data?.data ?? null} />;
}
