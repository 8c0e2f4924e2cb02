/**
 * The dashboard: global compliance (managed nodes, relays and agentless nodes apart), nodes by
 * status, pending nodes, the worst rules and nodes, and graphs of changes (intentional vs
 * corrective) and of compliance over the last 24 hours or 7 days.
 */
import { useMemo, useState } from 'preact/hooks';
import type uPlot from 'uplot';
import type { Counts, ListAnswer, WithPercent } from '../api';
import { Chart } from '../chart';
import { ChangeBars } from './changes';
import { href } from '../router';
import { ComplianceBar, Percent, Section, Show, STATES, stateLabel, useGet } from '../ui';

interface Global extends WithPercent {
  nodes: number;
  nodes_with_data: number;
  relays: WithPercent & { nodes: number };
  agentless: WithPercent & { nodes: number };
}
interface Lifecycle { nodes: { by_status: Counts; by_state: Counts; by_acceptance: Counts } }
interface RuleRow extends WithPercent { rule_id: string; nodes: number }
interface WorstNode extends WithPercent { node_id: string; hostname: string; status: string }
interface Bucket { at: string; intentional: number; corrective: number }
interface Point { at: string; compliance: number | null }

const RANGES = { '24h': 86_400_000, '7d': 7 * 86_400_000 } as const;
/** Rows in the worst rules and worst nodes cards; the full lists are a link away. */
const WORST = 8;
type Range = keyof typeof RANGES;

function Legend({ counts }: { counts: Counts }) {
  return (
    <ul class="legend">
      {STATES.filter((s) => counts[s]).map((s) => <li key={s}><span class={`dot s-${s}`} />{stateLabel(s)} <strong>{counts[s]!.toLocaleString()}</strong></li>)}
    </ul>
  );
}

function ComplianceChart({ points, from, to }: { points: Point[]; from: number; to: number }) {
  const known = useMemo(() => points.filter((p) => p.compliance !== null), [points]);
  const data = useMemo<uPlot.AlignedData>(() => [known.map((p) => Date.parse(p.at) / 1000), known.map((p) => p.compliance)], [known]);
  const opts = useMemo(() => ({
    series: [{}, { label: 'compliance %', stroke: '#2e7d32', width: 2, points: { show: known.length < 50 } }],
    scales: { x: { time: true, range: [from / 1000, to / 1000] as [number, number] }, y: { range: [0, 100] as [number, number] } },
    axes: [{}, { label: '%' }],
  }), [from, to, known.length < 50]);
  if (known.length === 0) return <p class="muted">No compliance recorded in this range yet: the server records it every <code>[console] history_interval</code> (10 minutes by default).</p>;
  const last = known[known.length - 1]!;
  return <Chart opts={opts} data={data} label={`compliance over time: ${known.length} points, last ${last.compliance}%`} />;
}

