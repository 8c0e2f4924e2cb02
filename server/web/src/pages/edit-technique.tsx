/**
 * A technique's form: its id, name, version and description, its parameters (name, type, default,
 * required), and its method calls in order, each from its method's parameter docs (GET
 * /api/1/methods) with its node condition, its loop over a list parameter and its result
 * condition over earlier calls (`repaired('install')`). The API's refusal names the field
 * (`calls[1].if`): its message is shown under that input and the focus moved to it.
 */
import { useState } from 'preact/hooks';
import type { ListAnswer } from '../api';
import { Show, useGet } from '../ui';
import { fromText, ParamInput, toText, type Method, type ParamDoc } from './edit-directive';
import { Field, inputProps, SubmitBar, usePolicySubmit } from './edit-common';
import type { Technique } from './techniques';

const TYPES = ['string', 'list', 'boolean', 'number', 'map'] as const;

interface ParamRow { key: number; name: string; type: string; required: boolean; dflt: string; description: string }
interface CallRow { key: number; id: string; name: string; method: string; values: Record<string, string>; condition: string; foreach: string; when: string; mode: string }

let keys = 0;
const nextKey = () => ++keys;

/** A default as the form holds it: a string as is, any other type as JSON. */
const defaultText = (type: string, v: unknown) => (v === undefined ? '' : type === 'string' && typeof v === 'string' ? v : JSON.stringify(v));

/** A call's parameter from its text: a template (`{{params.x}}`) stays text whatever the type, it is rendered per node. */
const callValue = (d: ParamDoc, text: string) => (text.includes('{{') ? text : fromText(d, text));

function paramRows(t: Technique | null): ParamRow[] {
  return (t?.parameters ?? []).map((p) => ({ key: nextKey(), name: p.name, type: p.type, required: p.required === true, dflt: defaultText(p.type, p.default), description: p.description ?? '' }));
}

function callRows(t: Technique | null, methods: Method[]): CallRow[] {
  return (t?.calls ?? []).map((c) => {
    const docs = methods.find((m) => m.name === c.method)?.params ?? [];
    const values = Object.fromEntries(Object.entries(c.params).map(([k, v]) => {
      const d = docs.find((x) => x.name === k);
      return [k, typeof v === 'string' ? v : d ? toText(d, v) : JSON.stringify(v)];
    }));
    return { key: nextKey(), id: c.id, name: c.name ?? '', method: c.method, values, condition: c.condition ?? '', foreach: c.foreach ?? '', when: c.if ?? '', mode: c.mode ?? '' };
  });
}

function Text({ path, label, hint, value, set, error }: { path: string; label: string; hint?: string; value: string; set: (v: string) => void; error?: string }) {
  return (
    <Field path={path} label={label} hint={hint} error={error}>
      <input {...inputProps(path, error, hint !== undefined)} value={value} onInput={(e) => set((e.target as HTMLInputElement).value)} spellcheck={false} autocomplete="off" />
    </Field>
  );
}

export function TechniqueForm({ technique }: { technique: Technique | null }) {
  const methods = useGet<ListAnswer<Method>>('/api/1/methods');
  return <Show f={methods}>{(ms) => <Form technique={technique} methods={ms.data} />}</Show>;
}

