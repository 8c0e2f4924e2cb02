/** Jobs: their progress, live (polled while a job runs), and each node's task with its output. */
import { post, type ListAnswer } from '../api';
import { useCanWrite } from '../me';
import { navigate } from '../router';
import { Badge, ErrorBox, Facts, Pager, Show, Time, useGet, useInterval } from '../ui';
import { useState } from 'preact/hooks';

const TASK_STATES = ['pending', 'scheduled', 'in_progress', 'done', 'failed', 'aborted'] as const;
type Progress = Record<string, number> & { total: number };
interface Job { id: string; name: string; type: string; state: string; created_at: string; finished_at: string | null; deadline_at: string; keep_output: boolean; progress: Progress; nodes: string[] }
interface Task { node_id: string; state: string; reason: string | null; message: string | null; relay: string | null; exit_code: number | null; output: string | null; step: string | null; updated_at: string }

/** Live progress: poll this often while anything is still running. */
const POLL_MS = 2000;

function ProgressBar({ p }: { p: Progress }) {
  const text = TASK_STATES.filter((s) => p[s]).map((s) => `${p[s]} ${s.replace('_', ' ')}`).join(', ');
  return (
    <div class="progress" role="progressbar" aria-valuemin={0} aria-valuemax={p.total} aria-valuenow={(p.done ?? 0) + (p.failed ?? 0) + (p.aborted ?? 0)} aria-valuetext={text} title={text}>
      {TASK_STATES.filter((s) => p[s]).map((s) => <span key={s} class={`seg t-${s}`} style={{ width: `${(p[s]! / Math.max(1, p.total)) * 100}%` }} />)}
    </div>
  );
}

export function JobsPage({ params }: { params: URLSearchParams }) {
  const page = Math.max(1, Number(params.get('page') ?? 1) || 1);
  const state = params.get('state') ?? '';
  const jobs = useGet<ListAnswer<Job>>(`/api/1/jobs?per_page=50&page=${page}${state ? `&state=${state}` : ''}`);
  useInterval(jobs.reload, jobs.data?.data.some((j) => j.state === 'running') ? POLL_MS : null);
  return (
    <>
      <h1>Jobs</h1>
      <nav class="seg-ctl" aria-label="Job state">
        {['', 'running', 'finished', 'cancelled'].map((s) => <a key={s} href={`#/jobs${s ? `?state=${s}` : ''}`} aria-current={s === state ? 'true' : undefined}>{s || 'all'}</a>)}
      </nav>
      <Show f={jobs}>{(r) => (
        <>
          <div class="table-wrap"><table class="list">
            <thead><tr><th scope="col">Job</th><th scope="col">Type</th><th scope="col">State</th><th scope="col">Progress</th><th scope="col">Created</th></tr></thead>
            <tbody>
              {r.data.length === 0 && <tr><td colSpan={5} class="muted">No job (POST /api/1/jobs).</td></tr>}
              {r.data.map((j) => (
                <tr key={j.id}>
                  <th scope="row"><a href={`#/jobs/${encodeURIComponent(j.id)}`}>{j.name}</a></th>
                  <td>{j.type}</td><td><Badge value={j.state} /></td>
                  <td><ProgressBar p={j.progress} /> <span class="small">{(j.progress.done ?? 0)}/{j.progress.total} done{j.progress.failed ? `, ${j.progress.failed} failed` : ''}</span></td>
                  <td><Time iso={j.created_at} /></td>
                </tr>
              ))}
            </tbody>
          </table></div>
          <Pager total={r.total} page={page} perPage={50} go={(p) => navigate('/jobs', { ...(state && { state }), page: String(p) })} />
        </>
      )}</Show>
    </>
  );
}

export function JobPage({ id }: { id: string }) {
  const canWrite = useCanWrite();
  const job = useGet<{ data: Job & { tasks: Task[] } }>(`/api/1/jobs/${encodeURIComponent(id)}`);
  const [error, setError] = useState<unknown>(null);
  useInterval(job.reload, job.data?.data.state === 'running' ? POLL_MS : null);
  return (
    <Show f={job}>{({ data: j }) => (
      <>
        <h1>Job {j.name} <Badge value={j.state} /></h1>
        <ProgressBar p={j.progress} />
        <p aria-live="polite">{j.progress.done ?? 0} done, {j.progress.failed ?? 0} failed, {j.progress.aborted ?? 0} aborted of {j.progress.total}{j.state === 'running' ? ' · updating every 2 s' : ''}</p>
        <Facts items={[['Id', <code>{j.id}</code>], ['Type', j.type], ['Created', <Time iso={j.created_at} />], ['Deadline', <Time iso={j.deadline_at} />], ['Finished', <Time iso={j.finished_at} />]]} />
        {canWrite && j.state === 'running' && (
          <p><button type="button" class="danger" onClick={async () => {
            try {
              await post(`/api/1/jobs/${encodeURIComponent(j.id)}/cancel`);
              job.reload();
            } catch (err) {
              setError(err);
            }
          }}>Cancel the job</button></p>
        )}
        {error !== null && <ErrorBox error={error} />}
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Node</th><th scope="col">State</th><th scope="col">Relay</th><th scope="col">Exit</th><th scope="col">Message</th><th scope="col">Updated</th></tr></thead>
          <tbody>{j.tasks.map((t) => (
            <tr key={t.node_id}>
              <th scope="row"><a href={`#/nodes/${encodeURIComponent(t.node_id)}`}>{t.node_id}</a></th>
              <td><Badge value={t.state} kind={`t-${t.state}`} />{t.step && <span class="small"> {t.step}</span>}</td>
              <td>{t.relay ?? '—'}</td><td>{t.exit_code ?? '—'}</td>
              <td>{t.reason && <code>{t.reason}</code>} {t.message}{t.output && <details><summary>Output</summary><pre class="output">{t.output}</pre></details>}</td>
              <td><Time iso={t.updated_at} /></td>
            </tr>
          ))}</tbody>
        </table></div>
      </>
    )}</Show>
  );
}
