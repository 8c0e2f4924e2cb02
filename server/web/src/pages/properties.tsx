/**
 * Properties, the policy's data (docs/policy.md "Properties"): the global ones (a list, and a form
 * for each: a JSON value, or a secret), and the editor of one level's set that a group's form
 * uses. A secret is write-only: the API never returns its value, so the console shows that one
 * is set and offers "Set new value" (a password field), never the value.
 */
import { useState } from 'preact/hooks';
import { del, post, type ListAnswer } from '../api';
import { useCanWrite } from '../me';
import { navigate } from '../router';
import { ErrorBox, Show, useGet } from '../ui';
import { Field, inputProps, ReadOnly, SubmitBar, usePolicySubmit } from './edit-common';

export type Json = null | boolean | number | string | Json[] | { [k: string]: Json };
/** A global property as the API shows it: a secret has no `value`. */
export interface GlobalProperty { id: string; value?: Json; secret?: boolean; updated_at?: string }
/** One level's property as the API shows it (a group's `properties`). */
export interface LevelProperty { value?: Json; secret?: boolean }

const enc = encodeURIComponent;

/** A JSON value on one line, as a table cell shows it. */
export const jsonText = (v: unknown) => (v === undefined ? '' : JSON.stringify(v));

/** The JSON an admin typed; a message for the field when it is not JSON. */
export function parseJson(text: string): { value: Json } | { error: string } {
  try {
    return { value: JSON.parse(text) as Json };
  } catch {
    return { error: 'must be JSON: "text" in quotes, 8080, true, ["a", "b"] or {"key": "value"}' };
  }
}

export function SecretBadge() {
  return <span class="badge b-secret" title="Write-only: its value is never shown">secret</span>;
}

