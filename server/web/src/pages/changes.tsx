/**
 * What changed, fleet-wide: the agents' changes (intentional or corrective) with their diffs,
 * filtered by time, node, rule, directive, group and label, with the histogram of the same
 * filter; everything in the address (GET /api/1/changes and /api/1/changes/histogram).
 */
import { useMemo } from 'preact/hooks';
import type uPlot from 'uplot';
import type { ListAnswer } from '../api';
import { barsLeft, barsRight, Chart, COUNT_INCRS } from '../chart';
import { navigate, pageLink } from '../router';
import { ChangeItem, type Change } from './node';
import { ErrorBox, Loading, Pager, Section, Time, useGet } from '../ui';

interface Bucket { at: string; intentional: number; corrective: number }

const PER_PAGE = 50;
const RANGES: Record<string, number> = { '1h': 3_600_000, '24h': 86_400_000, '7d': 7 * 86_400_000, '30d': 30 * 86_400_000 };
const FIELDS = ['node', 'rule', 'directive', 'group', 'label'] as const;

/** Bars per bucket: the current bucket drawn whole (the range ends at its end, not at now). */
export function ChangeBars({ buckets, from, to, step }: { buckets: Bucket[]; from: number; to: number; step: number }) {
  const data = useMemo<uPlot.AlignedData>(() => {
    const by = new Map(buckets.map((b) => [Math.floor(Date.parse(b.at) / 1000), b]));
    const xs: number[] = [];
    for (let t = Math.floor(from / 1000 / step) * step; t < to / 1000; t += step) xs.push(t);
    // Each bucket's bars stand at its middle, so the first and the last are drawn whole.
    return [xs.map((x) => x + step / 2), xs.map((x) => by.get(x)?.intentional ?? 0), xs.map((x) => by.get(x)?.corrective ?? 0)];
  }, [buckets, from, to, step]);
  const first = Math.floor(from / 1000 / step) * step;
  const last = Math.ceil(to / 1000 / step) * step;
  const opts = useMemo(() => ({
    series: [{}, { label: 'intentional', stroke: '#1f5f8b', fill: 'rgba(31,95,139,0.7)', paths: barsLeft, points: { show: false } },
      { label: 'corrective', stroke: '#c0641a', fill: 'rgba(192,100,26,0.7)', paths: barsRight, points: { show: false } }],
    axes: [{}, { label: 'changes', incrs: COUNT_INCRS }],
    scales: { x: { time: true, range: [first, last] as [number, number] } },
  }), [first, last]);
  const total = buckets.reduce((s, b) => s + b.intentional + b.corrective, 0);
  return <Chart opts={opts} data={data} label={`changes per ${step === 3600 ? 'hour' : 'day'}: ${total} in all`} />;
}

export function ChangesPage({ params }: { params: URLSearchParams }) {
  const range = params.get('range') && RANGES[params.get('range')!] ? params.get('range')! : '24h';
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const to = Math.ceil(Date.now() / 60_000) * 60_000;
  const from = to - RANGES[range]!;
  const by = RANGES[range]! > 2 * 86_400_000 ? 'day' : 'hour';
  const q = new URLSearchParams({ from: new Date(from).toISOString() });
  for (const k of FIELDS) if (params.get(k)) q.set(k, params.get(k)!);
  const list = useGet<ListAnswer<Change> & { total_capped: boolean }>(`/api/1/changes?${q}&per_page=${PER_PAGE}&page=${page}`);
  const hist = useGet<ListAnswer<Bucket>>(`/api/1/changes/histogram?${q}&by=${by}`);
  const submit = (e: Event) => {
    e.preventDefault();
    const f = new FormData(e.target as HTMLFormElement);
    const out = new URLSearchParams({ range: String(f.get('range') ?? '24h') });
    for (const k of FIELDS) {
      const v = String(f.get(k) ?? '').trim();
      if (v) out.set(k, v);
    }
    navigate('/changes', out);
  };
  return (
    <>
      <h1>Changes</h1>
      <form class="filters" onSubmit={submit} role="search" aria-label="Filter changes" key={params.toString()}>
        <label>Since<select name="range">{Object.keys(RANGES).map((k) => <option key={k} value={k} selected={k === range}>last {k}</option>)}</select></label>
        <label>Node id<input name="node" defaultValue={params.get('node') ?? ''} /></label>
        <label>Rule<input name="rule" defaultValue={params.get('rule') ?? ''} /></label>
        <label>Directive<input name="directive" defaultValue={params.get('directive') ?? ''} /></label>
        <label>Group<input name="group" defaultValue={params.get('group') ?? ''} /></label>
        <label>Label<select name="label">{['', 'intentional', 'corrective'].map((v) => <option key={v} value={v} selected={v === (params.get('label') ?? '')}>{v || 'any'}</option>)}</select></label>
        <div class="filter-actions"><button type="submit">Apply</button><a href="#/changes">Clear</a></div>
      </form>
      <Section title={`Changes per ${by}`} id="histogram">
        {hist.error ? <ErrorBox error={hist.error} /> : !hist.data ? <Loading /> : <ChangeBars buckets={hist.data.data} from={from} to={to} step={by === 'hour' ? 3600 : 86400} />}
      </Section>
      <Section title="Changes, newest first" id="list">
        {list.error ? <ErrorBox error={list.error} /> : !list.data ? <Loading /> : list.data.data.length === 0 ? <p class="muted">No change matches.</p> : (
          <>
            <p class="summary" aria-live="polite">{list.data.total.toLocaleString()}{list.data.total_capped ? '+' : ''} changes</p>
            <ul class="changes">
              {list.data.data.map((c) => <ChangeItem key={c.id} c={c} />)}
            </ul>
            <Pager total={list.data.total} page={page} perPage={PER_PAGE} go={pageLink('/changes', params)} />
          </>
        )}
      </Section>
    </>
  );
}
