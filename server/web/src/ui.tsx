/** Small pieces every page uses: times, compliance bars, loading and errors, paging, data hooks. */
import type { ComponentChildren } from 'preact';
import { useCallback, useEffect, useRef, useState } from 'preact/hooks';
import { ApiError, get } from './api';

/** The states in the order bars show them (the API's compliance states). */
export const STATES = [
  'success', 'repaired', 'audit_compliant', 'not_applicable', 'non_compliant', 'error', 'unexpected', 'missing', 'applying', 'no_answer',
] as const;

export const stateLabel = (s: string) => s.replace(/_/g, ' ');

/** A time in the browser's zone, UTC on hover. */
export function Time({ iso }: { iso: string | null | undefined }) {
  if (!iso) return <span class="muted">—</span>;
  const d = new Date(iso);
  if (Number.isNaN(d.getTime())) return <span>{iso}</span>;
  const utc = d.toISOString().replace('T', ' ').replace(/\.\d+Z$/, ' UTC');
  return <time dateTime={d.toISOString()} title={utc}>{d.toLocaleString(undefined, { dateStyle: 'medium', timeStyle: 'medium' })}</time>;
}

export function Percent({ value }: { value: number | null | undefined }) {
  if (value === null || value === undefined) return <span class="muted">no data</span>;
  const cls = value >= 95 ? 'good' : value >= 75 ? 'fair' : 'poor';
  return <span class={`pct ${cls}`}>{value.toFixed(value % 1 === 0 ? 0 : 2)}%</span>;
}

/** A bar of compliance states, each segment sized by its count; the text says the same. */
export function ComplianceBar({ counts, label }: { counts: Record<string, number> | undefined; label?: string }) {
  const total = STATES.reduce((s, k) => s + (counts?.[k] ?? 0), 0);
  if (!counts || total === 0) return <span class="muted">no items</span>;
  const parts = STATES.filter((k) => (counts[k] ?? 0) > 0);
  const text = parts.map((k) => `${counts[k]} ${stateLabel(k)}`).join(', ');
  return (
    <div class="bar" role="img" aria-label={`${label ? `${label}: ` : ''}${text}`} title={text}>
      {parts.map((k) => <span key={k} class={`seg s-${k}`} style={{ width: `${((counts[k] ?? 0) / total) * 100}%` }} />)}
    </div>
  );
}

export function Badge({ value, kind }: { value: string | null | undefined; kind?: string }) {
  if (!value) return <span class="muted">—</span>;
  return <span class={`badge b-${kind ?? value}`}>{stateLabel(value)}</span>;
}

export function ErrorBox({ error }: { error: unknown }) {
  const e = error as ApiError;
  return <p class="error" role="alert">{e?.code ? `${e.code}: ` : ''}{e?.message ?? String(error)}</p>;
}

export function Loading() {
  return <p class="muted" aria-busy="true">Loading…</p>;
}

export interface Fetched<T> {
  data: T | undefined;
  error: unknown;
  loading: boolean;
  reload: () => void;
}

/** GET `path` (null: nothing yet) and keep the answer; reloads when `path` or `key` changes. */
export function useGet<T>(path: string | null, key = ''): Fetched<T> {
  const [state, setState] = useState<{ data?: T; error?: unknown; loading: boolean }>({ loading: path !== null });
  const [tick, setTick] = useState(0);
  useEffect(() => {
    if (path === null) return;
    let live = true;
    setState((s) => ({ ...s, loading: true }));
    get<T>(path).then(
      (data) => live && setState({ data, loading: false }),
      (error) => live && setState({ error, loading: false }),
    );
    return () => {
      live = false;
    };
  }, [path, tick, key]);
  const reload = useCallback(() => setTick((t) => t + 1), []);
  return { data: state.data, error: state.error, loading: state.loading, reload };
}

/** Call `fn` every `ms` while mounted (live job progress). */
export function useInterval(fn: () => void, ms: number | null): void {
  const saved = useRef(fn);
  saved.current = fn;
  useEffect(() => {
    if (ms === null) return;
    const id = setInterval(() => saved.current(), ms);
    return () => clearInterval(id);
  }, [ms]);
}

/** Wraps what a fetch gives: loading, error, or the content. */
export function Show<T>({ f, children }: { f: Fetched<T>; children: (data: T) => ComponentChildren }) {
  if (f.error) return <ErrorBox error={f.error} />;
  if (f.data === undefined) return <Loading />;
  return <>{children(f.data)}</>;
}

export function Pager({ total, page, perPage, go }: { total: number; page: number; perPage: number; go: (page: number) => void }) {
  const pages = Math.max(1, Math.ceil(total / perPage));
  return (
    <nav class="pager" aria-label="Pages">
      <button type="button" disabled={page <= 1} onClick={() => go(page - 1)}>← Previous</button>
      <span>Page {page} of {pages} · {total.toLocaleString()} in all</span>
      <button type="button" disabled={page >= pages} onClick={() => go(page + 1)}>Next →</button>
    </nav>
  );
}

export function Section({ title, id, children, actions }: { title: string; id?: string; children: ComponentChildren; actions?: ComponentChildren }) {
  const hid = id ? `${id}-h` : undefined;
  return (
    <section class="card" id={id} aria-labelledby={hid}>
      <header class="card-h"><h2 id={hid}>{title}</h2>{actions}</header>
      {children}
    </section>
  );
}

/** A definition list from pairs, leaving out empty values. */
export function Facts({ items }: { items: Array<[string, ComponentChildren]> }) {
  return (
    <dl class="facts">
      {items.map(([k, v]) => (
        <div key={k}><dt>{k}</dt><dd>{v === null || v === undefined || v === '' ? <span class="muted">—</span> : v}</dd></div>
      ))}
    </dl>
  );
}

/**
 * A filter-language expression (docs/filters.md) as the API refused it: the message, and the
 * expression with a mark under the position the API named (ERR_FILTER_SYNTAX).
 */
export function FilterError({ error, text }: { error: unknown; text: string }) {
  const e = error as ApiError;
  const at = typeof e?.position === 'number' ? Math.max(0, Math.min(e.position, text.length)) : null;
  return (
    <div class="error" role="alert" id="filter-error">
      <p>{e?.code ? `${e.code}: ` : ''}{e?.message ?? String(error)}</p>
      {at !== null && (
        <pre class="caret" aria-label={`at character ${at + 1}`}>{text}{'\n'}{' '.repeat(at)}^</pre>
      )}
    </div>
  );
}

/** A column header that sorts a list through the address (`sort`, `order`), with aria-sort. */
export function SortHeader({ field, label, params, path, dflt = 'name', firstOrder = 'asc' }: {
  field: string; label: string; params: URLSearchParams; path: string; dflt?: string; firstOrder?: 'asc' | 'desc';
}) {
  const sort = params.get('sort') ?? dflt;
  const order = params.get('order') ?? 'asc';
  const active = sort === field;
  const next = new URLSearchParams(params);
  next.set('sort', field);
  next.set('order', active ? (order === 'asc' ? 'desc' : 'asc') : firstOrder);
  next.delete('page');
  return (
    <th scope="col" aria-sort={active ? (order === 'asc' ? 'ascending' : 'descending') : undefined}>
      <a href={`#${path}?${next}`}>{label}{active ? (order === 'asc' ? ' ▲' : ' ▼') : ''}</a>
    </th>
  );
}
