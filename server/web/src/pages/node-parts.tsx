/**
 * Parts of the node page that act or look further: "run now" with its output as it arrives, the
 * nodes behind a relay, and the node's custom facts with those that failed.
 */
import { useState } from 'preact/hooks';
import { get, post, type ListAnswer } from '../api';
import { href } from '../router';
import { Badge, ErrorBox, Section, Show, useGet, useInterval } from '../ui';
import type { NodeRow } from './nodes';

const enc = encodeURIComponent;

export interface Inventory { received_at: string; inventory: Record<string, any> }

interface Task { state: string; reason: string | null; message: string | null; output: string | null; exit_code: number | null; step: string | null }

const DONE = new Set(['done', 'failed', 'aborted']);

/**
 * "Run now": a remote-run job for this node, its output shown as it arrives (asked every second
 * from the line already shown on), and its task's end.
 */
export function RunNow({ id, name }: { id: string; name: string }) {
  const [job, setJob] = useState<string | null>(null);
  const [task, setTask] = useState<Task | null>(null);
  const [lines, setLines] = useState<string[]>([]);
  const [error, setError] = useState<unknown>(null);
  const running = job !== null && !(task && DONE.has(task.state));
  const poll = async () => {
    if (!job) return;
    try {
      const out = (await get<{ data: { lines: string[]; next: number; final: boolean } }>(`/api/1/jobs/${enc(job)}/tasks/${enc(id)}/output?after=${lines.length}`)).data;
      if (out.lines.length) setLines((l) => [...l, ...out.lines]);
      setTask((await get<{ data: Task }>(`/api/1/jobs/${enc(job)}/tasks/${enc(id)}`)).data);
    } catch (err) {
      setError(err);
    }
  };
  useInterval(poll, running ? 1000 : null);
  const start = async () => {
    setError(null);
    setTask(null);
    setLines([]);
    try {
      const r = await post<{ data: { id: string } }>('/api/1/jobs', { name: `run now: ${name}`, type: 'run', nodes: [id], keep_output: true });
      setJob(r.data.id);
    } catch (err) {
      setError(err);
    }
  };
  return (
    <div class="run-now">
      <button type="button" onClick={start} disabled={running}>{running ? 'Running…' : 'Run now'}</button>
      {job && <span aria-live="polite"> {task ? <><Badge value={task.state} kind={`t-${task.state}`} />{task.step && ` ${task.step}`}{task.reason && <> <code>{task.reason}</code></>} {task.message}</> : 'asking the node…'} <a href={`#/jobs/${enc(job)}`}>the job</a></span>}
      {lines.length > 0 && <pre class="output" aria-label="The run's output" aria-live="polite">{lines.join('\n')}</pre>}
      {error !== null && <ErrorBox error={error} />}
    </div>
  );
}

/** The nodes whose agents report this relay as theirs (their inventory's policy_server). */
export function BehindRelay({ id }: { id: string }) {
  const q = `fact:policy_server = ${id}`;
  const nodes = useGet<ListAnswer<NodeRow>>(`/api/1/nodes?${new URLSearchParams({ q, per_page: '100', sort: 'name' })}`);
  return (
    <Section title="Nodes behind this relay" id="behind">
      <Show f={nodes}>{(r) => (r.data.length === 0 ? <p class="muted">No node reports this relay as its own.</p> : (
        <>
          <ul class="columns">{r.data.map((n) => <li key={n.id}><a href={`#/nodes/${enc(n.id)}`}>{n.name}</a> <span class={`badge b-${n.status}`}>{n.status}</span></li>)}</ul>
          <p>{r.total} in all · <a href={href('/nodes', { q })}>Open in the node list</a></p>
        </>
      ))}</Show>
    </Section>
  );
}

/** Custom facts (facts.d) and the facts that could not be read, from the newest inventory. */
export function CustomFacts({ inv }: { inv: Inventory }) {
  const facts = (inv.inventory.facts ?? {}) as Record<string, unknown>;
  const errors = (inv.inventory.facts_errors ?? {}) as Record<string, unknown>;
  return (
    <>
      {Object.keys(facts).length === 0 ? <p class="muted">No custom fact (files and executables in <code>/etc/capstan/facts.d/</code>).</p> : (
        <table class="compact"><thead><tr><th scope="col">Fact</th><th scope="col">Value</th></tr></thead>
          <tbody>{Object.entries(facts).map(([k, v]) => <tr key={k}><th scope="row"><code>{k}</code></th><td><code>{typeof v === 'string' ? v : JSON.stringify(v)}</code></td></tr>)}</tbody></table>
      )}
      {Object.keys(errors).length > 0 && (
        <>
          <h3>Facts that failed</h3>
          <table class="compact"><thead><tr><th scope="col">Source</th><th scope="col">Error</th></tr></thead>
            <tbody>{Object.entries(errors).map(([k, v]) => <tr key={k}><th scope="row"><code>{k}</code></th><td class="warn">{typeof v === 'string' ? v : JSON.stringify(v)}</td></tr>)}</tbody></table>
        </>
      )}
    </>
  );
}