function Form({ technique, methods }: { technique: Technique | null; methods: Method[] }) {
  const s = usePolicySubmit('technique', technique?.id ?? null);
  const [id, setId] = useState(technique?.id ?? '');
  const [name, setName] = useState(technique?.name ?? '');
  const [version, setVersion] = useState(technique?.version ?? '1.0');
  const [description, setDescription] = useState(technique?.description ?? '');
  const [params, setParams] = useState<ParamRow[]>(() => paramRows(technique));
  const [calls, setCalls] = useState<CallRow[]>(() => callRows(technique, methods));
  const f = s.fields;
  const setParam = (i: number, p: Partial<ParamRow>) => setParams(params.map((x, j) => (j === i ? { ...x, ...p } : x)));
  const setCall = (i: number, c: Partial<CallRow>) => setCalls(calls.map((x, j) => (j === i ? { ...x, ...c } : x)));
  const move = (i: number, by: number) => {
    const next = [...calls];
    const [c] = next.splice(i, 1);
    next.splice(i + by, 0, c!);
    setCalls(next);
  };
  const lists = params.filter((p) => p.type === 'list' && p.name.trim()).map((p) => p.name.trim());

  const body = (): Record<string, unknown> | null => {
    const bad: Record<string, string> = {};
    const parameters = params.map((p, i) => {
      let dflt: unknown;
      if (p.dflt !== '') {
        if (p.type === 'string') dflt = p.dflt;
        else {
          try {
            dflt = JSON.parse(p.dflt) as unknown;
          } catch {
            bad[`parameters[${i}].default`] = `the default of a ${p.type} is JSON: ${p.type === 'list' ? '["a", "b"]' : p.type === 'map' ? '{"key": "value"}' : p.type === 'boolean' ? 'true or false' : 'a number'}`;
          }
        }
      }
      return { name: p.name.trim(), type: p.type, ...(p.required && { required: true }), ...(dflt !== undefined && { default: dflt }), ...(p.description.trim() && { description: p.description.trim() }) };
    });
    const out = calls.map((c, i) => {
      const docs = methods.find((m) => m.name === c.method)?.params ?? [];
      const values: Record<string, unknown> = {};
      for (const d of docs) {
        if (d.internal) continue;
        try {
          const v = callValue(d, c.values[d.name] ?? '');
          if (v !== undefined) values[d.name] = v;
        } catch (err) {
          bad[`calls[${i}].params.${d.name}`] = `${d.name} ${(err as Error).message}`;
        }
      }
      return {
        id: c.id.trim(), method: c.method, params: values, ...(c.name.trim() && { name: c.name.trim() }), ...(c.condition.trim() && { condition: c.condition.trim() }),
        ...(c.foreach && { foreach: c.foreach }), ...(c.when.trim() && { if: c.when.trim() }), ...(c.mode && { mode: c.mode }),
      };
    });
    if (Object.keys(bad).length > 0) {
      s.setFields(bad);
      return null;
    }
    return { id: id.trim(), name: name.trim() || id.trim(), version: version.trim(), ...(description.trim() && { description: description.trim() }), parameters, calls: out };
  };
  const go = (how: 'save' | 'propose') => {
    const b = body();
    if (b) void s.submit(b, how, `${technique ? 'Edit' : 'Create'} technique ${b.id as string}`);
  };

  return (
    <>
      <h1>{technique ? `Edit technique ${technique.name || technique.id}` : 'New technique'}</h1>
      <form class="card edit" onSubmit={(e) => { e.preventDefault(); go('save'); }} aria-label="Technique">
        {!technique && <Text path="id" label="Id" hint="Letters, digits and _; directives name it." value={id} set={setId} error={f.id} />}
        <Text path="name" label="Name" value={name} set={setName} error={f.name} />
        <Text path="version" label="Version" hint="Such as 1.0; its directives follow a new version when their values still fit it." value={version} set={setVersion} error={f.version} />
        <Field path="description" label="Description" error={f.description}>
          <textarea {...inputProps('description', f.description, false)} value={description} rows={2} onInput={(e) => setDescription((e.target as HTMLTextAreaElement).value)} />
        </Field>

        <fieldset class="params" id="tech-parameters">
          <legend>Parameters</legend>
          {f.parameters && <p class="field-error" role="alert">{f.parameters}</p>}
          {params.length === 0 && <p class="muted">None: the calls' values are fixed, or read the node's data.</p>}
          {params.map((p, i) => {
            const at = `parameters[${i}]`;
            return (
              <fieldset key={p.key} class="row-group">
                <legend>Parameter {i + 1}{p.name.trim() ? `: ${p.name.trim()}` : ''}</legend>
                <Text path={`${at}.name`} label="Parameter name" hint="Calls read it as {{params.<name>}}." value={p.name} set={(v) => setParam(i, { name: v })} error={f[`${at}.name`]} />
                <Field path={`${at}.type`} label="Type" error={f[`${at}.type`]}>
                  <select {...inputProps(`${at}.type`, f[`${at}.type`], false)} value={p.type} onChange={(e) => setParam(i, { type: (e.target as HTMLSelectElement).value })}>
                    {TYPES.map((t) => <option key={t} value={t}>{t}</option>)}
                  </select>
                </Field>
                <Text path={`${at}.default`} label="Default" hint={p.type === 'string' ? 'Empty: none.' : 'As JSON; empty: none.'} value={p.dflt} set={(v) => setParam(i, { dflt: v })} error={f[`${at}.default`]} />
                <div class="choice">
                  <input type="checkbox" id={`f-${at.replace(/[^A-Za-z0-9_-]/g, '-')}-required`} checked={p.required} onChange={(e) => setParam(i, { required: (e.target as HTMLInputElement).checked })} />
                  <label for={`f-${at.replace(/[^A-Za-z0-9_-]/g, '-')}-required`}>Required</label>
                </div>
                <Text path={`${at}.description`} label="Parameter description" value={p.description} set={(v) => setParam(i, { description: v })} error={f[`${at}.description`]} />
                <div class="form-actions"><button type="button" class="secondary" onClick={() => setParams(params.filter((_, j) => j !== i))}>Remove parameter {p.name.trim() || i + 1}</button></div>
              </fieldset>
            );
          })}
          <div class="form-actions"><button type="button" class="secondary" onClick={() => setParams([...params, { key: nextKey(), name: '', type: 'string', required: false, dflt: '', description: '' }])}>Add a parameter</button></div>
        </fieldset>

        <fieldset class="params" id="tech-calls">
          <legend>Calls, in order</legend>
          {f.calls && <p class="field-error" role="alert">{f.calls}</p>}
          {calls.map((c, i) => {
            const at = `calls[${i}]`;
            const spec = methods.find((m) => m.name === c.method);
            const earlier = calls.slice(0, i).map((x) => x.id.trim()).filter(Boolean);
            return (
              <fieldset key={c.key} class="row-group call">
                <legend>Call {i + 1}{c.id.trim() ? `: ${c.id.trim()}` : ''}</legend>
                <Text path={`${at}.id`} label="Call id" hint="Later calls' result conditions name it." value={c.id} set={(v) => setCall(i, { id: v })} error={f[`${at}.id`]} />
                <Field path={`${at}.method`} label="Call method" error={f[`${at}.method`]}>
                  <select {...inputProps(`${at}.method`, f[`${at}.method`], false)} value={c.method} required onChange={(e) => setCall(i, { method: (e.target as HTMLSelectElement).value, values: {} })}>
                    <option value="">choose a method</option>
                    {methods.map((m) => <option key={m.name} value={m.name}>{m.name}</option>)}
                  </select>
                </Field>
                <Text path={`${at}.name`} label="Component name" hint={c.foreach ? 'Required in a loop, with {{item}} in it.' : 'What its reports are filed under; empty: the method\'s.'} value={c.name} set={(v) => setCall(i, { name: v })} error={f[`${at}.name`]} />
                {spec && spec.params.filter((d) => !d.internal).map((d) => (
                  <ParamInput key={d.name} d={d} prefix={`${at}.params`} value={c.values[d.name] ?? ''} error={f[`${at}.params.${d.name}`]}
                    set={(v) => setCall(i, { values: { ...c.values, [d.name]: v } })} />
                ))}
                <Field path={`${at}.foreach`} label="For each item of" hint="A list parameter: the call runs once per item, {{item}} being the item." error={f[`${at}.foreach`]}>
                  <select {...inputProps(`${at}.foreach`, f[`${at}.foreach`], true)} value={c.foreach} onChange={(e) => setCall(i, { foreach: (e.target as HTMLSelectElement).value })}>
                    <option value="">no loop</option>
                    {lists.map((l) => <option key={l} value={l}>{l}</option>)}
                  </select>
                </Field>
                <Text path={`${at}.condition`} label="Node condition" hint="Where it runs, on the node: fact('os.name') == 'debian'; empty: everywhere." value={c.condition} set={(v) => setCall(i, { condition: v })} error={f[`${at}.condition`]} />
                <Text path={`${at}.if`} label="Result condition"
                  hint={earlier.length ? `Over earlier calls (${earlier.join(', ')}): repaired('${earlier[earlier.length - 1]}'), !error('${earlier[0]}'), && and ||; empty: always.` : 'The first call has no earlier result to read.'}
                  value={c.when} set={(v) => setCall(i, { when: v })} error={f[`${at}.if`]} />
                <Field path={`${at}.mode`} label="Call mode" error={f[`${at}.mode`]}>
                  <select {...inputProps(`${at}.mode`, f[`${at}.mode`], false)} value={c.mode} onChange={(e) => setCall(i, { mode: (e.target as HTMLSelectElement).value })}>
                    <option value="">the directive's</option><option value="enforce">enforce</option><option value="audit">audit</option>
                  </select>
                </Field>
                <div class="form-actions">
                  <button type="button" class="secondary" disabled={i === 0} onClick={() => move(i, -1)}>Move call {i + 1} up</button>
                  <button type="button" class="secondary" disabled={i === calls.length - 1} onClick={() => move(i, 1)}>Move call {i + 1} down</button>
                  <button type="button" class="secondary" onClick={() => setCalls(calls.filter((_, j) => j !== i))}>Remove call {c.id.trim() || i + 1}</button>
                </div>
              </fieldset>
            );
          })}
          <div class="form-actions">
            <button type="button" class="secondary" onClick={() => setCalls([...calls, { key: nextKey(), id: '', name: '', method: '', values: {}, condition: '', foreach: '', when: '', mode: '' }])}>Add a call</button>
          </div>
        </fieldset>
        <SubmitBar busy={s.busy} mustReview={s.mustReview} error={s.error} onPropose={() => go('propose')} cancel={technique ? `#/techniques/${encodeURIComponent(technique.id)}` : '#/techniques'} />
      </form>
    </>
  );
}
