/**
 * A directive's form, made from its method's parameter docs (GET /api/1/methods, the same specs
 * the server and the agent validate with): one labelled input per parameter by its type (text,
 * lines of text, a choice, a number, a yes/no, a list one item a line, a map as JSON), required
 * ones marked; the API's refusal of a parameter is shown under its input.
 */
import { useState } from 'preact/hooks';
import type { ListAnswer } from '../api';
import { Show, useGet } from '../ui';
import type { Directive } from './directives';
import { Field, inputProps, SubmitBar, usePolicySubmit, IdAndName } from './edit-common';
import type { Technique } from './techniques';

export interface ParamDoc { name: string; type: 'string' | 'list' | 'boolean' | 'number' | 'map'; description: string; required?: boolean; default?: unknown; values?: string[]; multiline?: boolean; internal?: boolean }
export interface Method { name: string; audit_only: boolean; params: ParamDoc[] }

/** The method a directive names to instantiate a saved technique. */
export const TECHNIQUE = 'technique';

/** A technique's parameters as the form's parameter docs (their types are the methods' types). */
export const techniqueDocs = (t: Technique): ParamDoc[] => t.parameters.map((p) => ({
  name: p.name, type: p.type as ParamDoc['type'], description: p.description ?? `A ${p.type} parameter of ${t.name || t.id}.`,
  ...(p.required !== undefined && { required: p.required }), ...(p.default !== undefined && { default: p.default }),
}));

/** A parameter's value as the form holds it (text), from the saved value. */
export function toText(d: ParamDoc, v: unknown): string {
  if (v === undefined || v === null) return '';
  if (d.type === 'list' && Array.isArray(v)) return v.map(String).join('\n');
  if (d.type === 'map' || (typeof v === 'object')) return JSON.stringify(v, null, 2);
  return String(v);
}

/** The form's text back to the parameter's value; undefined: left out. Throws a message for the field. */
export function fromText(d: ParamDoc, text: string): unknown {
  if (text.trim() === '' && d.type !== 'string') return undefined;
  if (text === '') return undefined;
  switch (d.type) {
    case 'number': {
      const n = Number(text);
      if (!Number.isFinite(n)) throw new Error('must be a number');
      return n;
    }
    case 'boolean': return text === 'true';
    case 'list': return text.split('\n').map((l) => l.trim()).filter((l) => l !== '');
    case 'map': {
      try {
        const v = JSON.parse(text) as unknown;
        if (!v || typeof v !== 'object' || Array.isArray(v)) throw new Error();
        return v;
      } catch {
        throw new Error('must be a JSON object, such as {"key": "value"}');
      }
    }
    default: return text;
  }
}

export function ParamInput({ d, value, set, error, prefix = 'params' }: { d: ParamDoc; value: string; set: (v: string) => void; error?: string; prefix?: string }) {
  const path = `${prefix}.${d.name}`;
  const p = inputProps(path, error, true);
  const onInput = (e: Event) => set((e.target as HTMLInputElement).value);
  const dflt = d.default === undefined ? '' : ` (default ${JSON.stringify(d.default)})`;
  const label = <><code>{d.name}</code>{d.required ? <span class="req"> required</span> : ''}</>;
  const hint = `${d.description}${dflt}${d.type === 'list' ? ' One a line.' : d.type === 'map' ? ' As JSON.' : ''}`;
  let input;
  if (d.values) {
    input = <select {...p} value={value} onChange={onInput} required={d.required}>{!d.required && <option value="">default</option>}{d.values.map((v) => <option key={v} value={v}>{v}</option>)}</select>;
  } else if (d.type === 'boolean') {
    input = <select {...p} value={value} onChange={onInput}><option value="">default</option><option value="true">true</option><option value="false">false</option></select>;
  } else if (d.multiline || d.type === 'list' || d.type === 'map') {
    input = <textarea {...p} value={value} onInput={onInput} rows={d.multiline ? 8 : 3} required={d.required} spellcheck={false} />;
  } else {
    input = d.type === 'number'
      ? <input {...p} type="number" value={value} onInput={onInput} required={d.required} />
      : <input {...p} type="text" value={value} onInput={onInput} required={d.required} spellcheck={false} autocomplete="off" />;
  }
  return <Field path={path} label={label} hint={hint} error={error}>{input}</Field>;
}

