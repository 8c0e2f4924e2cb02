/**
 * Properties on the node and group pages. A node's: its effective properties (global < groups by
 * priority < node, GET /api/1/nodes/<id>/properties/effective), each leaf with its origin and what
 * it overrode, its groups' conflicts and why its policy was last not generated; and its own
 * properties, editable (PUT /api/1/nodes/<id>/properties, the whole set). A group's: what its
 * members get from it and from the global level, before their other groups and their own values.
 * A secret's value is never shown: the API does not return it.
 */
import { useState } from 'preact/hooks';
import { ApiError, put, type ListAnswer } from '../api';
import { useCanWrite } from '../me';
import { ErrorBox, Section, Show, useGet } from '../ui';
import { inputProps } from './edit-common';
import { jsonText, parseJson, SecretBadge, type GlobalProperty, type Json, type LevelProperty } from './properties';

type Origin = { level: 'global' } | { level: 'group'; id: string } | { level: 'node' };
interface Leaf { path: string[]; value?: Json; secret?: true; origin: Origin; overridden?: Array<{ origin: Origin; path: string[]; value?: Json }> }
interface Effective {
  groups: string[]; properties: Record<string, Json>; origins: Leaf[]; secrets: string[];
  conflicts: Array<{ path: string[]; priority: number; groups: Array<{ id: string; value: Json }> }>;
  problem: { code: string; message: string } | null;
}

const enc = encodeURIComponent;

export function OriginLink({ o }: { o: Origin }) {
  if (o.level === 'group') return <>group <a href={`#/groups/${enc(o.id)}`}>{o.id}</a></>;
  if (o.level === 'global') return <a href="#/properties">global</a>;
  return <>this node</>;
}

function EffectiveTable({ e }: { e: Effective }) {
  if (e.origins.length === 0) return <p class="muted">No property reaches this node.</p>;
  return (
    <table class="compact" id="effective-properties">
      <thead><tr><th scope="col">Property</th><th scope="col">Value</th><th scope="col">From</th><th scope="col">Overrides</th></tr></thead>
      <tbody>{e.origins.map((o) => (
        <tr key={o.path.join('.')}>
          <th scope="row"><code>{o.path.join('.')}</code></th>
          <td>{o.secret ? <SecretBadge /> : <code class="json">{jsonText(o.value)}</code>}</td>
          <td class="origin"><OriginLink o={o.origin} /></td>
          <td>{(o.overridden ?? []).map((x, i) => (
            <div key={i}><OriginLink o={x.origin} />{x.value !== undefined && !o.secret ? <>: <code class="json">{jsonText(x.value)}</code></> : ''}</div>
          ))}</td>
        </tr>
      ))}</tbody>
    </table>
  );
}

interface Row { key: number; name: string; text: string }
let keys = 0;

/**
 * The node's own properties, edited as a whole set. A name that is secret at another level is not
 * shown nor offered here: a node's own values are not sealed, set a secret at the global or a group level.
 */
