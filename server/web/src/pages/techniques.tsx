/**
 * Techniques: the list (version, parameters, calls, the directives using each), one technique's
 * page — its parameters and its calls in order, with their loops and conditions — and its form
 * (edit-technique.tsx) for those who may change policy.
 */
import type { ListAnswer } from '../api';
import { useCanWrite } from '../me';
import { Facts, Section, Show, useGet } from '../ui';
import { ParamValue, type Directive } from './directives';
import { TechniqueForm } from './edit-technique';
import { ReadOnly } from './edit-common';

export interface TechniqueParameter { name: string; type: string; default?: unknown; required?: boolean; description?: string }
export interface TechniqueCall { id: string; name?: string; method: string; params: Record<string, unknown>; condition?: string; foreach?: string; if?: string; mode?: string }
export interface Technique { id: string; name: string; version: string; description?: string; parameters: TechniqueParameter[]; calls: TechniqueCall[]; updated_at?: string }

const enc = encodeURIComponent;

/** The directives instantiating technique `id`. */
const usersOf = (dirs: Directive[] | undefined, id: string) => (dirs ?? []).filter((d) => d.method === 'technique' && d.technique?.id === id);

export function TechniquesPage() {
  const canWrite = useCanWrite();
  const list = useGet<ListAnswer<Technique>>('/api/1/techniques');
  const dirs = useGet<ListAnswer<Directive>>('/api/1/directives');
  return (
    <>
      <h1>Techniques {canWrite && <a class="button" href="#/techniques/new/edit">New technique</a>}</h1>
      <p class="muted">Also saved with <code>capstan techniques update</code>, <code>capstan policy apply</code> or <code>PUT /api/1/techniques/&lt;id&gt;</code>.</p>
      <Show f={list}>{(l) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Technique</th><th scope="col">Version</th><th scope="col">Parameters</th><th scope="col">Calls</th><th scope="col">Directives</th></tr></thead>
          <tbody>
            {l.data.length === 0 && <tr><td colSpan={5} class="muted">No technique yet.</td></tr>}
            {l.data.map((t) => (
              <tr key={t.id}>
                <th scope="row"><a href={`#/techniques/${enc(t.id)}`}>{t.name || t.id}</a><br /><code class="muted small">{t.id}</code></th>
                <td>{t.version}</td>
                <td>{t.parameters.map((p) => p.name).join(', ')}</td>
                <td>{t.calls.length}</td>
                <td>{usersOf(dirs.data?.data, t.id).map((d, i) => <>{i > 0 && ', '}<a href={`#/directives/${enc(d.id)}`}>{d.id}</a></>)}</td>
              </tr>
            ))}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}

export function TechniquePage({ id }: { id: string }) {
  const canWrite = useCanWrite();
  const tech = useGet<{ data: Technique }>(`/api/1/techniques/${enc(id)}`);
  const dirs = useGet<ListAnswer<Directive>>('/api/1/directives');
  return (
    <Show f={tech}>{({ data: t }) => (
      <>
        <h1>Technique {t.name || t.id} {canWrite && <a class="button" href={`#/techniques/${enc(t.id)}/edit`}>Edit</a>}
          {canWrite && <a class="button" href={`#/directives/new/edit?technique=${enc(t.id)}`}>New directive from it</a>}</h1>
        {t.description && <p>{t.description}</p>}
        <Facts items={[['Id', <code>{t.id}</code>], ['Version', t.version], ['Saved', t.updated_at],
          ['Directives', usersOf(dirs.data?.data, t.id).map((d, i) => <>{i > 0 && ', '}<a href={`#/directives/${enc(d.id)}`}>{d.id}</a></>)]]} />
        <Section title="Parameters" id="parameters">
          {t.parameters.length === 0 ? <p class="muted">None.</p> : (
            <table class="compact">
              <thead><tr><th scope="col">Parameter</th><th scope="col">Type</th><th scope="col">Default</th><th scope="col">Required</th></tr></thead>
              <tbody>{t.parameters.map((p) => (
                <tr key={p.name}><th scope="row"><code>{p.name}</code>{p.description && <><br /><span class="muted small">{p.description}</span></>}</th>
                  <td>{p.type}</td><td>{p.default !== undefined && <ParamValue v={p.default} />}</td><td>{p.required ? 'yes' : ''}</td></tr>
              ))}</tbody>
            </table>
          )}
        </Section>
        <Section title="Calls, in order" id="calls">
          <table class="compact">
            <thead><tr><th scope="col">Call</th><th scope="col">Method</th><th scope="col">Parameters</th><th scope="col">When</th></tr></thead>
            <tbody>{t.calls.map((c) => (
              <tr key={c.id}>
                <th scope="row"><code>{c.id}</code>{c.name && <><br />{c.name}</>}</th>
                <td><code>{c.method}</code>{c.mode && <> ({c.mode})</>}</td>
                <td>{Object.entries(c.params).map(([k, v]) => <div key={k}><code>{k}</code>: <ParamValue v={v} /></div>)}</td>
                <td>{[c.foreach && `for each of ${c.foreach}`, c.condition && `if node: ${c.condition}`, c.if && `if result: ${c.if}`].filter(Boolean).join('; ')}</td>
              </tr>
            ))}</tbody>
          </table>
        </Section>
      </>
    )}</Show>
  );
}

export function TechniqueEditPage({ id }: { id: string | null }) {
  const canWrite = useCanWrite();
  const tech = useGet<{ data: Technique }>(id === null || !canWrite ? null : `/api/1/techniques/${enc(id)}`);
  if (!canWrite) return <ReadOnly what="techniques" />;
  if (id !== null && !tech.data) return <Show f={tech}>{() => null}</Show>;
  return <TechniqueForm technique={tech.data?.data ?? null} />;
}
