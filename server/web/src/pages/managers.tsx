/** Providers and managers: what discovers nodes, when it last polled, and what went wrong. */
import type { ListAnswer } from '../api';
import { href } from '../router';
import { Show, Time, useGet } from '../ui';

interface Manager { id: string; name: string; type: string; provider: string; poll_interval?: string | number; last_poll_at: string | null; last_poll_error: string | null; [k: string]: unknown }

export function ManagersPage() {
  const managers = useGet<{ data: Manager[] }>('/api/1/managers');
  return (
    <>
      <h1>Providers and managers</h1>
      <Show f={managers}>{(r) => (
        <div class="table-wrap"><table class="list">
          <thead><tr><th scope="col">Manager</th><th scope="col">Type</th><th scope="col">Provider</th><th scope="col">Poll interval</th><th scope="col">Last poll</th><th scope="col">Result</th><th scope="col">Nodes</th></tr></thead>
          <tbody>
            {r.data.length === 0 && <tr><td colSpan={7} class="muted">No manager (POST /api/1/managers; docs/providers.md).</td></tr>}
            {r.data.map((m) => (
              <tr key={m.id}>
                <th scope="row">{m.name || m.id}<br /><code class="muted small">{m.id}</code></th>
                <td>{m.type}</td>
                <td>{m.provider === 'server' ? 'server' : <a href={`#/nodes/${encodeURIComponent(m.provider)}`}>{m.provider}</a>}</td>
                <td>{String(m.poll_interval ?? '—')}</td>
                <td><Time iso={m.last_poll_at} /></td>
                <td>{!m.last_poll_at ? <span class="muted">not polled yet</span> : m.last_poll_error ? <span class="badge b-error">error</span> : <span class="badge b-reachable">ok</span>}
                  {m.last_poll_error && <pre class="output small">{m.last_poll_error}</pre>}</td>
                <td><a href={href('/nodes', { managed_by: m.id })}>nodes</a></td>
              </tr>
            ))}
          </tbody>
        </table></div>
      )}</Show>
    </>
  );
}