export function PropertiesPage() {
  const canWrite = useCanWrite();
  const list = useGet<ListAnswer<GlobalProperty>>('/api/1/properties');
  return (
    <>
      <h1>Properties {canWrite && <a class="button" href="#/properties/new/edit">New property</a>}</h1>
      <p class="muted">Global properties, under every group's and node's own (set on the group's and the node's page). Templates and conditions read the merge as <code>node.properties.&lt;name&gt;</code>.</p>
      <Show f={list}>{(l) => (
        <div class="table-wrap"><table class="list" id="global-properties">
          <thead><tr><th scope="col">Property</th><th scope="col">Value</th>{canWrite && <th scope="col"><span class="sr">Actions</span></th>}</tr></thead>
          <tbody>
            {l.data.length === 0 && <tr><td colSpan={3} class="muted">No global property yet.</td></tr>}
            {l.data.map((p) => (
              <tr key={p.id}>
                <th scope="row"><code>{p.id}</code></th>
                <td>{p.secret ? <SecretBadge /> : <code class="json">{jsonText(p.value)}</code>}</td>
                {canWrite && <td class="actions"><a href={`#/properties/${enc(p.id)}/edit`} aria-label={`Edit ${p.id}`}>Edit</a></td>}
              </tr>
            ))}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}

/**
 * A value's input: JSON in a text area, or for a secret a password field (a secret's value is a
 * string). `keptSecret`: a secret is saved already; its field appears on "Set new value" only.
 */
export function ValueInput({ path, label, secret, keptSecret, text, setText, replacing, setReplacing, error }: {
  path: string; label: string; secret: boolean; keptSecret: boolean; text: string; setText: (v: string) => void;
  replacing: boolean; setReplacing: (v: boolean) => void; error?: string;
}) {
  const p = inputProps(path, error, true);
  if (keptSecret && !replacing) {
    return (
      <div class="field">
        <span class="label">{label}</span>
        <p class="secret-set"><SecretBadge /> A value is set; it is never shown. <button type="button" class="secondary" id={p.id} onClick={() => { setReplacing(true); setTimeout(() => document.getElementById(p.id)?.focus(), 0); }}>Set new value</button></p>
        {error && <p class="field-error" id={`${p.id}-error`} role="alert">{error}</p>}
      </div>
    );
  }
  return (
    <Field path={path} label={label} error={error} hint={secret ? 'A secret: text, sealed to each node that uses it; write-only.' : 'JSON: "text" in quotes, 8080, true, ["a", "b"], {"key": "value"}.'}>
      {secret
        ? <input {...p} type="password" autocomplete="new-password" value={text} onInput={(e) => setText((e.target as HTMLInputElement).value)} />
        : <textarea {...p} rows={Math.min(8, Math.max(1, text.split('\n').length))} spellcheck={false} value={text} onInput={(e) => setText((e.target as HTMLTextAreaElement).value)} />}
    </Field>
  );
}

function GlobalForm({ prop }: { prop: GlobalProperty | null }) {
  const s = usePolicySubmit('property', prop?.id ?? null);
  const [id, setId] = useState(prop?.id ?? '');
  const [secret, setSecret] = useState(prop?.secret === true);
  const [text, setText] = useState(prop && !prop.secret ? JSON.stringify(prop.value, null, 2) : '');
  const [replacing, setReplacing] = useState(!prop?.secret);
  const [removeError, setRemoveError] = useState<unknown>(null);
  const go = (how: 'save' | 'propose') => {
    const name = (prop?.id ?? id).trim();
    let value: Json;
    if (secret) value = text;
    else {
      const parsed = parseJson(text);
      if ('error' in parsed) return s.setFields({ value: `value ${parsed.error}` });
      value = parsed.value;
    }
    if (prop?.secret && !replacing) return s.setFields({ value: 'a secret\'s only field is its value: choose "Set new value" to change it' });
    void s.submit({ id: name, value, ...(secret && { secret: true }) }, how, `${prop ? 'Edit' : 'Create'} property ${name}`);
  };
  const remove = async () => {
    setRemoveError(null);
    try {
      if (s.mustReview) {
        const r = await post<{ data: { id: string } }>('/api/1/change-requests', { title: `Delete property ${prop!.id}`, delete: [{ kind: 'property', id: prop!.id }] });
        navigate(`/change-requests/${r.data.id}`);
      } else {
        await del(`/api/1/properties/${enc(prop!.id)}`);
        navigate('/properties');
      }
    } catch (err) {
      setRemoveError(err);
    }
  };
  const f = s.fields;
  return (
    <>
      <h1>{prop ? `Edit property ${prop.id}` : 'New property'}</h1>
      <form class="card edit" aria-label="Property" onSubmit={(e) => { e.preventDefault(); go('save'); }}>
        {!prop && (
          <Field path="id" label="Name" hint="Letters, digits, _ and -; templates read node.properties.<name>." error={f.id}>
            <input {...inputProps('id', f.id, true)} value={id} onInput={(e) => setId((e.target as HTMLInputElement).value)} required autocomplete="off" spellcheck={false} />
          </Field>
        )}
        <div class="choice">
          <input type="checkbox" id="f-secret" checked={secret} disabled={prop?.secret === true} aria-describedby="f-secret-hint"
            onChange={(e) => { setSecret((e.target as HTMLInputElement).checked); setText(''); }} />
          <label for="f-secret">Secret</label>
        </div>
        <p class="hint" id="f-secret-hint">{prop?.secret ? 'Once secret, always secret: delete it to make it plain.' : 'Sealed to each node\'s key, never shown again, not in plans, audit records or change requests.'}</p>
        <ValueInput path="value" label="Value" secret={secret} keptSecret={prop?.secret === true} text={text} setText={setText} replacing={replacing} setReplacing={setReplacing} error={f.value ?? f.secret} />
        <SubmitBar busy={s.busy} mustReview={s.mustReview} error={s.error} onPropose={() => go('propose')} cancel="#/properties" />
        {prop && (
          <div class="form-actions">
            <button type="button" class="danger" onClick={remove}>{s.mustReview ? 'Propose deleting it' : 'Delete property'}</button>
            {removeError !== null && <ErrorBox error={removeError} />}
          </div>
        )}
      </form>
    </>
  );
}

export function PropertyEditPage({ id }: { id: string | null }) {
  const canWrite = useCanWrite();
  const prop = useGet<{ data: GlobalProperty }>(id === null || !canWrite ? null : `/api/1/properties/${enc(id)}`);
  if (!canWrite) return <ReadOnly what="properties" />;
  if (id !== null && !prop.data) return <Show f={prop}>{() => null}</Show>;
  return <GlobalForm prop={prop.data?.data ?? null} />;
}

/** One row of a level's set in a form. */
export interface SetRow { key: number; name: string; text: string; secret: boolean; kept: boolean; replacing: boolean }

let rowKeys = 0;
export const setRows = (props: Record<string, LevelProperty> | undefined): SetRow[] => Object.entries(props ?? {}).map(([name, p]) => ({
  key: ++rowKeys, name, secret: p.secret === true, kept: p.secret === true && p.value === undefined, replacing: false,
  text: p.secret === true ? '' : JSON.stringify(p.value, null, 2),
}));

/**
 * A level's set as the API takes it; a kept secret is sent back as `{"secret": true}` (the server
 * keeps its value). Field messages by path when a value is not JSON.
 */
export function setBody(rows: SetRow[], field: string): { body: Record<string, unknown> } | { errors: Record<string, string> } {
  const body: Record<string, unknown> = {};
  const errors: Record<string, string> = {};
  for (const r of rows) {
    const name = r.name.trim();
    const path = `${field}.${name}.value`;
    if (r.kept && !r.replacing) body[name] = { secret: true };
    else if (r.secret) body[name] = { value: r.text, secret: true };
    else {
      const parsed = parseJson(r.text);
      if ('error' in parsed) errors[path] = `${name} ${parsed.error}`;
      else body[name] = { value: parsed.value };
    }
  }
  return Object.keys(errors).length > 0 ? { errors } : { body };
}

/** The rows of a level's set, each a name, a value or a secret, in a form (a group's). */
export function SetEditor({ rows, setRows: set, field, errors }: { rows: SetRow[]; setRows: (r: SetRow[]) => void; field: string; errors: Record<string, string> }) {
  const change = (i: number, p: Partial<SetRow>) => set(rows.map((r, j) => (j === i ? { ...r, ...p } : r)));
  return (
    <fieldset class="params" id={`${field}-set`}>
      <legend>Properties</legend>
      {errors[field] && <p class="field-error" role="alert">{errors[field]}</p>}
      {rows.length === 0 && <p class="muted">None at this level.</p>}
      {rows.map((r, i) => {
        const at = `${field}.${r.name.trim() || `#${r.key}`}`;
        return (
          <fieldset key={r.key} class="row-group">
            <legend>Property {r.name.trim() || i + 1}</legend>
            {r.kept ? <p><code>{r.name}</code></p> : (
              <Field path={`${at}.name`} label="Property name" error={errors[`${at}.name`] ?? errors[at]}>
                <input {...inputProps(`${at}.name`, errors[`${at}.name`] ?? errors[at], false)} value={r.name} onInput={(e) => change(i, { name: (e.target as HTMLInputElement).value })} autocomplete="off" spellcheck={false} />
              </Field>
            )}
            {!r.kept && (
              <div class="choice">
                <input type="checkbox" id={`f-${at.replace(/[^A-Za-z0-9_-]/g, '-')}-secret`} checked={r.secret} onChange={(e) => change(i, { secret: (e.target as HTMLInputElement).checked, text: '' })} />
                <label for={`f-${at.replace(/[^A-Za-z0-9_-]/g, '-')}-secret`}>Secret {r.name.trim()}</label>
              </div>
            )}
            <ValueInput path={`${at}.value`} label={`Value of ${r.name.trim() || 'the property'}`} secret={r.secret} keptSecret={r.kept} text={r.text} setText={(v) => change(i, { text: v })}
              replacing={r.replacing} setReplacing={(v) => change(i, { replacing: v })} error={errors[`${at}.value`] ?? errors[`${at}.secret`]} />
            <div class="form-actions"><button type="button" class="secondary" onClick={() => set(rows.filter((_, j) => j !== i))}>Remove property {r.name.trim() || i + 1}</button></div>
          </fieldset>
        );
      })}
      <div class="form-actions"><button type="button" class="secondary" onClick={() => set([...rows, { key: ++rowKeys, name: '', text: '', secret: false, kept: false, replacing: false }])}>Add a property</button></div>
    </fieldset>
  );
}

