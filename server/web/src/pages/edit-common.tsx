/**
 * What the policy forms share: fields with their label, hint and error (a refused field is named
 * by the API's `field`; the form shows the message under that input and moves the focus to it),
 * and the submission: saved at once (PUT), or proposed as a change request for another admin to
 * review when the signed-in role must go through review (or the admin chooses to).
 */
import type { ComponentChildren } from 'preact';
import { useContext, useState } from 'preact/hooks';
import { ApiError, post, put } from '../api';
import { MeContext } from '../me';
import { navigate } from '../router';
import { ErrorBox } from '../ui';

export type Kind = 'directive' | 'group' | 'rule' | 'technique' | 'property';
export const PLURAL: Record<Kind, string> = { directive: 'directives', group: 'groups', rule: 'rules', technique: 'techniques', property: 'properties' };

/** The field's input id, from its path in the request body (`params.path` → `f-params-path`). */
export const fieldId = (path: string) => `f-${path.replace(/[^A-Za-z0-9_-]/g, '-')}`;

export function Field({ path, label, hint, error, children }: { path: string; label: ComponentChildren; hint?: ComponentChildren; error?: string; children: ComponentChildren }) {
  const id = fieldId(path);
  return (
    <div class={`field${error ? ' invalid' : ''}`}>
      <label for={id}>{label}</label>
      {children}
      {hint && <p class="hint" id={`${id}-hint`}>{hint}</p>}
      {error && <p class="field-error" id={`${id}-error`} role="alert">{error}</p>}
    </div>
  );
}

/** Props every input of a Field gets: its id, and what describes it (hint, error). */
export function inputProps(path: string, error: string | undefined, hint: boolean) {
  const id = fieldId(path);
  const described = [hint ? `${id}-hint` : '', error ? `${id}-error` : ''].filter(Boolean).join(' ');
  return { id, name: path, 'aria-invalid': error ? true : undefined, 'aria-describedby': described || undefined };
}

/** A policy object's id (only while it is new: an id never changes) and its name. */
export function IdAndName(props: { isNew: boolean; idHint: string; id: string; setId(v: string): void; name: string; setName(v: string): void; fields: Record<string, string> }) {
  const f = props.fields;
  return (
    <>
      {props.isNew && (
        <Field path="id" label="Id" hint={props.idHint} error={f.id}>
          <input {...inputProps('id', f.id, true)} value={props.id} onInput={(e) => props.setId((e.target as HTMLInputElement).value)} required autocomplete="off" spellcheck={false} />
        </Field>
      )}
      <Field path="name" label="Name" error={f.name}>
        <input {...inputProps('name', f.name, false)} value={props.name} onInput={(e) => props.setName((e.target as HTMLInputElement).value)} />
      </Field>
    </>
  );
}

interface Submitted { error: unknown; fields: Record<string, string> }

/**
 * Save or propose `body` (one object of `kind`); on a refusal naming a field, its message goes to
 * that field and the focus to its input.
 */
export function usePolicySubmit(kind: Kind, existing: string | null) {
  const me = useContext(MeContext);
  const [state, setState] = useState<Submitted>({ error: null, fields: {} });
  const [busy, setBusy] = useState(false);
  // An operator may propose a change, not save one (the API refuses it: only an admin saves).
  const mustReview = me?.review_required === true || me?.role === 'operator';
  const fail = (err: unknown) => {
    const field = err instanceof ApiError ? err.field : undefined;
    setState({ error: field ? null : err, fields: field ? { [field]: err instanceof ApiError ? err.message : String(err) } : {} });
    if (field) setTimeout(() => document.getElementById(fieldId(field))?.focus(), 0);
  };
  const submit = async (body: Record<string, unknown>, how: 'save' | 'propose', title: string) => {
    setBusy(true);
    setState({ error: null, fields: {} });
    try {
      if (how === 'propose') {
        const r = await post<{ data: { id: string } }>('/api/1/change-requests', { title, [PLURAL[kind]]: [body] });
        navigate(`/change-requests/${r.data.id}`);
      } else {
        const id = String(body.id);
        await put(`/api/1/${PLURAL[kind]}/${encodeURIComponent(existing ?? id)}`, body);
        // Properties are listed together: their page is the list.
        navigate(kind === 'property' ? '/properties' : `/${PLURAL[kind]}/${id}`);
      }
    } catch (err) {
      // A change request names the field under its list: `directives[0].params.path` is `params.path` here.
      if (err instanceof ApiError && err.field) {
        fail(new ApiError(err.status, err.code, err.message, err.field.replace(/^(directives|groups|rules|techniques|properties)\[0\]\.?/, '') || undefined, err.position));
      } else fail(err);
    } finally {
      setBusy(false);
    }
  };
  // Refused before it was sent (a value that is not JSON): the same, the focus on the first.
  const setFields = (fields: Record<string, string>) => {
    setState({ error: null, fields });
    const first = Object.keys(fields)[0];
    if (first !== undefined) setTimeout(() => document.getElementById(fieldId(first))?.focus(), 0);
  };
  return { ...state, busy, submit, mustReview, setFields };
}

/** The form's buttons: Save (unless the role must go through review) and Propose, and what failed. */
export function SubmitBar({ busy, mustReview, error, onPropose, cancel }: { busy: boolean; mustReview: boolean; error: unknown; onPropose: () => void; cancel: string }) {
  return (
    <>
      {error !== null && error !== undefined && <ErrorBox error={error} />}
      <div class="form-actions">
        {!mustReview && <button type="submit" disabled={busy}>Save</button>}
        <button type="button" class={mustReview ? undefined : 'secondary'} disabled={busy} onClick={onPropose}>Propose for review</button>
        <a href={cancel}>Cancel</a>
      </div>
      {mustReview && <p class="hint">Your role's changes go through review: another admin approves them before they are deployed.</p>}
    </>
  );
}

/** What a role that may not change policy sees at a form's address: no form (the API refuses anyway). */
export function ReadOnly({ what }: { what: string }) {
  return <><h1>Read only</h1><p>Your role reads {what}; it cannot change them.</p></>;
}
