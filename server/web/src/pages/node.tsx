/**
 * One node: identity, the policy groups it is in and the rules that reach it (and through which
 * group), compliance by rule → directive → component with each report's message, a "run now"
 * that shows the remote run's outcome, its properties, custom facts and the facts that failed,
 * the runs timeline, the changes with their diffs, the inventory (packages searchable), the
 * lifecycle history; a relay's page lists the nodes behind it.
 */
import { useEffect, useState } from 'preact/hooks';
import type { ListAnswer, WithPercent } from '../api';
import { useCanWrite } from '../me';
import { Badge, ComplianceBar, Facts, Percent, Section, Show, Time, stateLabel, useGet } from '../ui';
import { NodeVulnerabilities } from './vulns';
import type { NodeRow } from './nodes';
import { BehindRelay, CustomFacts, RunNow, type Inventory } from './node-parts';
import { ClaimNotice } from './node-claim';
import { NodeProperties } from './node-properties';

interface NodeFull extends NodeRow {
  agent_version: string | null; policy_server: string | null; accepted_at: string | null; last_inventory_at: string | null;
  last_contact_at: string | null; policy_config_id: string | null; tags: Record<string, string>; groups: string[];
  clock_skew: number | null; state_changed_at: string;
}
interface Item { rule_id: string; directive_id: string; component: string; state: string; outcome: string | null; count: number }
interface NodeCompliance extends WithPercent {
  class: string; time_state: string | null; run: { id: number; started_at: string; config_id: string | null } | null;
  summary: WithPercent; rules: Array<WithPercent & { rule_id: string }>; directives: Array<WithPercent & { rule_id: string; directive_id: string }>;
  components: Item[]; applying_since: string | null; last_answer_at: string | null;
}
interface Report { rule_id: string; directive_id: string; component: string; key_value: string; event_type: string; msg: string }
interface Run {
  id: number; started_at: string; config_id: string | null; complete: boolean; report_count: number; counts: Record<string, number>; received_at: string; reports?: Report[];
  /** Why the run's stored log could not be read (its reports are then []). */
  reports_unreadable?: string;
}
export interface Change { id: number; at: string; node_id?: string; label: string; rule_id: string; directive_id: string; component: string; key_value: string; event_type: string; message: string; diff: string | null; diff_truncated: boolean }
interface HistoryEntry { id: number; at: string; field: string; from: string | null; to: string; cause: string }
interface Identity { state: string; kid: string | null; issued_at: string | null; expires_at: string | null; forced_after: string | null; certificate_fingerprint: string | null }

const enc = encodeURIComponent;

/** The worst outcome of a run, for its colour on the timeline. */
function runClass(r: Run): string {
  const c = r.counts;
  if (!r.complete) return 'incomplete';
  if ((c.result_error ?? 0) + (c.audit_error ?? 0) > 0) return 'error';
  if ((c.audit_noncompliant ?? 0) > 0) return 'non_compliant';
  if ((c.result_repaired ?? 0) > 0) return 'repaired';
  return 'success';
}