export function Dashboard({ params }: { params: URLSearchParams }) {
  const range: Range = params.get('range') === '7d' ? '7d' : '24h';
  // Rounded to the minute so the same view asks the same question (and the browser can reuse it).
  const to = Math.ceil(Date.now() / 60_000) * 60_000;
  const from = to - RANGES[range];
  const fromIso = new Date(from).toISOString();
  // Hours over a day, days over a week: each bar a whole bucket, today's too.
  const by = range === '24h' ? 'hour' : 'day';
  // Fleet-wide figures may come from a copy up to a minute old (the server computes them once for
  // everyone); Refresh asks for ones at most a second old.
  const [maxAge, setMaxAge] = useState(60);
  const [nonce, setNonce] = useState(0);
  const age = `max_age=${maxAge}`;
  const key = `${maxAge}:${nonce}`;
  const global = useGet<{ data: Global }>(`/api/1/compliance?${age}`, key);
  const life = useGet<{ data: Lifecycle }>(`/api/1/lifecycle?${age}`, key);
  const rules = useGet<ListAnswer<RuleRow>>(`/api/1/compliance/rules?${age}`, key);
  const worst = useGet<ListAnswer<WorstNode>>(`/api/1/compliance/worst-nodes?limit=${WORST}&${age}`, key);
  const histFrom = by === 'day' ? new Date(Math.floor(from / 86_400_000) * 86_400_000).toISOString() : fromIso;
  const hist = useGet<ListAnswer<Bucket>>(`/api/1/changes/histogram?by=${by}&from=${encodeURIComponent(histFrom)}&${age}`, key);
  const series = useGet<ListAnswer<Point>>(`/api/1/compliance/history?from=${encodeURIComponent(fromIso)}`);
  const status = useGet<{ data: { database?: { replica_max_lag_ms: number; replicas: ReplicaState[] } } }>('/api/1/system/status', key);
  return (
    <>
      <h1>Dashboard</h1>
      <p class="muted small">Fleet-wide figures may be up to a minute old.{status.data?.data.database && <> {replicaNote(status.data.data.database)}</>} <button type="button" class="link" onClick={() => { setMaxAge(1); setNonce((n) => n + 1); }}>Refresh figures</button></p>
      <div class="grid">
        <Section title="Global compliance" id="global">
          <Show f={global}>{({ data: g }) => (
            <>
              <p class="big"><Percent value={g.compliance} /></p>
              <p>{g.nodes.toLocaleString()} managed nodes ({g.nodes_with_data.toLocaleString()} with data), {g.total.toLocaleString()} items</p>
              <ComplianceBar counts={g.counts} label="managed nodes" />
              <Legend counts={g.counts} />
              <h3>Apart</h3>
              <table class="compact">
                <thead><tr><th scope="col">Kind</th><th scope="col">Nodes</th><th scope="col">Compliance</th><th scope="col">States</th></tr></thead>
                <tbody>
                  <tr><th scope="row">Relays</th><td>{g.relays.nodes}</td><td><Percent value={g.relays.compliance} /></td><td><ComplianceBar counts={g.relays.counts} label="relays" /></td></tr>
                  <tr><th scope="row">Agentless</th><td>{g.agentless.nodes}</td><td><Percent value={g.agentless.compliance} /></td><td><ComplianceBar counts={g.agentless.counts} label="agentless nodes" /></td></tr>
                </tbody>
              </table>
            </>
          )}</Show>
        </Section>
        <Section title="Nodes" id="status">
          <Show f={life}>{({ data: l }) => {
            const s = l.nodes.by_status;
            const pending = l.nodes.by_acceptance.pending ?? 0;
            return (
              <>
                <ul class="stats">
                  {(['reachable', 'unreachable', 'unknown'] as const).map((k) => (
                    <li key={k}><a href={href('/nodes', { status: k, accepted: 'accepted' })}><strong>{(s[k] ?? 0).toLocaleString()}</strong> <span class={`badge b-${k}`}>{k}</span></a></li>
                  ))}
                </ul>
                <p class={pending > 0 ? 'pending-note warn' : 'pending-note'}>
                  <a href="#/pending"><strong data-testid="pending-count">{pending.toLocaleString()}</strong> pending {pending === 1 ? 'node waits' : 'nodes wait'} for acceptance</a>
                </p>
                <h3>By state</h3>
                <ul class="inline">{Object.entries(l.nodes.by_state).map(([k, v]) => <li key={k}>{k} <strong>{v.toLocaleString()}</strong></li>)}</ul>
              </>
            );
          }}</Show>
        </Section>
        <Section title="Worst rules" id="worst-rules">
          <Show f={rules}>{(r) => {
            const rows = r.data.filter((x) => x.compliance !== null).sort((a, b) => a.compliance! - b.compliance!).slice(0, WORST);
            return rows.length === 0 ? <p class="muted">No rule has compliance data yet.</p> : (
              <table class="compact">
                <thead><tr><th scope="col">Rule</th><th scope="col">Nodes</th><th scope="col">Compliance</th></tr></thead>
                <tbody>{rows.map((x) => (
                  <tr key={x.rule_id}><th scope="row"><a href={`#/rules/${encodeURIComponent(x.rule_id)}`}>{x.rule_id}</a></th><td>{x.nodes}</td><td><Percent value={x.compliance} /> <ComplianceBar counts={x.counts} /></td></tr>
                ))}</tbody>
              </table>
            );
          }}</Show>
        </Section>
        <Section title="Worst nodes" id="worst-nodes">
          <Show f={worst}>{(w) => (w.data.length === 0 ? <p class="muted">No node has compliance data yet.</p> : (
            <table class="compact">
              <thead><tr><th scope="col">Node</th><th scope="col">Status</th><th scope="col">Compliance</th></tr></thead>
              <tbody>{w.data.map((x) => (
                <tr key={x.node_id}><th scope="row"><a href={`#/nodes/${encodeURIComponent(x.node_id)}`}>{x.hostname}</a></th><td><span class={`badge b-${x.status}`}>{x.status}</span></td><td><Percent value={x.compliance} /> <ComplianceBar counts={x.counts} /></td></tr>
              ))}</tbody>
            </table>
          ))}</Show>
          <p><a href={href('/nodes', { accepted: 'accepted', sort: 'compliance', order: 'asc' })}>Every node, worst first</a></p>
        </Section>
      </div>
      <Section title={`Changes and compliance, last ${range === '24h' ? '24 hours' : '7 days'}`} id="graphs" actions={
        <div class="seg-ctl" role="group" aria-label="Range">
          {(Object.keys(RANGES) as Range[]).map((k) => <a key={k} href={href('/', { range: k })} aria-current={k === range ? 'true' : undefined}>{k}</a>)}
        </div>
      }>
        <div class="grid two">
          <div>
            <h3>Changes per {by} (intentional vs corrective)</h3>
            <Show f={hist}>{(h) => <ChangeBars buckets={h.data} from={from} to={to} step={by === 'hour' ? 3600 : 86400} />}</Show>
            <p><a href={href('/changes', { range })}>Every change, with its diff</a></p>
          </div>
          <div>
            <h3>Compliance over time</h3>
            <Show f={series}>{(s) => <ComplianceChart points={s.data} from={from} to={to} />}</Show>
          </div>
        </div>
      </Section>
    </>
  );
}

interface ReplicaState { url: string; in_use: boolean; staleness_ms: number | null }

/** Where the fleet-wide reads come from when the server has replicas, and how far behind they may be. */
function replicaNote(db: { replica_max_lag_ms: number; replicas: ReplicaState[] }): string {
  const used = db.replicas.filter((r) => r.in_use);
  if (used.length === 0) return `Read from the primary database: no replica is within ${Math.round(db.replica_max_lag_ms / 1000)} s of it.`;
  const worst = Math.max(...used.map((r) => r.staleness_ms ?? 0));
  return `Read from ${used.length === 1 ? 'a replica' : `${used.length} replicas`} at most ${(worst / 1000).toFixed(1)} s behind the primary (bound ${Math.round(db.replica_max_lag_ms / 1000)} s).`;
}
