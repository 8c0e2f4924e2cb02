/**
 * Properties on the node and group pages. A node's: its effective properties (global < groups by
 * priority < node, GET /api/1/nodes/<id>/properties/effective), each leaf with its origin and what
 * it overrode, its groups' conflicts and why its policy was last not generated; and its own
 * properties, plain or secret, editable (PUT /api/1/nodes/<id>/properties/own, the whole set). A group's: what its
 * members get from it and from the global level, before their other groups and their own values.
 * A secret's value is never shown: the API does not return it.
 */
import { useState } from 'preact/hooks';
import { ApiError, put, type ListAnswer } from '../api';
import { useCanWrite } from '../me';
import { ErrorBox, Section, Show, useGet } from '../ui';
import { fieldId } from './edit-common';
import { jsonText, SecretBadge, setBody, SetEditor, setRows, type GlobalProperty, type Json, type LevelProperty, type SetRow } from './properties';

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

/**
 * The node's own properties, edited as a whole set in the form of the other levels: a plain value,
 * or a secret of this node (sealed to its key, write-only: kept as it is unless given anew). A
 * name secret at another level takes a secret here too: a plain value would be sealed anyway, and
 * shown back in the clear by the node's plain properties.
 */
function NodeOwn({ id, own, secrets, reload }: { id: string; own: Record<string, LevelProperty>; secrets: string[]; reload: () => void }) {
  const canWrite = useCanWrite();
  const elsewhere = new Set(secrets.filter((n) => own[n]?.secret !== true));
  const [rows, setRowList] = useState<SetRow[]>(() => setRows(own));
  const [editing, setEditing] = useState(false);
  const [errors, setErrors] = useState<Record<string, string>>({});
  const [error, setError] = useState<unknown>(null);
  const [busy, setBusy] = useState(false);
  const save = async (e: Event) => {
    e.preventDefault();
    const bad: Record<string, string> = {};
    for (const r of rows) {
      const name = r.name.trim();
      if (!name) bad[`properties.#${r.key}.name`] = 'a property needs a name';
      else if (elsewhere.has(name) && !r.secret) bad[`properties.${name}.name`] = `${name} is secret at another level: set it there, or mark it secret here`;
    }
    const made = setBody(rows.filter((r) => r.name.trim()), 'properties');
    const all = { ...bad, ...('errors' in made ? made.errors : {}) };
    setErrors(all);
    setError(null);
    const first = Object.keys(all)[0];
    if (first !== undefined) return document.getElementById(fieldId(first))?.focus();
    if (!('body' in made)) return;
    setBusy(true);
    try {
      await put(`/api/1/nodes/${enc(id)}/properties/own`, { properties: made.body });
      setEditing(false);
      reload();
    } catch (err) {
      // The API names the property's field when it can (`properties.<name>.value`): the message goes under it.
      if (err instanceof ApiError && err.field?.startsWith('properties.')) {
        setErrors({ [err.field]: err.message });
        setTimeout(() => document.getElementById(fieldId(err.field!))?.focus(), 0);
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
          <table class="compact" id="node-properties"><tbody>{shown.map(([k, p]) => (
            <tr key={k}><th scope="row"><code>{k}</code></th><td>{p.secret || elsewhere.has(k) ? <SecretBadge /> : <code class="json">{jsonText(p.value)}</code>}</td></tr>
          ))}</tbody></table>
        )}
        {canWrite && <button type="button" class="secondary" onClick={() => { setRowList(setRows(own)); setErrors({}); setEditing(true); }}>Edit this node's properties</button>}
      </>
    );
  }
  return (
    <form class="edit" aria-label="This node's properties" onSubmit={save}>
      <h3>Set on this node</h3>
      <SetEditor rows={rows} setRows={setRowList} field="properties" errors={errors} />
      {elsewhere.size > 0 && <p class="hint">Secret at another level: {[...elsewhere].join(', ')}. A value set here for one of them is a secret of this node.</p>}
      {error !== null && <ErrorBox error={error} />}
      <div class="form-actions">
        <button type="submit" disabled={busy}>Save properties</button>
        <button type="button" class="link" onClick={() => setEditing(false)}>Cancel</button>
      </div>
      <p class="hint">A node's own properties are saved at once: they are part of the node's record, not of the policy's change requests. A secret here is sealed to this node's key and never shown again.</p>
    </form>
  );
}

/** The node page's Properties section: effective values with their origin, then the node's own. */
export function NodeProperties({ id }: { id: string }) {
  const effective = useGet<{ data: Effective }>(`/api/1/nodes/${enc(id)}/properties/effective`);
  const own = useGet<{ data: { properties: Record<string, LevelProperty> } }>(`/api/1/nodes/${enc(id)}/properties/own`);
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
          <Show f={own}>{({ data }) => <NodeOwn key={JSON.stringify(data)} id={id} own={data.properties} secrets={e.secrets} reload={reload} />}</Show>
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
