/**
 * A policy group's form: its filter in the filter language (docs/filters.md) and its static
 * members, with the live count and the first members of what it would hold while typing
 * (GET /api/1/policy/group-preview, asked a moment after the last keystroke); a refused
 * expression is shown with the position the API names.
 */
import { useEffect, useState } from 'preact/hooks';
import { get, type ListAnswer } from '../api';
import { FilterError } from '../ui';
import type { NodeRow } from './nodes';
import type { Filter, Group } from './groups';
import { Field, inputProps, SubmitBar, usePolicySubmit, IdAndName } from './edit-common';
import { SetEditor, setBody, setRows, type SetRow } from './properties';

/** How long typing must pause before the preview is asked for. */
const PREVIEW_DELAY_MS = 300;

interface Preview extends ListAnswer<NodeRow> { unknown_nodes: number }

export function GroupForm({ group }: { group: Group | null }) {
  const s = usePolicySubmit('group', group?.id ?? null);
  const expr = (group?.filter ?? []).filter((f) => f.key === 'q').map((f) => f.values.join(' and ')).join(' and ');
  // Filters saved in the node list's form ({key, values}) are kept as they are, shown apart.
  const others: Filter[] = (group?.filter ?? []).filter((f) => f.key !== 'q');
  const [id, setId] = useState(group?.id ?? '');
  const [name, setName] = useState(group?.name ?? '');
  const [q, setQ] = useState(expr);
  const [nodes, setNodes] = useState((group?.nodes ?? []).join('\n'));
  const g = group;
  const [props, setProps] = useState<SetRow[]>(() => setRows(g?.properties));
  const [priority, setPriority] = useState(g?.priority === undefined ? '' : String(g.priority));
  const [preview, setPreview] = useState<{ data?: Preview; error?: unknown; q: string } | null>(null);
  const staticIds = nodes.split(/[\s,]+/).filter(Boolean);
  useEffect(() => {
    let live = true;
    const timer = setTimeout(() => {
      const qs = new URLSearchParams();
      if (q.trim()) qs.set('q', q.trim());
      for (const f of others) qs.append('filter', JSON.stringify(f));
      for (const n of staticIds.slice(0, 1000)) qs.append('node', n);
      if (!q.trim() && others.length === 0 && staticIds.length === 0) {
        setPreview(null);
        return;
      }
      get<Preview>(`/api/1/policy/group-preview?${qs}`).then(
        (data) => live && setPreview({ data, q }),
        (error) => live && setPreview({ error, q }),
      );
    }, PREVIEW_DELAY_MS);
    return () => {
      live = false;
      clearTimeout(timer);
    };
  }, [q, nodes]);
  const go = (how: 'save' | 'propose') => {
    const filter: Filter[] = [...(q.trim() ? [{ key: 'q', values: [q.trim()] }] : []), ...others];
    const set = setBody(props, 'properties');
    if ('errors' in set) return s.setFields(set.errors);
    const prio = priority.trim() === '' ? undefined : Number(priority);
    if (prio !== undefined && !Number.isInteger(prio)) return s.setFields({ priority: 'priority must be an integer' });
    const body: Record<string, unknown> = {
      id: id.trim(), name: name.trim() || id.trim(),
      ...(staticIds.length > 0 && { nodes: staticIds }), ...(filter.length > 0 && { filter }),
      ...(group && 'compliance_expiration' in group && { compliance_expiration: (group as Record<string, unknown>).compliance_expiration }),
      ...(props.length > 0 && { properties: set.body }), ...(prio !== undefined && { priority: prio }),
    };
    void s.submit(body, how, `${group ? 'Edit' : 'Create'} group ${body.id as string}`);
  };
  const f = s.fields;
  const filterError = f.filter ?? f['filter[0]'];
  return (
    <>
      <h1>{group ? `Edit group ${group.name || group.id}` : 'New group'}</h1>
      <form class="card edit" onSubmit={(e) => { e.preventDefault(); go('save'); }} aria-label="Group">
        <IdAndName isNew={!group} idHint="Letters, digits, _ . -" id={id} setId={setId} name={name} setName={setName} fields={f} />
        <Field path="filter" label="Filter" hint={<>The filter language: <code>os.name = debian and tag:env = prod</code>. Empty with static members: only them.</>} error={filterError}>
          <input {...inputProps('filter', filterError, true)} value={q} onInput={(e) => setQ((e.target as HTMLInputElement).value)} spellcheck={false} autocomplete="off" />
        </Field>
        {others.length > 0 && <p class="hint">Also kept: {others.map((o) => `${o.exclude ? 'not ' : ''}${o.key} = ${o.values.join(' | ')}`).join(' and ')}</p>}
        <Field path="nodes" label="Static members" hint="Node ids, one a line: members whatever the filter says." error={f.nodes}>
          <textarea {...inputProps('nodes', f.nodes, true)} value={nodes} rows={3} onInput={(e) => setNodes((e.target as HTMLTextAreaElement).value)} spellcheck={false} />
        </Field>
        <section class="preview" aria-labelledby="preview-h">
          <h2 id="preview-h">Members it would have</h2>
          {!preview ? <p class="muted">Type a filter or static members.</p>
            : preview.error ? <FilterError error={preview.error} text={preview.q} />
              : preview.data && (
                <>
                  <p aria-live="polite" data-testid="preview-count"><strong>{preview.data.total.toLocaleString()}</strong> accepted node{preview.data.total === 1 ? '' : 's'}{preview.data.unknown_nodes > 0 && <span class="warn"> · {preview.data.unknown_nodes} static id{preview.data.unknown_nodes === 1 ? '' : 's'} the registry does not know</span>}</p>
                  <ul class="columns">{preview.data.data.map((n) => <li key={n.id}>{n.name} <span class={`badge b-${n.status}`}>{n.status}</span></li>)}</ul>
                  {preview.data.total > preview.data.data.length && <p class="muted">The first {preview.data.data.length} are shown.</p>}
                </>
              )}
        </section>
        <SetEditor rows={props} setRows={setProps} field="properties" errors={f} />
        <Field path="priority" label="Priority of its properties" hint="Over groups of lower priority (0 when empty); two groups of one priority setting one property differently are a conflict for their common nodes." error={f.priority}>
          <input {...inputProps('priority', f.priority, true)} type="number" step={1} value={priority} onInput={(e) => setPriority((e.target as HTMLInputElement).value)} />
        </Field>
        <SubmitBar busy={s.busy} mustReview={s.mustReview} error={s.error} onPropose={() => go('propose')} cancel={group ? `#/groups/${encodeURIComponent(group.id)}` : '#/groups'} />
      </form>
    </>
  );
}
