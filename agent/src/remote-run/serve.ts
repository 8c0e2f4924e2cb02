/**
 * `capstan-agent listen`: hold the remote-run connection and answer each trigger with a normal
 * agent run (runAgent), streaming its directive outcomes and summary back when asked. The
 * conditions of the trigger reach the run's commands as CAPSTAN_CONDITIONS (comma separated); the
 * condition `force_inventory` also sends the inventory whether it is due or not.
 */
import type { Logger } from '@capstan/shared/log';
import type { AgentConfig } from '../config.js';
import { ensureIdentity } from '../identity/state.js';
import { TokenKeeper } from '../identity/token.js';
import { runAgent } from '../run.js';
import { runUpgrade } from '../upgrade/serve.js';
import { listen, type RunOutput, type RunRequest } from './listen.js';

export async function serveRemoteRuns(config: AgentConfig, log: Logger, signal?: AbortSignal): Promise<void> {
  const id = await ensureIdentity(config.agent.state_dir, config.agent.key_bits);
  const run = async (req: RunRequest, out: RunOutput): Promise<number> => {
    if (req.upgrade) return runUpgrade(config, log, req.upgrade, out);
    const r = await runAgent(config, log, {
      onOutcome: (line) => out.line(line),
      env: { ...process.env, CAPSTAN_CONDITIONS: req.conditions.join(',') },
      // An inventory job (server jobs of type inventory) asks for the inventory whether due or not.
      forceInventory: req.conditions.includes('force_inventory'),
    });
    const c = r.counts;
    const errors = (c.result_error ?? 0) + (c.audit_error ?? 0);
    if (r.inventorySent) out.line('inventory sent');
    out.line(`config ${r.configId}: ${c.result_success ?? 0} success, ${c.result_repaired ?? 0} repaired, ${errors} errors; sent ${r.flush.sent}, queued ${r.flush.remaining}`);
    return errors > 0 ? 4 : 0;
  };
  // The connection carries the node's token (relays require it); the same token file as the
  // runs, so whichever renews first, the other reads the new token.
  const auth = new TokenKeeper({ relay: config.agent.relay, stateDir: config.agent.state_dir, timeoutMs: config.agent.timeout, id, log, clock: () => new Date() });
  await listen({ relay: config.agent.relay, nodeId: id.nodeId, log, run, signal, auth });
}