/** One change folded to its summary (when, label, node, component, key, rule / directive); unfolded, its message and diff. */
export function ChangeItem({ c, open }: { c: Change; open?: boolean }) {
  const link = (kind: string, id: string) => <a href={`#/${kind}/${encodeURIComponent(id)}`}>{id}</a>;
  return (
    <li>
      <details open={open}>
        <summary><Time iso={c.at} /> <span class={`badge l-${c.label}`}>{c.label}</span> {c.node_id !== undefined && <>{link('nodes', c.node_id)} </>}{c.component} <code>{c.key_value}</code>{' '}
          <span class="muted">{link('rules', c.rule_id)} / {link('directives', c.directive_id)}</span></summary>
        <p>{c.message}</p>
        {c.diff ? <Diff text={c.diff} /> : <p class="muted">No diff for this change.</p>}
        {c.diff_truncated && <p class="muted">The diff was cut at the server's limit.</p>}
      </details>
    </li>
  );
}

export function Diff({ text }: { text: string }) {
  return (
    <pre class="diff">{text.split('\n').map((l, i) => (
      <span key={i} class={l.startsWith('+++') || l.startsWith('---') ? 'dh' : l.startsWith('+') ? 'da' : l.startsWith('-') ? 'dd' : l.startsWith('@@') ? 'dh' : undefined}>{l}{'\n'}</span>
    ))}</pre>
  );
}

function ComplianceTree({ c, reports, focus }: { c: NodeCompliance; reports: Report[]; focus: { rule: string | null; directive: string | null } }) {
  const msgs = new Map<string, Report[]>();
  for (const r of reports) {
    if (r.event_type === 'control' || r.event_type.startsWith('log_')) continue;
    const k = `${r.rule_id}\u0000${r.directive_id}\u0000${r.component}`;
    msgs.set(k, [...(msgs.get(k) ?? []), r]);
  }
  if (c.rules.length === 0) return <p class="muted">No rule applies to this node yet.</p>;
  return (
    <ul class="tree">
      {c.rules.map((r) => (
        <li key={r.rule_id} id={`rule-${r.rule_id}`} class={focus.rule === r.rule_id ? 'focus' : undefined}>
          <details open>
            <summary><span class="tree-k">Rule</span> <a href={`#/rules/${enc(r.rule_id)}`}>{r.rule_id}</a> <Percent value={r.compliance} /> <ComplianceBar counts={r.counts} /></summary>
            <ul>
              {c.directives.filter((d) => d.rule_id === r.rule_id).map((d) => (
                <li key={d.directive_id} class={focus.rule === r.rule_id && focus.directive === d.directive_id ? 'focus' : undefined}>
                  <details open>
                    <summary><span class="tree-k">Directive</span> <a href={`#/directives/${enc(d.directive_id)}`}>{d.directive_id}</a> <Percent value={d.compliance} /> <ComplianceBar counts={d.counts} /></summary>
                    <table class="compact components">
                      <thead><tr><th scope="col">Component</th><th scope="col">State</th><th scope="col">Messages</th></tr></thead>
                      <tbody>
                        {c.components.filter((x) => x.rule_id === r.rule_id && x.directive_id === d.directive_id).map((x) => {
                          const m = msgs.get(`${x.rule_id}\u0000${x.directive_id}\u0000${x.component}`) ?? [];
                          return (
                            <tr key={x.component}>
                              <th scope="row">{x.component}</th>
                              <td><span class={`badge s-${x.state}`}>{stateLabel(x.state)}</span></td>
                              <td>{m.length === 0 ? <span class="muted">—</span> : <ul class="msgs">{m.map((rep, i) => <li key={i}><code>{rep.key_value}</code> {rep.msg}</li>)}</ul>}</td>
                            </tr>
                          );
                        })}
                      </tbody>
                    </table>
                  </details>
                </li>
              ))}
            </ul>
          </details>
        </li>
      ))}
    </ul>
  );
}

function Packages({ packages }: { packages: Array<{ name: string; version?: string }> }) {
  const [q, setQ] = useState('');
  const shown = q ? packages.filter((p) => p.name.toLowerCase().includes(q.toLowerCase())) : packages;
  return (
    <div>
      <label>Search packages <input type="search" value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} /></label>
      <p class="muted" aria-live="polite">{shown.length} of {packages.length} packages</p>
      <div class="table-wrap scroll">
        <table class="compact">
          <thead><tr><th scope="col">Package</th><th scope="col">Version</th></tr></thead>
          <tbody>{shown.slice(0, 500).map((p) => <tr key={p.name}><td>{p.name}</td><td>{p.version ?? ''}</td></tr>)}</tbody>
        </table>
      </div>
      {shown.length > 500 && <p class="muted">The first 500 are shown: narrow the search.</p>}
    </div>
  );
}

