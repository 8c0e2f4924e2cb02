/** A rule's form: which directives apply to which groups, chosen from those that exist. */
import { useState } from 'preact/hooks';
import type { ListAnswer } from '../api';
import { Show, useGet } from '../ui';
import type { Directive } from './directives';
import type { Group } from './groups';
import type { Rule } from './rules';
import { Field, fieldId, inputProps, SubmitBar, usePolicySubmit, IdAndName } from './edit-common';

function Choices({ legend, path, items, chosen, set, error }: {
  legend: string; path: string; items: Array<{ id: string; name?: string; note?: string }>; chosen: string[]; set: (ids: string[]) => void; error?: string;
}) {
  return (
    <fieldset class="choices" aria-describedby={error ? `${fieldId(path)}-error` : undefined}>
      <legend>{legend}</legend>
      {items.length === 0 && <p class="muted">None yet.</p>}
      {items.map((x, i) => {
        const id = i === 0 ? fieldId(path) : `${fieldId(path)}-${i}`;
        return (
          <div key={x.id} class="choice">
            <input type="checkbox" id={id} checked={chosen.includes(x.id)}
              onChange={(e) => set((e.target as HTMLInputElement).checked ? [...chosen, x.id] : chosen.filter((c) => c !== x.id))} />
            <label for={id}>{x.name && x.name !== x.id ? `${x.name} (${x.id})` : x.id}{x.note && <span class="muted small"> {x.note}</span>}</label>
          </div>
        );
      })}
      {error && <p class="field-error" id={`${fieldId(path)}-error`} role="alert">{error}</p>}
    </fieldset>
  );
}

export function RuleForm({ rule }: { rule: Rule | null }) {
  const directives = useGet<ListAnswer<Directive>>('/api/1/directives');
  const groups = useGet<ListAnswer<Group>>('/api/1/groups');
  const s = usePolicySubmit('rule', rule?.id ?? null);
  const [id, setId] = useState(rule?.id ?? '');
  const [name, setName] = useState(rule?.name ?? '');
  const [dirs, setDirs] = useState<string[]>(rule?.directives ?? []);
  const [grps, setGrps] = useState<string[]>(rule?.groups ?? []);
  const go = (how: 'save' | 'propose') => {
    const body = { id: id.trim(), name: name.trim() || id.trim(), directives: dirs, groups: grps };
    void s.submit(body, how, `${rule ? 'Edit' : 'Create'} rule ${body.id}`);
  };
  const f = s.fields;
  return (
    <>
      <h1>{rule ? `Edit rule ${rule.name || rule.id}` : 'New rule'}</h1>
      <Show f={directives}>{(d) => (
        <Show f={groups}>{(g) => (
          <form class="card edit" onSubmit={(e) => { e.preventDefault(); go('save'); }} aria-label="Rule">
            <IdAndName isNew={!rule} idHint="Letters, digits, _ . - ; it travels in every report." id={id} setId={setId} name={name} setName={setName} fields={f} />
            <Choices legend="Directives it applies" path="directives" items={d.data.map((x) => ({ id: x.id, ...(x.name && { name: x.name }), note: x.method }))} chosen={dirs} set={setDirs} error={f.directives} />
            <Choices legend="Groups it applies them to" path="groups" items={g.data.map((x) => ({ id: x.id, ...(x.name && { name: x.name }), ...(x.builtin && { note: 'built in' }) }))} chosen={grps} set={setGrps} error={f.groups} />
            <SubmitBar busy={s.busy} mustReview={s.mustReview} error={s.error} onPropose={() => go('propose')} cancel={rule ? `#/rules/${encodeURIComponent(rule.id)}` : '#/rules'} />
          </form>
        )}</Show>
      )}</Show>
    </>
  );
}