/** `technique`: a new directive from that technique (its page's "New directive from it"). */
export function DirectiveForm({ directive, technique: preset }: { directive: Directive | null; technique?: string }) {
  const methods = useGet<ListAnswer<Method>>('/api/1/methods');
  const techniques = useGet<ListAnswer<Technique>>('/api/1/techniques');
  const [techniqueId, setTechniqueId] = useState(directive?.technique?.id ?? preset ?? '');
  const s = usePolicySubmit('directive', directive?.id ?? null);
  const [id, setId] = useState(directive?.id ?? '');
  const [name, setName] = useState(directive?.name ?? '');
  const [method, setMethod] = useState(directive?.method ?? (preset ? TECHNIQUE : ''));
  const [mode, setMode] = useState(directive?.mode ?? 'enforce');
  const [condition, setCondition] = useState(directive?.condition ?? '');
  const [values, setValues] = useState<Record<string, string>>({});
  const [touched, setTouched] = useState(false);
  const technique = method === TECHNIQUE ? techniques.data?.data.find((t) => t.id === techniqueId) : undefined;
  const spec: Method | undefined = technique ? { name: technique.id, audit_only: false, params: techniqueDocs(technique) } : methods.data?.data.find((m) => m.name === method);
  // The saved parameters become the form's text once the method's docs are known.
  if (spec && !touched && directive && directive.method === method && (directive.technique?.id ?? '') === (technique?.id ?? '') && Object.keys(values).length === 0 && Object.keys(directive.params).length > 0) {
    setValues(Object.fromEntries(spec.params.map((d) => [d.name, toText(d, directive.params[d.name])])));
  }
  const body = (): Record<string, unknown> | null => {
    const params: Record<string, unknown> = {};
    const bad: Record<string, string> = {};
    for (const d of spec?.params ?? []) {
      if (d.internal) continue;
      try {
        const v = fromText(d, values[d.name] ?? '');
        if (v !== undefined) params[d.name] = v;
      } catch (err) {
        bad[`params.${d.name}`] = `${d.name} ${(err as Error).message}`;
      }
    }
    if (Object.keys(bad).length) {
      s.setFields(bad);
      return null;
    }
    return {
      id: id.trim(), name: name.trim() || id.trim(), method, mode, params, ...(condition.trim() && { condition: condition.trim() }),
      ...(method === TECHNIQUE && { technique: { id: techniqueId, version: technique?.version ?? directive?.technique?.version ?? '' } }),
    };
  };
  const go = (how: 'save' | 'propose') => {
    const b = body();
    if (b) void s.submit(b, how, `${directive ? 'Edit' : 'Create'} directive ${b.id as string}`);
  };
  const f = s.fields;
  return (
    <>
      <h1>{directive ? `Edit directive ${directive.name || directive.id}` : 'New directive'}</h1>
      <Show f={methods}>{(ms) => (<Show f={techniques}>{(ts) => (
        <form class="card edit" onSubmit={(e) => { e.preventDefault(); go('save'); }} aria-label="Directive">
          <IdAndName isNew={!directive} idHint="Letters, digits, _ . - ; it travels in every report." id={id} setId={setId} name={name} setName={setName} fields={f} />
          <Field path="method" label="Method" hint={spec?.audit_only ? 'This method only checks: it reports audit states even in enforce mode.' : 'The generic method the directive applies.'} error={f.method}>
            <select {...inputProps('method', f.method, true)} value={method} required onChange={(e) => { setMethod((e.target as HTMLSelectElement).value); setValues({}); setTouched(true); }}>
              <option value="">choose a method</option>
              {ts.data.length > 0 && <option value={TECHNIQUE}>technique: a saved technique</option>}
              {ms.data.map((m) => <option key={m.name} value={m.name}>{m.name}</option>)}
            </select>
          </Field>
          {method === TECHNIQUE && (
            <Field path="technique.id" label="Technique" hint="The directive follows the technique's versions: it is saved against the current one." error={f['technique.id'] ?? f['technique.version']}>
              <select {...inputProps('technique.id', f['technique.id'] ?? f['technique.version'], true)} value={techniqueId} required
                onChange={(e) => { setTechniqueId((e.target as HTMLSelectElement).value); setValues({}); setTouched(true); }}>
                <option value="">choose a technique</option>
                {ts.data.map((t) => <option key={t.id} value={t.id}>{t.name && t.name !== t.id ? `${t.name} (${t.id})` : t.id} {t.version}</option>)}
              </select>
            </Field>
          )}
          <Field path="mode" label="Mode" hint="enforce repairs drift; audit only reports it." error={f.mode}>
            <select {...inputProps('mode', f.mode, true)} value={mode} onChange={(e) => setMode((e.target as HTMLSelectElement).value)}>
              <option value="enforce">enforce</option><option value="audit">audit</option>
            </select>
          </Field>
          <Field path="condition" label="Condition" hint={<>Where it applies, evaluated on the node: <code>fact('os.name') == 'debian'</code>; empty: everywhere.</>} error={f.condition}>
            <input {...inputProps('condition', f.condition, true)} value={condition} onInput={(e) => setCondition((e.target as HTMLInputElement).value)} spellcheck={false} autocomplete="off" />
          </Field>
          {spec && (
            <fieldset class="params">
              <legend>Parameters of {technique ? 'technique ' : ''}<code>{spec.name}</code></legend>
              {technique && technique.parameters.length === 0 && <p class="muted">The technique has no parameter.</p>}
              {f.params && <p class="field-error" role="alert">{f.params}</p>}
              {spec.params.filter((d) => !d.internal).map((d) => (
                <ParamInput key={d.name} d={d} value={values[d.name] ?? ''} error={f[`params.${d.name}`]}
                  set={(v) => { setTouched(true); setValues({ ...values, [d.name]: v }); }} />
              ))}
            </fieldset>
          )}
          <SubmitBar busy={s.busy} mustReview={s.mustReview} error={s.error} onPropose={() => go('propose')} cancel={directive ? `#/directives/${encodeURIComponent(directive.id)}` : '#/directives'} />
        </form>
      )}</Show>)}</Show>
    </>
  );
}