const bytes = (n: unknown) => (typeof n === 'number' ? `${(n / 1024 ** 3).toFixed(1)} GiB` : String(n ?? ''));

function InventoryView({ inv }: { inv: Inventory }) {
  const i = inv.inventory;
  const os = i.os ?? {};
  const cpus = i.cpus;
  const disks: any[] = Array.isArray(i.disks) ? i.disks : [];
  const ifaces: any[] = Array.isArray(i.interfaces) ? i.interfaces : [];
  const packages: any[] = Array.isArray(i.packages) ? i.packages : [];
  return (
    <>
      <Facts items={[
        ['Received', <Time iso={inv.received_at} />], ['Hostname', i.hostname], ['FQDN', i.fqdn],
        ['OS', [os.name, os.version].filter(Boolean).join(' ')], ['Kernel', os.kernel], ['Architecture', os.arch],
        ['CPUs', typeof cpus === 'object' && cpus !== null ? [cpus.model, cpus.count && `× ${cpus.count}`].filter(Boolean).join(' ') : cpus],
        ['Memory', typeof i.memory === 'object' && i.memory !== null ? bytes(i.memory.total ?? i.memory.total_bytes) : bytes(i.memory)],
        ['Agent', i.agent_version], ['Machine id', i.machine_id], ['Uptime', typeof i.uptime === 'number' ? `${Math.round(i.uptime / 3600)} h` : i.uptime],
      ]} />
      <h3>Disks</h3>
      {disks.length === 0 ? <p class="muted">None reported.</p> : (
        <table class="compact"><thead><tr><th scope="col">Mount</th><th scope="col">Device</th><th scope="col">Type</th><th scope="col">Size</th><th scope="col">Free</th></tr></thead>
          <tbody>{disks.map((d, k) => <tr key={k}><td>{d.mount ?? d.mountpoint ?? ''}</td><td>{d.device ?? d.name ?? ''}</td><td>{d.fstype ?? d.type ?? ''}</td><td>{bytes(d.size ?? d.total)}</td><td>{bytes(d.free ?? d.available)}</td></tr>)}</tbody></table>
      )}
      <h3>Interfaces</h3>
      {ifaces.length === 0 ? <p class="muted">None reported.</p> : (
        <table class="compact"><thead><tr><th scope="col">Name</th><th scope="col">Addresses</th><th scope="col">MAC</th></tr></thead>
          <tbody>{ifaces.map((f, k) => <tr key={k}><td>{f.name}</td><td>{(f.addresses ?? []).map((a: any) => (typeof a === 'string' ? a : a.address)).join(', ')}</td><td>{f.mac ?? ''}</td></tr>)}</tbody></table>
      )}
      <h3>Packages</h3>
      <Packages packages={packages} />
    </>
  );
}