function NodeOwn({ id, own, secrets, reload }: { id: string; own: Record<string, Json>; secrets: string[]; reload: () => void }) {
  const canWrite = useCanWrite();
  const hidden = new Set(secrets);
  const initial = () => Object.entries(own).filter(([k]) => !hidden.has(k)).map(([name, v]) => ({ key: ++keys, name, text: JSON.stringify(v) }));
  const [rows, setRows] = useState<Row[]>(initial);
  const [editing, setEditing] = useState(false);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const change = (i: number, r: Partial<Row>) => setRows(rows.map((x, j) => (j === i ? { ...x, ...r } : x)));
  const save = async (e: Event) => {
    e.preventDefault();
    const body: Record<string, Json> = {};
    // Secret names keep the node's value as the API gave it: they are not in the form.
    for (const [k, v] of Object.entries(own)) if (hidden.has(k)) body[k] = v;
    const bad: Record<string, string> = {};
    for (const r of rows) {
      const name = r.name.trim();
      if (!name) bad[`node-${r.key}-name`] = 'a property needs a name';
      else if (hidden.has(name)) bad[`node-${r.key}-name`] = `${name} is secret at another level: set it there`;
      const parsed = parseJson(r.text);
      if ('error' in parsed) bad[`node-${r.key}-value`] = `${name || 'the value'} ${parsed.error}`;
      else if (name) body[name] = parsed.value;
    }
    setErrors(bad);
    setError(null);
    const first = Object.keys(bad)[0];
    if (first) return document.getElementById(`f-${first}`)?.focus();
    setBusy(true);
    try {
      await put(`/api/1/nodes/${enc(id)}/properties`, body);
      setEditing(false);
      reload();
    } catch (err) {
      // The API names the property when it can (`properties.<name>`): the message goes under its value.
      const name = err instanceof ApiError && err.field?.startsWith('properties.') ? err.field.split('.')[1] : undefined;
      const row = rows.find((r) => r.name.trim() === name);
      if (row) {
        setErrors({ [`node-${row.key}-value`]: err instanceof ApiError ? err.message : String(err) });
        setTimeout(() => document.getElementById(`f-node-${row.key}-value`)?.focus(), 0);
      } else setError(err);
    } finally {
      setBusy(false);
    }
  };
  const shown = Object.entries(own);
  if (!editing) {
    return (
      <>
        <h3>Set on this node</h3>
        {shown.length === 0 ? <p class="muted">None.</p> : (
          <table class="compact" id="node-properties"><tbody>{shown.map(([k, v]) => (
            <tr key={k}><th scope="row"><code>{k}</code></th><td>{hidden.has(k) ? <SecretBadge /> : <code class="json">{jsonText(v)}</code>}</td></tr>
          ))}</tbody></table>
        )}
        {canWrite && <button type="button" class="secondary" onClick={() => { setRows(initial()); setErrors({}); setEditing(true); }}>Edit this node's properties</button>}
      </>
    );
  }
  const field = (k: string, label: string, r: Row, which: 'name' | 'text') => {
    const err = errors[k];
    const p = inputProps(k, err, which === 'text');
    return (
      <div class={`field${err ? ' invalid' : ''}`}>
        <label for={p.id}>{label}</label>
        {which === 'name'
          ? <input {...p} value={r.name} autocomplete="off" spellcheck={false} onInput={(e) => change(rows.indexOf(r), { name: (e.target as HTMLInputElement).value })} />
          : <input {...p} value={r.text} autocomplete="off" spellcheck={false} onInput={(e) => change(rows.indexOf(r), { text: (e.target as HTMLInputElement).value })} />}
        {which === 'text' && <p class="hint" id={`${p.id}-hint`}>JSON: "text" in quotes, 8080, true, ["a"], {'{"k": "v"}'}.</p>}
        {err && <p class="field-error" id={`${p.id}-error`} role="alert">{err}</p>}
      </div>
    );
  };
  return (
    <form class="edit" aria-label="This node's properties" onSubmit={save}>
      <h3>Set on this node</h3>
      {rows.map((r, i) => (
        <fieldset key={r.key} class="row-group">
          <legend>Property {r.name.trim() || i + 1}</legend>
          {field(`node-${r.key}-name`, 'Property name', r, 'name')}
          {field(`node-${r.key}-value`, `Value of ${r.name.trim() || 'the property'}`, r, 'text')}
          <div class="form-actions"><button type="button" class="secondary" onClick={() => setRows(rows.filter((_, j) => j !== i))}>Remove property {r.name.trim() || i + 1}</button></div>
        </fieldset>
      ))}
      {hidden.size > 0 && <p class="hint">Secret at another level, kept as they are: {[...hidden].join(', ')}.</p>}
      {error !== null && <ErrorBox error={error} />}
      <div class="form-actions">
        <button type="button" class="secondary" onClick={() => setRows([...rows, { key: ++keys, name: '', text: '' }])}>Add a property</button>
        <button type="submit" disabled={busy}>Save properties</button>
        <button type="button" class="link" onClick={() => setEditing(false)}>Cancel</button>
      </div>
      <p class="hint">A node's own properties are saved at once: they are part of the node's record, not of the policy's change requests.</p>
    </form>
  );
}

/** The node page's Properties section: effective values with their origin, then the node's own. */
export function NodeProperties({ id }: { id: string }) {
  const effective = useGet<{ data: Effective }>(`/api/1/nodes/${enc(id)}/properties/effective`);
  const own = useGet<{ data: Record<string, Json> }>(`/api/1/nodes/${enc(id)}/properties`);
  const reload = () => {
    effective.reload();
    own.reload();
  };
  return (
    <Section title="Properties" id="properties">
      <Show f={effective}>{({ data: e }) => (
        <>
          {e.problem && <p class="error" role="alert">This node's policy was not generated: {e.problem.code}: {e.problem.message}</p>}
          {e.conflicts.map((c) => (
            <p key={c.path.join('.')} class="warn">Conflict on <code>{c.path.join('.')}</code> between groups of priority {c.priority}: {c.groups.map((g) => g.id).join(', ')}.</p>
          ))}
          <EffectiveTable e={e} />
          <Show f={own}>{({ data }) => <NodeOwn key={JSON.stringify(data)} id={id} own={data} secrets={e.secrets} reload={reload} />}</Show>
        </>
      )}</Show>
    </Section>
  );
}

/** A group page's Properties: what its members get from it, over the global level (and under their other groups and own values). */
export function GroupProperties({ properties, priority }: { properties: Record<string, LevelProperty> | undefined; priority: number | undefined }) {
  const globals = useGet<ListAnswer<GlobalProperty>>('/api/1/properties');
  const mine = properties ?? {};
  return (
    <Section title="Properties" id="properties">
      <p class="muted">Priority {priority ?? 0}. Its members get these over the global values; a group of higher priority and the node's own values come over them.</p>
      <Show f={globals}>{(g) => {
        const byName = new Map(g.data.map((p) => [p.id, p]));
        const names = [...new Set([...Object.keys(mine), ...byName.keys()])].sort();
        if (names.length === 0) return <p class="muted">No property at this level or the global one.</p>;
        return (
          <table class="compact" id="group-properties">
            <thead><tr><th scope="col">Property</th><th scope="col">Value</th><th scope="col">From</th></tr></thead>
            <tbody>{names.map((n) => {
              const own = Object.hasOwn(mine, n) ? mine[n] : undefined;
              const global = byName.get(n);
              const secret = own?.secret === true || global?.secret === true;
              const merged = own && global && !secret && isObject(own.value) && isObject(global.value);
              return (
                <tr key={n}>
                  <th scope="row"><code>{n}</code></th>
                  <td>{secret ? <SecretBadge /> : <code class="json">{jsonText(merged ? deepMerge(global!.value!, own!.value!) : own ? own.value : global!.value)}</code>}</td>
                  <td class="origin">{own ? (merged ? <>this group, merged over <a href="#/properties">global</a></> : global ? <>this group, over <a href="#/properties">global</a></> : 'this group') : <a href="#/properties">global</a>}</td>
                </tr>
              );
            })}</tbody>
          </table>
        );
      }}</Show>
    </Section>
  );
}

const isObject = (v: unknown): v is { [k: string]: Json } => v !== null && typeof v === 'object' && !Array.isArray(v);

/** `over` merged over `under` as the server merges levels: objects key by key, anything else replaced whole. */
function deepMerge(under: Json, over: Json): Json {
  if (!isObject(under) || !isObject(over)) return over;
  const out: { [k: string]: Json } = { ...under };
  for (const [k, v] of Object.entries(over)) out[k] = Object.hasOwn(under, k) ? deepMerge(under[k]!, v) : v;
  return out;
}
