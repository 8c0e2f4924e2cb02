/**
 * Rules: compliance per rule, and the drill-down from a rule to its directives and to the nodes
 * under it (or under one of its directives) with each node's state for that rule alone, worst
 * first, filterable by state. The agent's own checks (the built-in rule `capstan-agent`) have a
 * page too, though no admin defines them.
 */
import { useState } from 'preact/hooks';
import type { ListAnswer, WithPercent } from '../api';
import { SYSTEM_RULE } from '@capstan/shared/policy/system';
import { useCanWrite } from '../me';
import { href, navigate } from '../router';
import { ComplianceBar, ErrorBox, Pager, Percent, Section, Show, SortHeader, STATES, stateLabel, useGet } from '../ui';
import { RuleForm } from './edit-rule';

export interface Rule { id: string; name?: string; directives: string[]; groups: string[]; updated_at?: string }
export interface RuleRow extends WithPercent { rule_id: string; nodes: number }
export interface DirRow extends WithPercent { rule_id: string; directive_id: string; nodes: number }
interface TargetNode extends WithPercent { node_id: string; hostname: string; status: string; last_run_at: string | null }

const enc = encodeURIComponent;
const PER_PAGE = 50;

export function RulesPage() {
  const canWrite = useCanWrite();
  const rules = useGet<ListAnswer<Rule>>('/api/1/rules');
  const comp = useGet<ListAnswer<RuleRow>>('/api/1/compliance/rules?max_age=60');
  const by = new Map(comp.data?.data.map((r) => [r.rule_id, r]) ?? []);
  const system = by.get(SYSTEM_RULE);
  return (
    <>
      <h1>Rules {canWrite && <a class="button" href="#/rules/new/edit">New rule</a>}</h1>
      <Show f={rules}>{(r) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Rule</th><th scope="col">Directives</th><th scope="col">Groups</th><th scope="col">Nodes</th><th scope="col">Compliance</th></tr></thead>
          <tbody>
            {r.data.length === 0 && <tr><td colSpan={5} class="muted">No rule yet.</td></tr>}
            {r.data.map((x) => {
              const c = by.get(x.id);
              return (
                <tr key={x.id}>
                  <th scope="row"><a href={`#/rules/${enc(x.id)}`}>{x.name || x.id}</a></th>
                  <td>{x.directives.map((d, i) => <>{i > 0 && ', '}<a href={`#/directives/${enc(d)}`}>{d}</a></>)}</td>
                  <td>{x.groups.map((g, i) => <>{i > 0 && ', '}<a href={`#/groups/${enc(g)}`}>{g}</a></>)}</td>
                  <td>{c?.nodes ?? 0}</td>
                  <td>{c ? <><Percent value={c.compliance} /> <ComplianceBar counts={c.counts} /></> : <span class="muted">no data</span>}</td>
                </tr>
              );
            })}
            {system && (
              <tr>
                <th scope="row"><a href={`#/rules/${SYSTEM_RULE}`}>{SYSTEM_RULE}</a> <span class="badge">built in</span></th>
                <td class="muted">the agent's own checks</td><td class="muted">every node with an agent</td>
                <td>{system.nodes}</td><td><Percent value={system.compliance} /> <ComplianceBar counts={system.counts} /></td>
              </tr>
            )}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}

/** The nodes under a rule (or one of its directives), worst first, with a state filter; all in the address. */
function TargetNodes({ rule, params }: { rule: string; params: URLSearchParams }) {
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const q = new URLSearchParams({ per_page: String(PER_PAGE), page: String(page) });
  for (const k of ['directive', 'state', 'order']) if (params.get(k)) q.set(k, params.get(k)!);
  const nodes = useGet<ListAnswer<TargetNode>>(`/api/1/compliance/rules/${enc(rule)}/nodes?${q}`);
  const directive = params.get('directive');
  const path = `/rules/${rule}`;
  const setParam = (k: string, v: string) => {
    const next = new URLSearchParams(params);
    if (v) next.set(k, v);
    else next.delete(k);
    next.delete('page');
    navigate(path, next);
  };
  return (
    <Section title={directive ? `Nodes under directive ${directive}` : 'Nodes under this rule'} id="nodes" actions={
      <label class="inline-label">Only nodes with items in state
        <select value={params.get('state') ?? ''} onChange={(e) => setParam('state', (e.target as HTMLSelectElement).value)}>
          <option value="">any state</option>
          {STATES.map((s) => <option key={s} value={s}>{stateLabel(s)}</option>)}
        </select>
      </label>
    }>
      {directive && <p><a href={href(path, Object.fromEntries([...params].filter(([k]) => k !== 'directive' && k !== 'page')))}>All of the rule's directives</a></p>}
      <Show f={nodes}>{(r) => (
        <>
          <div class="table-wrap"><table class="list">
            <thead><tr>
              <th scope="col">Node</th><th scope="col">Status</th>
              <SortHeader path={path} field="compliance" label="Compliance" params={new URLSearchParams([...params, ['sort', 'compliance']])} dflt="compliance" />
              <th scope="col">Items</th>
            </tr></thead>
            <tbody>
              {r.data.length === 0 && <tr><td colSpan={4} class="muted">No node matches.</td></tr>}
              {r.data.map((n) => (
                <tr key={n.node_id}>
                  <th scope="row"><a href={href(`/nodes/${n.node_id}`, { rule, ...(directive && { directive }) })}>{n.hostname}</a></th>
                  <td><span class={`badge b-${n.status}`}>{n.status}</span></td>
                  <td><Percent value={n.compliance} /> <ComplianceBar counts={n.counts} label={n.hostname} /></td>
                  <td class="small">{STATES.filter((s) => n.counts[s]).map((s) => `${n.counts[s]} ${stateLabel(s)}`).join(', ')}</td>
                </tr>
              ))}
            </tbody>
          </table></div>
          <Pager total={r.total} page={page} perPage={PER_PAGE} go={(p) => setParam('page', String(p))} />
        </>
      )}</Show>
    </Section>
  );
}

export function RulePage({ id, params }: { id: string; params: URLSearchParams }) {
  const canWrite = useCanWrite();
  const builtin = id === SYSTEM_RULE;
  const rule = useGet<{ data: Rule }>(builtin ? null : `/api/1/rules/${enc(id)}`);
  // Fleet-wide figures may be up to a minute old (as on the dashboard); Refresh asks for new ones.
  const [maxAge, setMaxAge] = useState(60);
  const [nonce, setNonce] = useState(0);
  const comp = useGet<ListAnswer<RuleRow>>(`/api/1/compliance/rules?max_age=${maxAge}`, String(nonce));
  const dirs = useGet<ListAnswer<DirRow>>(`/api/1/compliance/directives?max_age=${maxAge}`, String(nonce));
  const c = comp.data?.data.find((r) => r.rule_id === id);
  const directiveIds = builtin ? (dirs.data?.data.filter((d) => d.rule_id === id).map((d) => d.directive_id) ?? []) : (rule.data?.data.directives ?? []);
  if (rule.error) return <><h1>Rule {id}</h1><ErrorBox error={rule.error} /></>;
  const r = rule.data?.data;
  return (
    <>
      <h1>Rule {builtin ? id : (r?.name || id)} {builtin && <span class="badge">built in</span>}
        {canWrite && !builtin && r && <a class="button" href={`#/rules/${enc(id)}/edit`}>Edit</a>}</h1>
      {builtin && <p>The agent's own checks, reported on every run whatever the policy: its state directory, its node key, and which policy the run applied (or why a fresh one was refused). Every node with an agent is under it.</p>}
      <p class="big"><Percent value={c?.compliance} /> <span class="muted">{c?.nodes ?? 0} node{c?.nodes === 1 ? '' : 's'} with an agent</span></p>
      <p class="muted small">These figures may be up to a minute old; the nodes below are counted now. <button type="button" class="link" onClick={() => { setMaxAge(1); setNonce((n) => n + 1); }}>Refresh figures</button></p>
      <ComplianceBar counts={c?.counts} label="this rule" />
      <Section title="Directives" id="directives">
        <table class="compact">
          <thead><tr><th scope="col">Directive</th><th scope="col">Nodes</th><th scope="col">Compliance</th><th scope="col"><span class="sr">Drill down</span></th></tr></thead>
          <tbody>{directiveIds.map((d) => {
            const x = dirs.data?.data.find((y) => y.rule_id === id && y.directive_id === d);
            return (
              <tr key={d}>
                <th scope="row">{builtin ? d : <a href={`#/directives/${enc(d)}`}>{d}</a>}</th>
                <td>{x?.nodes ?? 0}</td>
                <td>{x ? <><Percent value={x.compliance} /> <ComplianceBar counts={x.counts} /></> : <span class="muted">no data</span>}</td>
                <td><a href={href(`/rules/${id}`, { directive: d })} aria-label={`Nodes under ${d}`}>nodes</a></td>
              </tr>
            );
          })}</tbody>
        </table>
      </Section>
      {!builtin && r && (
        <Section title="Groups" id="groups">
          <ul class="inline">{r.groups.map((g) => <li key={g}><a href={`#/groups/${enc(g)}`}>{g}</a></li>)}</ul>
        </Section>
      )}
      <TargetNodes rule={id} params={params} />
    </>
  );
}

export function RuleEditPage({ id }: { id: string | null }) {
  const rule = useGet<{ data: Rule }>(id === null ? null : `/api/1/rules/${enc(id)}`);
  if (id !== null && !rule.data) return <Show f={rule}>{() => null}</Show>;
  return <RuleForm rule={rule.data?.data ?? null} />;
}