interface Explain { groups: string[]; rules: Array<{ id: string; name: string; via: string[]; directives: Array<{ id: string; name: string; method: string; mode: string }> }> }
export function NodePage({ id, params }: { id: string; params: URLSearchParams }) {
  const canWrite = useCanWrite();
  const base = `/api/1/nodes/${enc(id)}`;
  const policy = useGet<{ data: Explain & { config_id: string | null } }>(`${base}/policy`);
  const focus = { rule: params.get('rule'), directive: params.get('directive') };
  const node = useGet<{ data: NodeFull }>(base);
  const comp = useGet<{ data: NodeCompliance }>(`${base}/compliance`);
  // Arrived from a rule's or directive's nodes: that rule's part of the tree is in view.
  useEffect(() => {
    if (comp.data && focus.rule) document.getElementById(`rule-${focus.rule}`)?.scrollIntoView();
  }, [comp.data, focus.rule]);
  const started = comp.data?.data.run?.started_at;
  const lastRun = useGet<ListAnswer<Run>>(started ? `${base}/runs?reports=true&per_page=1&from=${enc(started)}&to=${enc(new Date(Date.parse(started) + 1000).toISOString())}` : null);
  const runs = useGet<ListAnswer<Run>>(`${base}/runs?per_page=50`);
  const changes = useGet<ListAnswer<Change> & { total_capped: boolean }>(`/api/1/changes?node=${enc(id)}&per_page=20`);
  const history = useGet<ListAnswer<HistoryEntry>>(`${base}/history?per_page=50`);
  const identity = useGet<{ data: Identity }>(`${base}/identity`);
  const inventory = useGet<{ data: Inventory }>(`${base}/inventory`);
  return (
    <>
      <Show f={node}>{({ data: n }) => (
        <>
          <h1>{n.name} <Badge value={n.status} /> <Badge value={n.accepted} /></h1>
          <nav class="toc" aria-label="On this page">
            {[['rules', 'Rules'], ['compliance', 'Compliance'], ['runs', 'Runs'], ['changes', 'Changes'], ['properties', 'Properties'], ['facts', 'Facts'], ['inventory', 'Inventory'], ['history', 'History'], ['identity', 'Identity']].map(([k, l]) => (
              <button key={k} type="button" class="link" onClick={() => document.getElementById(k!)?.scrollIntoView()}>{l}</button>
            ))}
          </nav>
          <Facts items={[
            ['Id', <code>{n.id}</code>], ['Hostname', n.hostname], ['State', n.state], ['OS', [n.os_name, n.os_version].filter(Boolean).join(' ')],
            ['Last run', <Time iso={n.last_run_at} />], ['Last contact', <Time iso={n.last_contact_at} />], ['Region', n.region],
            ['Relay', n.policy_server && <a href={`#/nodes/${enc(n.policy_server)}`}>{n.policy_server}</a>],
            ['Policy groups', policy.data && (policy.data.data.groups.length === 0 ? <span class="muted">none</span>
              : policy.data.data.groups.map((g, i) => <>{i > 0 && ', '}<a href={`#/groups/${enc(g)}`}>{g}</a></>))],
            ['Registry groups', n.groups.join(', ')], ['Tags', Object.entries(n.tags).map(([k, v]) => `${k}=${v}`).join(', ')],
          ]} />
          <ClaimNotice id={n.id} />
          {canWrite && n.accepted === 'accepted' && !n.relay && <RunNow id={n.id} name={n.name} />}
        </>
      )}</Show>
      <Section title="Rules applying to this node" id="rules">
        <Show f={policy}>{({ data: p }) => (p.rules.length === 0 ? <p class="muted">No rule reaches this node{p.groups.length === 0 ? ': it is in no policy group' : ''}.</p> : (
          <table class="compact">
            <thead><tr><th scope="col">Rule</th><th scope="col">Through groups</th><th scope="col">Directives</th></tr></thead>
            <tbody>{p.rules.map((r) => (
              <tr key={r.id}>
                <th scope="row"><a href={`#/rules/${enc(r.id)}`}>{r.name || r.id}</a></th>
                <td>{r.via.map((g, i) => <>{i > 0 && ', '}<a href={`#/groups/${enc(g)}`}>{g}</a></>)}</td>
                <td>{r.directives.map((d, i) => <>{i > 0 && ', '}<a href={`#/directives/${enc(d.id)}`}>{d.name || d.id}</a> <span class="muted small">{d.method}{d.mode === 'audit' ? ', audit' : ''}</span></>)}</td>
              </tr>
            ))}</tbody>
          </table>
        ))}</Show>
      </Section>
      <Section title="Compliance" id="compliance">
        <Show f={comp}>{({ data: c }) => (
          <>
            <p class="big"><Percent value={c.compliance} /> <span class="muted">{c.summary.total} items · {c.class}{c.time_state ? ` · ${stateLabel(c.time_state)}` : ''}</span></p>
            <ComplianceBar counts={c.summary.counts} label="this node" />
            {c.run && <p>Judged on the run of <Time iso={c.run.started_at} /> (config <code>{c.run.config_id ?? '—'}</code>).</p>}
            {lastRun.data?.data[0]?.reports_unreadable && (
              <p class="warn" role="note">This run's messages cannot be shown: its stored log cannot be read ({lastRun.data.data[0].reports_unreadable}).</p>
            )}
            <ComplianceTree c={c} reports={lastRun.data?.data[0]?.reports ?? []} focus={focus} />
          </>
        )}</Show>
      </Section>
      <Section title="Runs" id="runs">
        <Show f={runs}>{(r) => (r.data.length === 0 ? <p class="muted">No run yet.</p> : (
          <>
            <ol class="timeline" aria-label="Runs, oldest to newest">
              {[...r.data].reverse().map((x) => <li key={x.id} class={`t-${runClass(x)}`} title={`${new Date(x.started_at).toLocaleString()}: ${runClass(x)}, ${x.report_count} reports`} />)}
            </ol>
            <table class="compact">
              <thead><tr><th scope="col">Started</th><th scope="col">Config</th><th scope="col">Complete</th><th scope="col">Reports</th><th scope="col">Outcomes</th></tr></thead>
              <tbody>{r.data.slice(0, 20).map((x) => (
                <tr key={x.id}><td><Time iso={x.started_at} /></td><td><code>{x.config_id ?? '—'}</code></td><td>{x.complete ? 'yes' : 'no'}</td><td>{x.report_count}</td>
                  <td>{Object.entries(x.counts).map(([k, v]) => `${v} ${k.replace(/_/g, ' ')}`).join(', ')}</td></tr>
              ))}</tbody>
            </table>
          </>
        ))}</Show>
      </Section>
      <Section title="Changes" id="changes">
        <Show f={changes}>{(r) => (r.data.length === 0 ? <p class="muted">No change recorded.</p> : (
          <ul class="changes">
            {r.data.map((c) => <ChangeItem key={c.id} c={c} open={r.data.length <= 3} />)}
          </ul>
        ))}</Show>
      </Section>
      <NodeVulnerabilities id={id} />
      <NodeProperties id={id} />
      <Section title="Custom facts" id="facts">
        {inventory.error ? <p class="muted">No inventory received yet.</p> : <Show f={inventory}>{({ data }) => <CustomFacts inv={data} />}</Show>}
      </Section>
      {node.data?.data.relay && <BehindRelay id={id} />}
      <Section title="Inventory" id="inventory">
        {inventory.error ? <p class="muted">No inventory received yet.</p> : <Show f={inventory}>{({ data }) => <InventoryView inv={data} />}</Show>}
      </Section>
      <Section title="Lifecycle history" id="history">
        <Show f={history}>{(h) => (
          <table class="compact">
            <thead><tr><th scope="col">When</th><th scope="col">Field</th><th scope="col">From</th><th scope="col">To</th><th scope="col">Cause</th></tr></thead>
            <tbody>{h.data.map((e) => <tr key={e.id}><td><Time iso={e.at} /></td><td>{e.field}</td><td>{e.from ?? '—'}</td><td>{e.to}</td><td>{e.cause}</td></tr>)}</tbody>
          </table>
        )}</Show>
      </Section>
      <Section title="Identity" id="identity">
        <Show f={identity}>{({ data: i }) => (
          <Facts items={[
            ['Certificate fingerprint (sha256)', i.certificate_fingerprint ? <code class="fp">{i.certificate_fingerprint}</code> : null],
            ['Token', <Badge value={i.state} kind={`token-${i.state}`} />], ['Key id', i.kid && <code>{i.kid}</code>],
            ['Issued', <Time iso={i.issued_at} />], ['Expires', <Time iso={i.expires_at} />], ['Renewal forced after', <Time iso={i.forced_after} />],
          ]} />
        )}</Show>
      </Section>
    </>
  );
}
