/**
 * Directives: the list with compliance over the rules using each, and one directive's page: what
 * it does (its method, mode, condition and every parameter), the rules using it with their
 * compliance, and a link to the nodes under it in each rule.
 */
import type { ListAnswer } from '../api';
import { useCanWrite } from '../me';
import { href } from '../router';
import { ComplianceBar, Facts, Percent, Section, Show, useGet } from '../ui';
import { DirectiveForm } from './edit-directive';
import { ReadOnly } from './edit-common';
import type { DirRow, Rule } from './rules';

export interface Directive { id: string; name?: string; method: string; mode?: string; condition?: string; params: Record<string, unknown>; technique?: { id: string; version: string }; updated_at?: string }

const enc = encodeURIComponent;

/** Counts summed over rows (a directive's compliance over the rules using it). */
function summed(rows: DirRow[]): { counts: Record<string, number>; compliance: number | null } {
  const counts: Record<string, number> = {};
  for (const r of rows) for (const [k, v] of Object.entries(r.counts)) counts[k] = (counts[k] ?? 0) + v;
  const total = Object.values(counts).reduce((s, v) => s + v, 0);
  const good = (counts.success ?? 0) + (counts.repaired ?? 0) + (counts.audit_compliant ?? 0) + (counts.not_applicable ?? 0);
  return { counts, compliance: total > 0 ? Math.round((good / total) * 10000) / 100 : null };
}

export function DirectivesPage() {
  const canWrite = useCanWrite();
  const dirs = useGet<ListAnswer<Directive>>('/api/1/directives');
  const comp = useGet<ListAnswer<DirRow>>('/api/1/compliance/directives?max_age=60');
  return (
    <>
      <h1>Directives {canWrite && <a class="button" href="#/directives/new/edit">New directive</a>}</h1>
      <Show f={dirs}>{(d) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Directive</th><th scope="col">Method</th><th scope="col">Mode</th><th scope="col">In rules</th><th scope="col">Compliance</th></tr></thead>
          <tbody>
            {d.data.length === 0 && <tr><td colSpan={5} class="muted">No directive yet.</td></tr>}
            {d.data.map((x) => {
              const rows = comp.data?.data.filter((r) => r.directive_id === x.id) ?? [];
              const s = summed(rows);
              return (
                <tr key={x.id}>
                  <th scope="row"><a href={`#/directives/${enc(x.id)}`}>{x.name || x.id}</a><br /><code class="muted small">{x.id}</code></th>
                  <td><code>{x.method}</code></td>
                  <td>{x.mode ?? 'enforce'}</td>
                  <td>{rows.map((r, i) => <>{i > 0 && ', '}<a href={`#/rules/${enc(r.rule_id)}`}>{r.rule_id}</a></>)}</td>
                  <td>{s.compliance !== null ? <><Percent value={s.compliance} /> <ComplianceBar counts={s.counts} /></> : <span class="muted">no data</span>}</td>
                </tr>
              );
            })}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}

/** A parameter's value as text: strings as they are (multi-line kept), anything else as JSON. */
export function ParamValue({ v }: { v: unknown }) {
  if (typeof v === 'string') return v.includes('\n') ? <pre class="output">{v}</pre> : <code>{v}</code>;
  return <code>{JSON.stringify(v)}</code>;
}

export function DirectivePage({ id }: { id: string }) {
  const canWrite = useCanWrite();
  const dir = useGet<{ data: Directive }>(`/api/1/directives/${enc(id)}`);
  const rules = useGet<ListAnswer<Rule>>('/api/1/rules');
  const comp = useGet<ListAnswer<DirRow>>('/api/1/compliance/directives?max_age=60');
  const rows = comp.data?.data.filter((r) => r.directive_id === id) ?? [];
  const using = rules.data?.data.filter((r) => r.directives.includes(id)) ?? [];
  const s = summed(rows);
  return (
    <Show f={dir}>{({ data: d }) => (
      <>
        <h1>Directive {d.name || d.id} {canWrite && <a class="button" href={`#/directives/${enc(id)}/edit`}>Edit</a>}</h1>
        <p class="big"><Percent value={s.compliance} /></p>
        <ComplianceBar counts={s.counts} label="this directive" />
        <Facts items={[['Id', <code>{d.id}</code>], ['Method', <code>{d.method}</code>],
          ['Technique', d.technique && <><a href={`#/techniques/${enc(d.technique.id)}`}>{d.technique.id}</a> {d.technique.version}</>],
          ['Mode', d.mode ?? 'enforce'], ['Condition', d.condition && <code>{d.condition}</code>]]} />
        <Section title="Parameters" id="params">
          {Object.keys(d.params).length === 0 ? <p class="muted">None.</p> : (
            <table class="compact">
              <thead><tr><th scope="col">Parameter</th><th scope="col">Value</th></tr></thead>
              <tbody>{Object.entries(d.params).map(([k, v]) => <tr key={k}><th scope="row"><code>{k}</code></th><td><ParamValue v={v} /></td></tr>)}</tbody>
            </table>
          )}
        </Section>
        <Section title="Rules using it" id="rules">
          {using.length === 0 ? <p class="muted">No rule uses this directive: no node applies it.</p> : (
            <table class="compact">
              <thead><tr><th scope="col">Rule</th><th scope="col">Nodes</th><th scope="col">Compliance</th><th scope="col"><span class="sr">Drill down</span></th></tr></thead>
              <tbody>{using.map((r) => {
                const x = rows.find((y) => y.rule_id === r.id);
                return (
                  <tr key={r.id}>
                    <th scope="row"><a href={`#/rules/${enc(r.id)}`}>{r.name || r.id}</a></th>
                    <td>{x?.nodes ?? 0}</td>
                    <td>{x ? <><Percent value={x.compliance} /> <ComplianceBar counts={x.counts} /></> : <span class="muted">no data</span>}</td>
                    <td><a href={href(`/rules/${r.id}`, { directive: id })}>its nodes</a></td>
                  </tr>
                );
              })}</tbody>
            </table>
          )}
        </Section>
      </>
    )}</Show>
  );
}

export function DirectiveEditPage({ id, technique }: { id: string | null; technique?: string | null }) {
  const canWrite = useCanWrite();
  const dir = useGet<{ data: Directive }>(id === null || !canWrite ? null : `/api/1/directives/${enc(id)}`);
  if (!canWrite) return <ReadOnly what="directives" />;
  if (id !== null && !dir.data) return <Show f={dir}>{() => null}</Show>;
  return <DirectiveForm directive={dir.data?.data ?? null} {...(technique && { technique })} />;
}
